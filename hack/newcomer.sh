#!/usr/bin/env bash
# The newcomer's path of docs/operations.md ("From a fresh clone to Lyra's metrics in a local Prometheus"), run as
# written and checked: a fresh clone, the chart installed onto the local control plane, the operator and the
# extender on the host as the chart's ServiceAccounts, Debian's Prometheus from the binary cache scraping them through
# a loan and a reclaim, `lyra report`; then Prometheus' HTTP API must answer Lyra's metrics.
#
# The lines between "# >>> docs step N" and "# <<<" are the commands docs/operations.md shows under step N: `make
# chart` copies them there and a unit test fails when they differ. Everything else is the script's own: its
# settings, its progress lines, the checks at the end and the cleanup, which stops what the script started (also
# when a step fails or the script is interrupted) and removes the local cluster's state; the clone and its logs stay.
#
# Settings (environment variables):
#   NEWCOMER_DIR     where the clone goes (default: a new directory under ${TMPDIR:-/tmp}); kept at the end
#   LYRA_REPOSITORY  what to clone (default: the repository holding this script)
#   LYRA_REVISION    the commit to check out in the clone (default: the commit the clone checks out)
#   LYRA_STATE_DIR   the local cluster's state (default: $NEWCOMER_DIR/state); must hold no cluster yet
#   OPERATOR_PORT, EXTENDER_PORT, PROMETHEUS_PORT   ports on 127.0.0.1 (default: 8080, 8888, 9090)
# Exit code: 0 when Prometheus answered every check, 1 when a step or a check failed (the logs' last lines follow).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NEWCOMER_DIR=${NEWCOMER_DIR:-$(mktemp -d -t lyra-newcomer.XXXXXX)}
mkdir -p "$NEWCOMER_DIR"
NEWCOMER_DIR=$(cd "$NEWCOMER_DIR" && pwd)
LYRA_REPOSITORY=${LYRA_REPOSITORY:-$here}
LYRA_REVISION=${LYRA_REVISION:-}
export LYRA_STATE_DIR=${LYRA_STATE_DIR:-$NEWCOMER_DIR/state}
export UV_PYTHON_DOWNLOADS=never
unset VIRTUAL_ENV # the clone's own .venv, not the caller's
steps=7
started=$SECONDS

step() { # step N TITLE: a progress line with the time since the start
    printf '\n== [%dm%02ds] step %d/%d: %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$1" "$steps" "$2"
}

running() { # running PID: the process exists and has not exited (an exited child stays a zombie until waited for)
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $state != Z* ]]
}

stop() { # stop PID NAME: SIGTERM, SIGKILL if it still runs after 30 s
    local pid=$1 name=$2 deadline=$((SECONDS + 30))
    kill "$pid" 2>/dev/null || return 0
    while running "$pid"; do
        if ((SECONDS >= deadline)); then
            echo "$name (pid $pid) did not stop within 30 s of SIGTERM: SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.5
    done
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local status=$?
    set +e
    trap - EXIT INT TERM
    echo
    echo "== cleanup: stopping what this script started"
    [[ -n ${prometheus_pid:-} ]] && stop "$prometheus_pid" Prometheus
    [[ -n ${operator_pid:-} ]] && stop "$operator_pid" "the operator"
    [[ -n ${extender_pid:-} ]] && stop "$extender_pid" "the extender"
    if ((status != 0)) && [[ -d $NEWCOMER_DIR/lyra/out ]]; then
        for log in "$NEWCOMER_DIR"/lyra/out/*.log; do
            printf '\n-- the last lines of %s:\n' "$log" >&2
            tail -n 20 "$log" >&2
        done
    fi
    if [[ -n ${cluster_started:-} ]]; then
        (cd "$NEWCOMER_DIR/lyra" && uv run lyra cluster down)
    fi
    echo "the clone and its logs stay in $NEWCOMER_DIR/lyra"
    if ((status == 0)); then
        echo "newcomer path: passed in $((SECONDS - started)) s: Prometheus answered Lyra's metrics"
    else
        echo "newcomer path: FAILED (exit code $status) after $((SECONDS - started)) s" >&2
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -e $LYRA_STATE_DIR/cluster/default ]]; then
    echo "$LYRA_STATE_DIR/cluster/default already exists: set LYRA_STATE_DIR to a directory holding no cluster" >&2
    exit 1
fi
cd "$NEWCOMER_DIR"
echo "newcomer path: cloning $LYRA_REPOSITORY${LYRA_REVISION:+ at $LYRA_REVISION} into $NEWCOMER_DIR/lyra"

step 1 "Clone, build the tools"
# >>> docs step 1
git clone "$LYRA_REPOSITORY" lyra && cd lyra # LYRA_REPOSITORY: this repository's address
# <<<
if [[ -n $LYRA_REVISION ]]; then git checkout --quiet "$LYRA_REVISION"; fi
# >>> docs step 1
make binaries
# <<<

step 2 "Start the local control plane"
cluster_started=yes # `lyra cluster down` cleans up after a start that failed half-way too
# >>> docs step 2
# the ports on 127.0.0.1: set these variables first if 8080, 8888 or 9090 is taken
export OPERATOR_PORT=${OPERATOR_PORT:-8080} EXTENDER_PORT=${EXTENDER_PORT:-8888}
export PROMETHEUS_PORT=${PROMETHEUS_PORT:-9090}
uv run lyra cluster up --extender-url "http://127.0.0.1:$EXTENDER_PORT"
export KUBECONFIG=${LYRA_STATE_DIR:-~/.local/state/lyra}/cluster/default/kubeconfig
PATH="$(echo "${LYRA_CACHE_DIR:-$HOME/.cache/lyra}"/bin/kubectl-layer-*):$PATH"
export PATH
# <<<

step 3 "Install the chart"
# >>> docs step 3
kubectl create namespace lyra-system
helm install lyra helm/lyra --namespace lyra-system --take-ownership
kubectl -n lyra-system get deployments,pods,configmaps
# <<<

step 4 "Run the operator and the extender on the host as the chart's ServiceAccounts"
# >>> docs step 4
wait_for() { # wait_for SECONDS WHAT COMMAND...: run COMMAND every 2 s until it succeeds, for at most SECONDS
    local seconds=$1 what=$2 deadline=$((SECONDS + $1))
    shift 2
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then echo "gave up after $seconds s waiting for $what" >&2 && return 1; fi
        sleep 2
    done
    echo "$what"
}
mkdir -p out
admin=$(kubectl config view --minify -o jsonpath='{.users[0].name}')
for component in operator extender; do
    kubectl config view --raw --minify >out/$component.kubeconfig           # the API server and its CA ...
    kubectl --kubeconfig out/$component.kubeconfig config unset "users.$admin" # ... without the admin's key
    kubectl --kubeconfig out/$component.kubeconfig config set-credentials lyra-$component \
        --token="$(kubectl -n lyra-system create token lyra-$component --duration=12h)"
    kubectl --kubeconfig out/$component.kubeconfig config set-context --current --user=lyra-$component
done
uv run lyra extender --kubeconfig out/extender.kubeconfig --port "$EXTENDER_PORT" >out/extender.log 2>&1 &
extender_pid=$!
uv run lyra operator --kubeconfig out/operator.kubeconfig --lease-namespace lyra-system --http-port "$OPERATOR_PORT" \
    --lend-delay 10 --resync 2 >out/operator.log 2>&1 &
operator_pid=$!
wait_for 120 "the extender ready" curl -sf "127.0.0.1:$EXTENDER_PORT/readyz"
wait_for 300 "the operator ready (its first pass)" curl -sf "127.0.0.1:$OPERATOR_PORT/readyz"
# <<<

step 5 "Start Prometheus"
# >>> docs step 5
cat >out/prometheus.yml <<EOF
global:
  scrape_interval: 5s
scrape_configs:
  - job_name: lyra-operator
    static_configs: [{targets: ["127.0.0.1:$OPERATOR_PORT"]}]
  - job_name: lyra-extender
    static_configs: [{targets: ["127.0.0.1:$EXTENDER_PORT"]}]
EOF
PROMETHEUS=$(echo "${LYRA_CACHE_DIR:-$HOME/.cache/lyra}"/bin/prometheus-*)
"$PROMETHEUS/prometheus" --config.file=out/prometheus.yml --storage.tsdb.path=out/prometheus-data \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" >out/prometheus.log 2>&1 &
prometheus_pid=$!
PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT
answered() { # answered QUERY: Prometheus' HTTP API returns at least one series for QUERY
    [[ $(curl -sf "$PROMETHEUS_URL/api/v1/query" --data-urlencode "query=$1") == *'"result":[{'* ]]
}
wait_for 60 "Prometheus ready" curl -sf "$PROMETHEUS_URL/-/ready"
wait_for 60 "both targets scraped and up" answered 'count(up == 1) == 2'
"$PROMETHEUS/promtool" query instant "$PROMETHEUS_URL" up
# <<<

step 6 "Give Lyra work: a loan, then a reclaim"
# >>> docs step 6
kubectl apply -f examples/inferenceservice.yaml -f examples/elastic-trainingjob.yaml \
    -f examples/lora-on-loaned-t4s.yaml
wait_for 300 "T4 servers lent, as Prometheus sees it" answered 'sum(lyra_servers{state="loaned"}) > 0'
"$PROMETHEUS/promtool" query instant "$PROMETHEUS_URL" 'sum by (state) (lyra_servers)'
# <<<
# The checks compare with what Prometheus had seen just before the scale-up: how many T4 servers were not on loan (the
# replicas may use them without a reclaim) and how many reclaims were counted.
scaled_at=$(date +%s.%3N)
# >>> docs step 6
kubectl scale inferenceservice chat --replicas=32
wait_for 300 "4 T4 servers serving the 32 replicas, as Prometheus sees it" \
    answered 'sum(lyra_servers{state="serving", gpu_type="Tesla-T4"}) >= 4'
"$PROMETHEUS/promtool" query instant "$PROMETHEUS_URL" 'sum by (gpu_type, outcome) (lyra_reclaims_total)'
"$PROMETHEUS/promtool" query instant "$PROMETHEUS_URL" 'sum(lyra_workers_scaled_in_total)'
# <<<

step 7 "See the dashboards' panels without Grafana"
# >>> docs step 7
uv run lyra report --prometheus "$PROMETHEUS_URL" --out-dir out/report --since 10m
# <<<

echo
echo "== checks: Lyra's metrics, as the local Prometheus answers them ($PROMETHEUS_URL/api/v1/query)"
failures=0
expect() { # expect WHAT QUERY: one check, printed with Prometheus' answer
    if answered "$2"; then
        echo "ok: $1: $2"
        "$PROMETHEUS/promtool" query instant "$PROMETHEUS_URL" "$2" | sed 's/^/    /'
    else
        echo "FAILED: $1: Prometheus answers no series for $2" >&2
        failures=$((failures + 1))
    fi
}
expect "the operator's target is up" 'up{job="lyra-operator"} == 1'
expect "the extender's target is up" 'up{job="lyra-extender"} == 1'
expect "the operator's build" 'lyra_build_info{job="lyra-operator"} == 1'
expect "the extender answered the scheduler" 'sum(lyra_extender_requests_total{job="lyra-extender"}) > 0'
expect "servers lent" 'sum(lyra_loans_total) > 0'
expect "4 T4 servers serving inference" 'sum(lyra_servers{state="serving", gpu_type="Tesla-T4"}) >= 4'
# Every T4 server among the 4 the replicas need that was on loan before the scale-up had to be reclaimed. Prometheus'
# view at the scale-up may be a scrape old: a server lent in that scrape interval lowers the count expected, and a
# reclaim in it is counted by the difference too, so neither makes the check fail when Lyra did right.
expect "the reclaims the 32 replicas needed counted (4 T4 servers, less those not on loan before)" \
    "sum(lyra_reclaims_total) - (sum(lyra_reclaims_total @ $scaled_at) or vector(0))
     >= 4 - (sum(lyra_servers{gpu_type=\"Tesla-T4\", state!=\"loaned\"} @ $scaled_at) or vector(0))"
budget=$(kubectl get poddisruptionbudget chat -o jsonpath='{.spec.maxUnavailable}' 2>/dev/null || true)
if [[ $budget == 1 ]]; then echo "ok: the operator keeps chat's PodDisruptionBudget (maxUnavailable $budget)"; else
    echo "FAILED: no PodDisruptionBudget chat with maxUnavailable 1 (the example's spec.disruptionBudget)" >&2
    failures=$((failures + 1))
fi
plots=$(find out/report -name '*.png' | wc -l)
if ((plots > 0)); then echo "ok: lyra report wrote $plots plots into out/report"; else
    echo "FAILED: lyra report wrote no plot into out/report" >&2
    failures=$((failures + 1))
fi
if ((failures > 0)); then
    echo "$failures checks failed" >&2
    exit 1
fi
