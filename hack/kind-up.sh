#!/usr/bin/env bash
# Lyra on kind, for users with Docker: a cluster shaped like Lyra's pools (kind-config.yaml: two A100 training
# servers, two T4 inference servers), run.ai's fake-gpu-operator giving them fake nvidia.com/gpu devices and GPU
# feature discovery labels, Lyra's image built and loaded, and the chart installed.
#
# Needs docker, kind, kubectl and helm on PATH. Settings (environment):
#   LYRA_IMAGE                  image to build and load (default lyra:<chart appVersion>)
#   FAKE_GPU_OPERATOR_VERSION   chart version of the fake-gpu-operator (default: the newest)
#   KIND_CLUSTER                cluster name (default: the name in kind-config.yaml, lyra)
# It cannot run in this project's CI (no container engine there); tests/unit/deploy checks its structure.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${KIND_CLUSTER:-lyra}"
APP_VERSION="$(awk '/^appVersion:/ {gsub(/"/, "", $2); print $2}' helm/lyra/Chart.yaml)"
IMAGE="${LYRA_IMAGE:-lyra:${APP_VERSION}}"
NAMESPACE=lyra-system
GPU_OPERATOR_CHART=oci://ghcr.io/run-ai/fake-gpu-operator/fake-gpu-operator
step() { printf '\n== %s\n' "$*"; }

for tool in docker kind kubectl helm; do
    command -v "$tool" >/dev/null || { echo "kind-up: $tool is not on PATH" >&2; exit 1; }
done

step "kind cluster ${CLUSTER} (kind-config.yaml)"
if ! kind get clusters | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --config kind-config.yaml --wait 120s
fi
kubectl config use-context "kind-${CLUSTER}"

step "fake GPUs: run.ai's fake-gpu-operator, one pool per GPU type (the pools of kind-config.yaml)"
version_flag=()
if [[ -n "${FAKE_GPU_OPERATOR_VERSION:-}" ]]; then version_flag=(--version "$FAKE_GPU_OPERATOR_VERSION"); fi
helm upgrade --install gpu-operator "$GPU_OPERATOR_CHART" "${version_flag[@]}" \
    --namespace gpu-operator --create-namespace --wait \
    --set topology.nodePoolLabelKey=run.ai/simulated-gpu-node-pool \
    --set topology.nodePools.a100.gpuProduct=NVIDIA-A100-SXM4-80GB \
    --set topology.nodePools.a100.gpuCount=8 \
    --set topology.nodePools.a100.gpuMemory=81920 \
    --set topology.nodePools.t4.gpuProduct=Tesla-T4 \
    --set topology.nodePools.t4.gpuCount=8 \
    --set topology.nodePools.t4.gpuMemory=15360
kubectl wait --for=jsonpath='{.status.allocatable.nvidia\.com/gpu}'=8 node \
    -l lyra.dev/pool --timeout=300s

step "Lyra's image ${IMAGE}"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "Lyra's chart (helm/lyra) in ${NAMESPACE}"
helm upgrade --install lyra helm/lyra --namespace "$NAMESPACE" --create-namespace --wait \
    --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never
kubectl -n "$NAMESPACE" get deployments,pods
echo
echo "Next: kubectl apply -f examples/ (docs/user-guide.md); kind delete cluster --name ${CLUSTER} when done."
