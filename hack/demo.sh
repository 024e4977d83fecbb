#!/usr/bin/env bash
# `make demo`: what Lyra does today, end to end on the built-in local cluster.
#   1. a real Kubernetes control plane with 12 fake GPU nodes (4 x 8 A100 training, 8 x 8 T4 inference);
#   2. Lyra's scheduler extender, called by the real kube-scheduler: an inference replica stays off loaned servers,
#      a training worker lands on a loaned server of its allocated GPU type;
#   3. the what-if planner on a snapshot: which loaned servers to reclaim, who runs with how many workers;
#   4. a three-day trace replay comparing no loaning, naive loaning and Lyra (if the public traces are present).
# The cluster is stopped again at the end, also when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

RUN=(uv run --locked)
STATE_DIR="${LYRA_DEMO_STATE_DIR:-$(mktemp -d -t lyra-demo.XXXXXX)}"
export LYRA_STATE_DIR="$STATE_DIR"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

EXTENDER_PID=""
cleanup() {
    if [ -n "$EXTENDER_PID" ]; then kill "$EXTENDER_PID" 2>/dev/null || true; wait "$EXTENDER_PID" 2>/dev/null || true; fi
    step "Stopping the local cluster"
    "${RUN[@]}" lyra cluster down || true
    rm -rf "$STATE_DIR"
}
trap cleanup EXIT

step "1/4 Local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK GPU nodes"
"${RUN[@]}" lyra cluster up
kubectl() { "${RUN[@]}" lyra cluster kubectl -- "$@"; }
# What the operator will do on a reclaim cycle, by hand: two inference servers are lent to training.
kubectl label node inference-t4-6 inference-t4-7 lyra.dev/state=loaned --overwrite >/dev/null
kubectl get nodes -L lyra.dev/pool -L lyra.dev/state -L nvidia.com/gpu.product -L nvidia.com/gpu.count

step "2/4 Lyra's scheduler extender: kube-scheduler asks it where each GPU pod may go"
"${RUN[@]}" lyra extender --kubeconfig "$STATE_DIR/cluster/default/kubeconfig" > "$STATE_DIR/extender.log" 2>&1 &
EXTENDER_PID=$!
# Poll /readyz (at most 20 s): a shell has no event to wait on for "the extender's watches have synced".
for _ in $(seq 1 100); do
    if curl -sf http://127.0.0.1:8888/readyz >/dev/null 2>&1; then break; fi
    if ! kill -0 "$EXTENDER_PID" 2>/dev/null; then cat "$STATE_DIR/extender.log"; exit 1; fi
    sleep 0.2
done
curl -sf http://127.0.0.1:8888/readyz || { echo "the extender was not ready after 20 s" >&2; cat "$STATE_DIR/extender.log"; exit 1; }
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: chat-replica, namespace: default, labels: {lyra.dev/role: inference}}
spec:
  containers:
    - name: main
      image: busybox
      resources: {limits: {nvidia.com/gpu: 2}}
---
apiVersion: v1
kind: Pod
metadata: {name: bert-flexible-0, namespace: default, labels: {lyra.dev/role: flexible, lyra.dev/job: bert}}
spec:
  nodeSelector: {nvidia.com/gpu.product: Tesla-T4}
  containers:
    - name: main
      image: busybox
      resources: {limits: {nvidia.com/gpu: 2}}
YAML
kubectl wait --for=condition=Ready pod/chat-replica pod/bert-flexible-0 --timeout=60s
echo "-- the inference replica is on a serving T4 server, the flexible worker on a loaned one:"
kubectl get pods -o wide -L lyra.dev/role

step "3/4 What-if planner on docs/examples/snapshot.json (4 loaned T4 servers, 5 jobs)"
echo "-- reclaim 2 servers with the fewest preemptions:"
"${RUN[@]}" lyra plan reclaim --snapshot docs/examples/snapshot.json --servers 2
echo "-- the poster's plain greedy on the same request:"
"${RUN[@]}" lyra plan reclaim --snapshot docs/examples/snapshot.json --servers 2 --strategy poster
echo "-- who runs, with how many workers:"
"${RUN[@]}" lyra plan allocate --snapshot docs/examples/snapshot.json

step "4/4 Trace replay: three days of the Philly trace with the ServeGen inference load"
PHILLY=../shared/traces/philly/philly.csv
SERVEGEN=../shared/traces/servegen/derived_language_total_rate_10min.csv
if [ -f "$PHILLY" ] && [ -f "$SERVEGEN" ]; then
    "${RUN[@]}" lyra simulate --trace "$PHILLY" --load "$SERVEGEN" --calibrate --scheme baseline,basic,lyra \
        --start 2017-10-10 --days 3 --out-dir out/demo --json out/demo/results.json
else
    echo "The public traces are not here; docs/evaluation.md says where to download them."
fi
