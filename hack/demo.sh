#!/usr/bin/env bash
# `make demo`: what Lyra does today, end to end on the built-in local cluster.
#   1. a real Kubernetes control plane with 12 fake GPU nodes (4 x 8 A100 training, 8 x 8 T4 inference);
#   2. a GPU pod scheduled there by the real kube-scheduler;
#   3. the what-if planner on a snapshot: which loaned servers to reclaim, who runs with how many workers;
#   4. a three-day trace replay comparing no loaning, naive loaning and Lyra (if the public traces are present).
# The cluster is stopped again at the end, also when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

RUN=(uv run --locked)
STATE_DIR="${LYRA_DEMO_STATE_DIR:-$(mktemp -d -t lyra-demo.XXXXXX)}"
export LYRA_STATE_DIR="$STATE_DIR"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

cleanup() {
    step "Stopping the local cluster"
    "${RUN[@]}" lyra cluster down || true
    rm -rf "$STATE_DIR"
}
trap cleanup EXIT

step "1/4 Local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK GPU nodes"
# The scheduler extender is not part of Lyra yet, so the scheduler runs without it.
"${RUN[@]}" lyra cluster up --no-extender
kubectl() { "${RUN[@]}" lyra cluster kubectl -- "$@"; }
kubectl get nodes -L lyra.dev/pool -L nvidia.com/gpu.product -L nvidia.com/gpu.count

step "2/4 A pod asking for 2 nvidia.com/gpu, placed by the real kube-scheduler and run by KWOK"
kubectl apply -f - <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: gpu-demo, namespace: default}
spec:
  containers:
    - name: main
      image: busybox
      resources: {limits: {nvidia.com/gpu: 2}}
YAML
kubectl wait --for=condition=Ready pod/gpu-demo --timeout=60s
kubectl get pod gpu-demo -o wide

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
