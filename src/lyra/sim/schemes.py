"""The schemes the simulator compares, each defined by what it may use.

All of them run in the same world (:mod:`lyra.sim.engine`): jobs run at the pace of their slowest worker's GPU type,
a job uses inference GPUs only if its memory fits them (``memory.inference_fit_share``), reclaims take the workers'
grace period and a drain while inference waits, and decisions are batched every ``decision_interval_s``.

* ``baseline``: separate clusters, as the poster's baseline. Training runs on the training servers only; every
  job is inelastic (it runs on exactly the GPUs the trace gives it). Admission is the core allocator's phase 1:
  shortest estimated job first with backfilling, never preempting a running job. Inference keeps its servers.
* ``basic``: baseline plus capacity loaning. Idle inference servers are lent to training (a job starts on them, at
  their pace, when the training servers are full and its memory fits); when inference needs them back, the naive
  reclaim (``least-gpus-used``: return the loaned servers with the fewest training GPUs in use) chooses them, and
  every job on a returned server is preempted. Jobs stay inelastic and never migrate.
* ``lyra``: loaning with Lyra's reclaim (knapsack with dependent values plus elastic scale-in) and the core's
  allocation: base demand first-class, flexible workers and GPU types by the fluid objective, and migration of jobs
  from inference to training GPUs when that pays for the restart (``scheduler.migration``); a share of jobs is
  elastic (scenario ``elasticity``).
* The two ablations of ``lyra``, the same core calls with one switch off, so that a table says which part the gain
  comes from: ``lyra-no-loaning`` (elasticity without loaning: the training servers only, elastic jobs) and
  ``lyra-no-elasticity`` (loaning without elasticity: Lyra's reclaim and migration, every job at its trace size).
* ``lyra-exact-free``: ``lyra`` told every job's exact remaining work and charged nothing for preemption, resizing
  or migration (no lost work, no grace, no restart or resize cost; a reclaimed server still drains). It shows what
  noisy estimates and those costs take from ``lyra``. It is *not* an upper bound: it makes the same myopic decisions
  (it sees the jobs present, never the next arrivals), and exact estimates can reorder a schedule for the worse.

Context policies on the separate training cluster (no loaning, no elasticity), in
:mod:`lyra.sim.context_policies` since they are not Lyra's policy: ``fifo`` (arrival order, head-of-line
blocking, no backfilling), ``sjf`` (shortest estimated job first with backfilling; the same rule as ``baseline``
written independently of the core, so it cross-checks the driver) and ``las`` (Tiresias-style discretised least
attained service: duration-agnostic, preemptive; queues by attained GPU-seconds, FIFO inside a queue).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lyra.core.reclaim import ReclaimStrategy


class Admission(enum.StrEnum):
    """Who decides which jobs run: the core's two-phase allocator, or a context policy in the driver."""

    CORE = "core"
    FIFO = "fifo"
    SJF = "sjf"
    LAS = "las"


@dataclass(frozen=True, slots=True)
class Scheme:
    name: str
    admission: Admission
    loaning: bool = False
    reclaim: ReclaimStrategy | None = None
    elastic: bool = False
    #: Whether the core may move jobs from inference to training GPUs (and the scenario's ``scheduler.migration``).
    migration: bool = False
    exact_durations: bool = False
    free_preemption: bool = False


SCHEMES: dict[str, Scheme] = {
    scheme.name: scheme
    for scheme in (
        Scheme("baseline", Admission.CORE),
        Scheme("basic", Admission.CORE, loaning=True, reclaim=ReclaimStrategy.LEAST_GPUS_USED),
        Scheme("lyra", Admission.CORE, loaning=True, reclaim=ReclaimStrategy.LYRA, elastic=True, migration=True),
        Scheme("lyra-no-loaning", Admission.CORE, elastic=True, migration=True),
        Scheme("lyra-no-elasticity", Admission.CORE, loaning=True, reclaim=ReclaimStrategy.LYRA, migration=True),
        Scheme(
            "lyra-exact-free",
            Admission.CORE,
            loaning=True,
            reclaim=ReclaimStrategy.LYRA,
            elastic=True,
            migration=True,
            exact_durations=True,
            free_preemption=True,
        ),
        Scheme("fifo", Admission.FIFO),
        Scheme("sjf", Admission.SJF),
        Scheme("las", Admission.LAS),
    )
}

#: The poster's rows (its Ideal is not reproduced: see ``lyra-exact-free``), the ablations of ``lyra`` and
#: ``lyra-exact-free``, in table order; ``all`` runs these and then the context policies.
POSTER_SCHEMES = ("baseline", "basic", "lyra")
ABLATION_SCHEMES = ("lyra-no-loaning", "lyra-no-elasticity")
MAIN_SCHEMES = ("baseline", "basic", "lyra-no-loaning", "lyra-no-elasticity", "lyra", "lyra-exact-free")
CONTEXT_SCHEMES = ("fifo", "sjf", "las")


def resolve(names: str) -> tuple[Scheme, ...]:
    """``all``, one name, or a comma-separated list, in the order given."""
    if names == "all":
        wanted: tuple[str, ...] = MAIN_SCHEMES + CONTEXT_SCHEMES
    else:
        wanted = tuple(n.strip() for n in names.split(",") if n.strip())
    unknown = [n for n in wanted if n not in SCHEMES]
    if "ideal" in unknown:
        raise ValueError("scheme 'ideal' is now 'lyra-exact-free' (exact durations, free preemption; not a bound)")
    if unknown or not wanted:
        raise ValueError(f"unknown scheme {', '.join(unknown) or names!r}; choose from {', '.join(SCHEMES)} or all")
    return tuple(SCHEMES[n] for n in wanted)
