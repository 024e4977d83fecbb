#!/usr/bin/env bash
# Capture the request bodies that the real kube-scheduler sends to the extender, as unit-test fixtures.
#   bash hack/capture-extender-fixtures.sh      (writes tests/unit/extender/fixtures/)
# A local cluster (default profile) with inference-t4-6 and -7 loaned; the extender records what it receives while
# an inference replica, a base worker, flexible workers and (to trigger the preempt verb) a high-priority flexible
# worker on full loaned servers are scheduled. The cluster's nodes and pods are saved beside the bodies, so the
# tests rebuild the extender's view exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=(uv run --locked)
OUT=tests/unit/extender/fixtures
STATE_DIR="$(mktemp -d -t lyra-capture.XXXXXX)"
export LYRA_STATE_DIR="$STATE_DIR"
CAPTURE="$STATE_DIR/bodies"
EXTENDER_PID=""
cleanup() {
    if [ -n "$EXTENDER_PID" ]; then kill "$EXTENDER_PID" 2>/dev/null || true; wait "$EXTENDER_PID" 2>/dev/null || true; fi
    "${RUN[@]}" lyra cluster down >/dev/null || true
    rm -rf "$STATE_DIR"
}
trap cleanup EXIT
"${RUN[@]}" lyra cluster up >/dev/null
kubectl() { "${RUN[@]}" lyra cluster kubectl -- "$@"; }
kubectl label node inference-t4-6 inference-t4-7 lyra.dev/state=loaned --overwrite >/dev/null
"${RUN[@]}" lyra extender --kubeconfig "$STATE_DIR/cluster/default/kubeconfig" --capture-dir "$CAPTURE" \
    > "$STATE_DIR/extender.log" 2>&1 &
EXTENDER_PID=$!
# Poll /readyz (at most 30 s): a shell has no event to wait on for "the extender's watches have synced".
for attempt in $(seq 1 150); do
    curl -sf http://127.0.0.1:8888/readyz >/dev/null 2>&1 && break
    kill -0 "$EXTENDER_PID" 2>/dev/null || { cat "$STATE_DIR/extender.log"; exit 1; }
    [ "$attempt" -eq 150 ] && { echo "the extender was not ready after 30 s" >&2; cat "$STATE_DIR/extender.log"; exit 1; }
    sleep 0.2
done
pod() {  # name gpus role job product priorityClass
    local selector="" priority=""
    [ -n "$5" ] && selector="nodeSelector: {nvidia.com/gpu.product: $5}"
    [ -n "$6" ] && priority="priorityClassName: $6"
    local job=""
    [ -n "$4" ] && job=", lyra.dev/job: $4"
    cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {lyra.dev/role: $3$job}}
spec:
  $selector
  $priority
  containers:
    - {name: main, image: busybox, resources: {limits: {nvidia.com/gpu: $2}}}
---
YAML
}
{
    pod chat-0 2 inference "" "" ""
    pod gpt-base-0 4 base gpt NVIDIA-A100-SXM4-80GB ""
    pod bert-flex-0 8 flexible bert Tesla-T4 ""
    pod bert-flex-1 8 flexible bert Tesla-T4 ""
} | kubectl apply -f - >/dev/null
kubectl wait --for=condition=Ready pod/chat-0 pod/gpt-base-0 pod/bert-flex-0 pod/bert-flex-1 --timeout=60s >/dev/null
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: lyra-capture-high}
value: 1000
YAML
pod urgent-flex-0 2 flexible urgent Tesla-T4 lyra-capture-high | kubectl apply -f - >/dev/null
kubectl wait --for=condition=Ready pod/urgent-flex-0 --timeout=120s >/dev/null
rm -rf "$OUT" && mkdir -p "$OUT"
cp "$CAPTURE"/*.json "$OUT"/
kubectl get nodes -o json > "$OUT/nodes.json"
kubectl get pods -A -o json > "$OUT/pods.json"
echo "captured $(find "$CAPTURE" -mindepth 1 -maxdepth 1 | wc -l) bodies into $OUT:" \
    "$(find "$OUT" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | tr '\n' ' ')"
