"""The simulated servers: their GPU types, loan states, where every training worker sits, and what it all used.

Placement bookkeeping is a core :class:`lyra.core.packing.Layout` over every server, so the simulator places
workers by the core's own rule and never by a second one. An inference server that is not loaned to training has
all its GPUs held by a placeholder (``INFERENCE_HOLD``), so training can never land on it; lending releases them,
and a reclaim takes them back once the server's training workers are gone.

Loan states: an inference server is ``loaned``, ``reclaiming`` (its training workers have left or are leaving;
it serves again at its ``ready_at`` time), or ready for inference (which of those serve and which are idle is the
loan cycle's: :mod:`lyra.sim.loans`).

Servers are numbered within each pool group after group, in the scenario's order (``train-0000`` ...,
``infer-0000`` ...). Inference demand is in servers; with several inference GPU types it is split over them in
proportion to their servers (:func:`split_demand`), and serving, loans and shortfall are counted per type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lyra.core.gpus import GpuCatalog, GpuType
from lyra.core.model import LoanState, Pool, Server
from lyra.core.packing import Layout, Slot
from lyra.sim.scenario import Scenario, ServerGroup

#: The placeholder job that holds the GPUs of inference servers not loaned to training.
INFERENCE_HOLD = "\x00inference"

#: Loan states of the simulated inference servers that are not ready for inference.
_LOANED, _RECLAIMING, _READY = 0, 1, 2


class SimCluster:
    """Every server of the scenario, indexed in name order (the layout's order)."""

    def __init__(self, scenario: Scenario) -> None:
        slots = [
            Slot(f"train-{i:04d}", gpu_type, gpus_per_server, True)
            for i, (gpu_type, gpus_per_server) in enumerate(_servers_of(scenario.training.groups))
        ] + [
            Slot(f"infer-{i:04d}", gpu_type, gpus_per_server, False)
            for i, (gpu_type, gpus_per_server) in enumerate(_servers_of(scenario.inference.groups))
        ]
        self.layout = Layout(slots)
        layout = self.layout
        self.names = layout.names
        self.count = len(self.names)
        self.gpus = list(layout.size)
        self.is_training = list(layout.safe)
        self.type_names = layout.types
        self.type_of = layout.type_of
        self.speed_of_type = [scenario.speed_of(t) for t in self.type_names]
        #: GPU types as the core sees them: the scenario's speeds; memory is modelled by each job's GPU types.
        self.catalog = GpuCatalog.of(
            *(GpuType(name, speed) for name, speed in zip(self.type_names, self.speed_of_type, strict=True))
        )
        #: The type indices of each pool, in name order (a type may be in both).
        self.training_types = tuple(self.type_names.index(t) for t in scenario.training.gpu_types)
        self.inference_types = tuple(self.type_names.index(t) for t in scenario.inference.gpu_types)
        #: The training types, fastest first (then name): where a job that may use any of them starts.
        self.training_types_fastest_first = tuple(
            sorted(self.training_types, key=lambda t: (-self.speed_of_type[t], self.type_names[t]))
        )
        self.servers_of_type = [
            [s for s in range(self.count) if self.type_of[s] == t] for t in range(len(self.type_names))
        ]
        self.training_servers = [s for s in range(self.count) if self.is_training[s]]
        self.inference_servers = [s for s in range(self.count) if not self.is_training[s]]
        self.n_training = len(self.training_servers)
        self.n_inference = len(self.inference_servers)
        types = len(self.type_names)
        #: Per type index: inference servers of the type, and their GPUs each (one group per type and pool).
        self.inference_servers_of_type = [0] * types
        self.inference_gpus_per_server = [0] * types
        for group in scenario.inference.groups:
            t = self.type_names.index(group.gpu_type)
            self.inference_servers_of_type[t] = group.servers
            self.inference_gpus_per_server[t] = group.gpus_per_server
        self.training_gpus = sum(self.gpus[s] for s in self.training_servers)
        #: Per type index: the GPUs of the training servers of the type.
        self.training_gpus_of_type = [0] * types
        for s in self.training_servers:
            self.training_gpus_of_type[self.type_of[s]] += self.gpus[s]
        self.inference_gpus = sum(self.gpus[s] for s in self.inference_servers)
        self.state = [_READY] * self.count
        self.ready_at = [0.0] * self.count
        for server in self.inference_servers:
            layout.add(INFERENCE_HOLD, server, self.gpus[server], 1)
        self.loaned = 0
        self.reclaiming = 0
        #: Per type index: inference servers loaned, and reclaiming.
        self.loaned_of_type = [0] * types
        self.reclaiming_of_type = [0] * types
        self.busy_training = 0
        self.busy_loaned = 0
        self.demand = 0
        #: Per type index: the inference servers demanded of the type (:func:`split_demand`).
        self.demand_of_type = [0] * types
        self.now = 0.0
        self.window_s = math.inf
        self.busy_training_gpu_s = 0.0
        self.busy_loaned_gpu_s = 0.0
        self.serving_gpu_s = 0.0
        self.loaned_gpu_s = 0.0
        self.short_server_s = 0.0
        self.demand_server_s = 0.0
        self.structural_short_server_s = 0.0
        self._views: dict[tuple[int, LoanState | None], Server] = {}

    def set_demand(self, servers: int) -> None:
        """Inference needs ``servers`` serving servers, split over its GPU types by :func:`split_demand`."""
        self.demand = servers
        self.demand_of_type = split_demand(servers, self.inference_servers_of_type)

    # ------------------------------------------------------------------------------------------- workers

    def move(self, job: str, server: int, delta: int, gpus_per_worker: int) -> None:
        """Add (``delta > 0``) or remove workers of a training job on a server, keeping the busy counts."""
        self.layout.add(job, server, delta, gpus_per_worker)
        if self.is_training[server]:
            self.busy_training += delta * gpus_per_worker
        elif self.state[server] == _LOANED:
            self.busy_loaned += delta * gpus_per_worker
        # Workers leaving a server on its way back to inference no longer count as loaned work.

    # ----------------------------------------------------------------------------------------- loan states

    def is_loaned(self, server: int) -> bool:
        return self.state[server] == _LOANED

    def is_reclaiming(self, server: int) -> bool:
        return self.state[server] == _RECLAIMING

    def lend(self, server: int) -> None:
        if self.state[server] != _READY or self.is_training[server]:
            raise RuntimeError(f"server {self.names[server]} cannot be lent")
        self.layout.add(INFERENCE_HOLD, server, -self.gpus[server], 1)
        self.state[server] = _LOANED
        self.loaned += 1
        self.loaned_of_type[self.type_of[server]] += 1

    def release(self, job: str, server: int, count: int, gpus_per_worker: int) -> None:
        """Workers of a training job leave a server; on an inference server that is no longer loaned (reclaiming,
        or back in service) their GPUs go straight back to inference."""
        self.move(job, server, -count, gpus_per_worker)
        if not self.is_training[server] and self.state[server] != _LOANED:
            self.layout.add(INFERENCE_HOLD, server, count * gpus_per_worker, 1)

    def start_reclaim(self, server: int, ready_at: float) -> None:
        """The server stops taking training work: its free GPUs are held for inference now, those of the workers
        still leaving it as they go (:meth:`release`)."""
        if self.state[server] != _LOANED:
            raise RuntimeError(f"server {self.names[server]} is not loaned")
        self.busy_loaned -= self.gpus[server] - self.layout.free[server]
        if self.layout.free[server]:
            self.layout.add(INFERENCE_HOLD, server, self.layout.free[server], 1)
        self.state[server] = _RECLAIMING
        self.ready_at[server] = ready_at
        self.loaned -= 1
        self.reclaiming += 1
        self.loaned_of_type[self.type_of[server]] -= 1
        self.reclaiming_of_type[self.type_of[server]] += 1

    def finish_reclaim(self, server: int) -> None:
        if self.state[server] == _RECLAIMING:
            if self.layout.free[server]:
                raise RuntimeError(f"server {self.names[server]} came back with GPUs neither held nor used")
            self.state[server] = _READY
            self.reclaiming -= 1
            self.reclaiming_of_type[self.type_of[server]] -= 1

    def server_view(self, server: int) -> Server:
        """The core's view of a server (cached; a ready inference server shows as ``idle``)."""
        state: LoanState | None
        if self.is_training[server]:
            state = None
        elif self.state[server] == _LOANED:
            state = LoanState.LOANED
        elif self.state[server] == _RECLAIMING:
            state = LoanState.RECLAIMING
        else:
            state = LoanState.IDLE
        return self._view(server, state)

    def _view(self, server: int, state: LoanState | None) -> Server:
        key = (server, state)
        view = self._views.get(key)
        if view is None:
            pool = Pool.TRAINING if self.is_training[server] else Pool.INFERENCE
            view = self._views[key] = Server(
                self.names[server], pool, self.type_names[self.type_of[server]], self.gpus[server], state
            )
        return view

    # ------------------------------------------------------------------------------------------- integrals

    def advance(self, t: float) -> None:
        """Integrate usage and unmet inference demand over ``[now, t]``, clipped to the window."""
        dt = min(t, self.window_s) - min(self.now, self.window_s)
        if dt > 0:
            self.busy_training_gpu_s += self.busy_training * dt
            self.busy_loaned_gpu_s += self.busy_loaned * dt
            for gpu_type in self.inference_types:
                demand, servers = self.demand_of_type[gpu_type], self.inference_servers_of_type[gpu_type]
                serving = min(demand, servers - self.loaned_of_type[gpu_type] - self.reclaiming_of_type[gpu_type])
                per_server = self.inference_gpus_per_server[gpu_type]
                self.serving_gpu_s += serving * per_server * dt
                self.loaned_gpu_s += self.loaned_of_type[gpu_type] * per_server * dt
                self.short_server_s += (demand - serving) * dt
                self.structural_short_server_s += max(0, demand - servers) * dt
            self.demand_server_s += self.demand * dt
        self.now = t


def _servers_of(groups: Sequence[ServerGroup]) -> list[tuple[str, int]]:
    """(GPU type, GPUs) of every server of a pool, group after group."""
    return [(group.gpu_type, group.gpus_per_server) for group in groups for _ in range(group.servers)]


def split_demand(servers: int, servers_of_type: Sequence[int]) -> list[int]:
    """Split a demand of ``servers`` inference servers over the GPU types in proportion to the servers of each
    (largest remainders first, then the lower type index, i.e. name order). One inference type takes it all."""
    total = sum(servers_of_type)
    if total == 0:
        raise ValueError("the inference pool has no server")
    shares = [servers * n // total for n in servers_of_type]
    left = servers - sum(shares)
    order = sorted(
        (t for t, n in enumerate(servers_of_type) if n), key=lambda t: (-(servers * servers_of_type[t] % total), t)
    )
    for t in order[:left]:
        shares[t] += 1
    return shares
