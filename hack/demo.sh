#!/usr/bin/env bash
# `make demo-story`: what Lyra does, scripted, end to end on the built-in local cluster (`make demo` plays a day).
#   1. a real Kubernetes control plane with 12 fake GPU nodes (4 x 8 A100 training, 8 x 8 T4 inference);
#   2. Lyra's extender, operator and workload emulator with the examples/ jobs and service: idle T4 servers are
#      lent and an elastic T4 job grows on them;
#   3. inference load rises: servers are reclaimed by scaling the elastic job in, the replicas land, the job ends;
#   4. the what-if planner, on the live cluster and on a snapshot;
#   5. a three-day trace replay comparing no loaning, naive loaning and Lyra (if the public traces are present).
# The cluster is stopped again at the end, also when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

RUN=(uv run --locked)
STATE_DIR="${LYRA_DEMO_STATE_DIR:-$(mktemp -d -t lyra-demo.XXXXXX)}"
export LYRA_STATE_DIR="$STATE_DIR"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    step "Stopping the local cluster"
    "${RUN[@]}" lyra cluster down || true
    rm -rf "$STATE_DIR"
}
trap cleanup EXIT

step "1/5 Local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK GPU nodes"
"${RUN[@]}" lyra cluster up
KUBECONFIG_FILE="$STATE_DIR/cluster/default/kubeconfig"
kubectl() { "${RUN[@]}" lyra cluster kubectl -- "$@"; }
kubectl get nodes -L lyra.dev/pool -L nvidia.com/gpu.product -L nvidia.com/gpu.count

step "2/5 Lyra: the scheduler extender, the operator, and an emulator of the training programs (KWOK pods never exit)"
"${RUN[@]}" lyra extender --kubeconfig "$KUBECONFIG_FILE" > "$STATE_DIR/extender.log" 2>&1 &
PIDS+=($!)
# Poll /readyz (at most 20 s): a shell has no event to wait on for "the extender's watches have synced".
for _ in $(seq 1 100); do
    if curl -sf http://127.0.0.1:8888/readyz >/dev/null 2>&1; then break; fi
    if ! kill -0 "${PIDS[0]}" 2>/dev/null; then cat "$STATE_DIR/extender.log"; exit 1; fi
    sleep 0.2
done
curl -sf http://127.0.0.1:8888/readyz || { echo "the extender was not ready after 20 s" >&2; cat "$STATE_DIR/extender.log"; exit 1; }
echo
"${RUN[@]}" lyra operator --kubeconfig "$KUBECONFIG_FILE" --lend-delay 5 --resync 2 > "$STATE_DIR/operator.log" 2>&1 &
PIDS+=($!)
"${RUN[@]}" lyra emulate --kubeconfig "$KUBECONFIG_FILE" > "$STATE_DIR/emulate.log" 2>&1 &
PIDS+=($!)
echo "-- an inference service and three training jobs (examples/):"
kubectl apply -f examples/
for job in resnet bert-elastic lora; do
    kubectl wait --for=jsonpath='{.status.phase}'=Running "trainingjob/$job" --timeout=120s >/dev/null
done
kubectl wait --for=jsonpath='{.status.readyReplicas}'=2 inferenceservice/chat --timeout=120s >/dev/null
kubectl wait --for=jsonpath='{.status.workers.current}'=12 trainingjob/lora --timeout=120s >/dev/null
echo "-- the T4 servers inference does not need are lent; lora (T4 only) grew to 12 workers on them:"
kubectl get lyra
"${RUN[@]}" lyra status --kubeconfig "$KUBECONFIG_FILE"

step "3/5 Inference load rises: the operator reclaims the cheapest servers, scaling lora in rather than preempting"
kubectl scale inferenceservice/chat --replicas=20
kubectl wait --for=jsonpath='{.status.readyReplicas}'=20 inferenceservice/chat --timeout=120s >/dev/null
kubectl get nodes -l lyra.dev/pool=inference -L lyra.dev/state
kubectl get events --field-selector involvedObject.name=lora -o custom-columns=REASON:.reason,MESSAGE:.message
echo "-- lora finishes (the emulator runs it at its workers' pace) and its servers go back to the pool:"
kubectl wait --for=jsonpath='{.status.phase}'=Succeeded trainingjob/lora --timeout=180s >/dev/null
kubectl get trainingjobs

step "4/5 What-if planner: on the live cluster, then on docs/examples/snapshot.json (4 loaned T4 servers, 5 jobs)"
echo "-- live: which loaned server would go back first:"
"${RUN[@]}" lyra plan reclaim --from-cluster --kubeconfig "$KUBECONFIG_FILE" --servers 1
echo "-- reclaim 2 servers with the fewest preemptions:"
"${RUN[@]}" lyra plan reclaim --snapshot docs/examples/snapshot.json --servers 2
echo "-- the poster's plain greedy on the same request:"
"${RUN[@]}" lyra plan reclaim --snapshot docs/examples/snapshot.json --servers 2 --strategy poster
echo "-- who runs, with how many workers:"
"${RUN[@]}" lyra plan allocate --snapshot docs/examples/snapshot.json

step "5/5 Trace replay: three days of the Philly trace with the ServeGen inference load"
PHILLY=../shared/traces/philly/philly.csv
SERVEGEN=../shared/traces/servegen/derived_language_total_rate_10min.csv
if [ -f "$PHILLY" ] && [ -f "$SERVEGEN" ]; then
    "${RUN[@]}" lyra simulate --trace "$PHILLY" --load "$SERVEGEN" --calibrate --scheme baseline,basic,lyra \
        --start 2017-10-10 --days 3 --out-dir out/demo --json out/demo/results.json
else
    echo "The public traces are not here; docs/evaluation.md says where to download them."
fi
