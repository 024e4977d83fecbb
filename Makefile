# Lyra developer commands. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

UV ?= uv
RUN := $(UV) run --locked
export UV_PYTHON_DOWNLOADS := never

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: install
install: ## Create .venv with the pinned dependencies (uv.lock).
	$(UV) sync --locked

.PHONY: binaries
binaries: install ## Build or restore the cached Kubernetes binaries for the local control plane.
	$(RUN) lyra cluster binaries

.PHONY: demo
demo: binaries ## A compressed day on the local cluster, Lyra on and off, the simulator held to it (lyra demo; ~9 min).
	$(RUN) lyra demo

.PHONY: demo-story
demo-story: binaries ## The scripted story (lend, grow, reclaim by scale-in, finish), the what-if planner, a trace replay.
	bash hack/demo.sh

.PHONY: newcomer
newcomer: binaries ## Run docs/operations.md's newcomer path (hack/newcomer.sh): clone, chart, operator, Prometheus, checked.
	bash hack/newcomer.sh

.PHONY: test
test: install binaries ## Run every test: lint, unit and proofs, integration and e2e on the local control plane, torchrun.
	$(MAKE) lint
	$(RUN) pytest tests/unit
	$(RUN) pytest tests/integration
	@# The real-node e2e test runs the images of dist/images (root only; skipped with the reason otherwise).
	if [ "$$(id -u)" = 0 ]; then $(RUN) lyra image build; fi
	$(RUN) pytest tests/e2e
	$(MAKE) test-launcher

.PHONY: test-unit
test-unit: install ## Run the fast unit tests and the proofs of the policy core.
	$(RUN) pytest tests/unit

.PHONY: test-integration
test-integration: binaries ## Run the integration tests against a real local control plane.
	$(RUN) pytest tests/integration

.PHONY: test-e2e
test-e2e: binaries ## Run the whole-system tests (scheduler + extender + operator + emulator on the local control plane).
	$(RUN) pytest tests/e2e

# torch's Linux wheel brings CUDA's libraries (docs/development.md, "The real launcher"): it lives in its own
# environment, so `make install` (an exact sync of .venv) never removes it, and uv's cache keeps the wheels.
.PHONY: test-launcher
test-launcher: ## Run the real torchrun (CPU) on examples/torchrun through scale-ins and scale-outs (installs torch).
	UV_PROJECT_ENVIRONMENT=.venv-torchrun $(RUN) --group torchrun pytest tests/launcher

.PHONY: lint
lint: install ## ruff, mypy --strict, the import-linter contracts, hadolint (Dockerfile) and shellcheck (hack/*.sh).
	$(RUN) ruff check src tests bench
	$(RUN) ruff format --check src tests bench
	$(RUN) mypy
	$(RUN) lint-imports
	$(RUN) hadolint Dockerfile
	$(RUN) shellcheck hack/*.sh

.PHONY: format
format: install ## Apply ruff's formatting and safe fixes.
	$(RUN) ruff format src tests bench
	$(RUN) ruff check --fix src tests bench

.PHONY: crds
crds: install ## Regenerate manifests/crds and the chart's CRD templates from the API's models (lyra.api.resources).
	$(RUN) lyra api crds --out-dir manifests/crds
	$(RUN) lyra chart generate

.PHONY: chart
chart: install ## Regenerate the chart's generated files (CRDs, scheduler config, alerts, dashboards, values schema) and docs/operations.md's generated parts.
	$(RUN) lyra chart generate

.PHONY: manifests
manifests: chart ## Render manifests/ from the Helm chart with its default values (helm from the binary cache).
	$(RUN) lyra chart manifests

.PHONY: bench
# One benchmark command of `make bench`, its wall time printed after it (to stderr, with the command).
define bench_step
	@echo '==> python -m $(1)' >&2; started=$$(date +%s); \
	$(RUN) python -m $(1); \
	echo "<== python -m $(1): $$(( $$(date +%s) - started )) s" >&2
endef

bench: binaries ## Run the benchmarks and print the figures recorded in docs/benchmarks.md (about 20 min).
	$(call bench_step,bench)
	$(call bench_step,bench.extender_bench)
	$(call bench_step,bench.scheduling_bench)
	$(call bench_step,bench.operator_scale_bench --memory)
	$(call bench_step,bench.operator_live_bench)
	$(call bench_step,bench.operator_writes_bench --sizes 5000 --repeats 2)

.PHONY: bench-envelope
bench-envelope: binaries ## The operator at 150,000 pods (and its plot), and live with 2,000 TrainingJobs (about 20 min).
	$(RUN) python -m bench.operator_envelope_bench --plot docs/img/operator-envelope.png
	$(RUN) python -m bench.operator_live_bench --queued-jobs 2000 --services 50 --rich-pods

.PHONY: simulate
simulate: install ## Compare every scheme on the shipped Philly trace and ServeGen load (docs/evaluation.md).
	$(RUN) lyra simulate --scheme all --json out/simulate/results.json --out-dir out/simulate

# Needs root (mmdebstrap, a chroot), apt and gcc; no container engine. docs/operations.md, "Build the images".
.PHONY: image
image: binaries ## Build Lyra's OCI images into dist/images/ (lyra, kube-scheduler, pause, demo workloads); cached.
	$(RUN) lyra image build

.PHONY: image-verify
image-verify: image ## Import the images into a private containerd and run each once (lyra --help, the workloads).
	$(RUN) lyra image verify

.PHONY: cluster-up
cluster-up: binaries ## Start the local control plane with fake GPU nodes (CLUSTER_FLAGS=--no-extender: no extender).
	$(RUN) lyra cluster up $(CLUSTER_FLAGS)

.PHONY: cluster-down
cluster-down: install ## Stop the local control plane and remove its state.
	$(RUN) lyra cluster down

.PHONY: clean
clean: ## Remove caches and build output inside the repository (not the binary cache).
	rm -rf .venv .venv-torchrun .mypy_cache .ruff_cache .pytest_cache .hypothesis dist build out
