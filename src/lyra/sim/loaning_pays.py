"""When loaning pays: the mean-JCT gain of loaning beyond elasticity alone (``lyra`` against ``lyra-no-loaning``, the
same elasticity), for an admin's own inputs and over a map of the regimes that decide it.

Four quantities decide it (docs/evaluation.md, "When loaning pays"), each measured on the inputs and each set on a
scenario by one rule:

* **idle share**: the inference pool's mean idle share, ``1 -`` its mean utilisation over one period of the load;
  set by the requests per server (:func:`lyra.sim.calibration.req_per_server_for`), the pool's servers kept;
* **fit share**: the share of the window's jobs whose memory fits the inference GPUs; set as
  ``memory.inference_fit_share`` with ``size_exponent: 0`` (every size alike, so the share is the value);
* **offered load**: the window's training work (reference GPU-seconds, a job's trace GPUs times its duration)
  over what the training servers deliver in the window (GPUs times speed times the window); the work of jobs
  that run past the window's end counts whole, so on a short window of long jobs it reads high; above 1 a backlog
  builds; set by the number of training servers;
* **inference speed**: the inference GPU type's training speed (a T4 is about 0.3-0.5 of a V100).

The gain is ``1 - JCT(lyra) / JCT(lyra-no-loaning)`` (mean JCT); loaning *pays* where it is at least
:data:`PAYS` (10%). Each answer also gives the regime's lower bound on mean JCT (:func:`lyra.sim.bound.jct_bound` on
its workload and cluster), so ``lyra``'s distance from the best possible is read beside the gain, and ``lyra``'s
inference shortfall (all demand not met, beyond the whole pool or waiting for reclaims). Only scenarios of one
training and one inference group are mapped (the rules above size one).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from lyra.sim.bound import jct_bound
from lyra.sim.calibration import SHORTFALL_TOLERANCE, inference_utilisation, req_per_server_for
from lyra.sim.engine import Simulation
from lyra.sim.load import LoadSeries
from lyra.sim.metrics import SchemeMetrics, summarise
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import SCHEMES
from lyra.sim.traces import Trace
from lyra.sim.workload import Window, build_workload

#: The gain beyond elasticity from which loaning is said to pay.
PAYS = 0.10

#: The map's axes: (name on the command line, label, default values, (lowest, highest) accepted).
AXES: dict[str, tuple[str, tuple[float, ...], tuple[float, float]]] = {
    "idle-share": ("inference idle share", (0.1, 0.5), (0.0, 0.99)),
    "fit-share": ("share of jobs a T4 fits", (0.25, 0.75), (0.01, 1.0)),
    "offered-load": ("training offered load", (1.2, 2.4), (0.05, 5.0)),
    "inference-speed": ("T4 speed (x V100)", (0.3, 0.5), (0.05, 2.0)),
}


class LoaningPaysError(ValueError):
    """Inputs the question cannot be asked of; the message says why."""


@dataclass(frozen=True, slots=True)
class Regime:
    idle_share: float
    fit_share: float
    offered_load: float
    inference_speed: float

    def describe(self) -> str:
        return (
            f"idle share {self.idle_share:.2f}, T4 fit {self.fit_share:.2f}, offered load {self.offered_load:.2f}, "
            f"T4 speed {self.inference_speed:g}"
        )


@dataclass(frozen=True, slots=True)
class Answer:
    """The gain at one regime: both schemes' mean JCT, the training servers and requests per server used, the
    regime's lower bound on mean JCT, and ``lyra``'s inference shortfall (server-seconds, share of the demand)."""

    regime: Regime
    jct_lyra_s: float
    jct_no_loaning_s: float
    training_servers: int
    req_per_server: float
    bound_s: float
    inference_short_server_s: float
    inference_short_share: float

    @property
    def gain(self) -> float:
        return 1.0 - self.jct_lyra_s / self.jct_no_loaning_s if self.jct_no_loaning_s > 0 else 0.0

    @property
    def pays(self) -> bool:
        return self.gain >= PAYS - 1e-12  # 1 - 900 / 1000 is 0.0999...98 in floating point

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gain": self.gain, "pays": self.pays}


def check_mappable(scenario: Scenario) -> None:
    if len(scenario.training.groups) != 1 or len(scenario.inference.groups) != 1:
        raise LoaningPaysError(
            "--loaning-pays sizes one training and one inference group; this scenario has "
            f"{len(scenario.training.groups)} and {len(scenario.inference.groups)}"
        )


def parse_axes(specs: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """``AXIS=V1,V2,...`` per spec, over the defaults of :data:`AXES`; unknown axes and values out of range are
    refused naming them."""
    grid = {name: values for name, (_, values, _) in AXES.items()}
    for spec in specs:
        name, sep, text = spec.partition("=")
        if name not in AXES or not sep:
            raise LoaningPaysError(f"--regime {spec!r}: give AXIS=V1,V2,... with AXIS one of {', '.join(AXES)}")
        low, high = AXES[name][2]
        values = []
        for item in text.split(","):
            try:
                value = float(item)
            except ValueError:
                raise LoaningPaysError(f"--regime {name}: {item!r} is not a number") from None
            if not (math.isfinite(value) and low <= value <= high):
                raise LoaningPaysError(f"--regime {name}: {item} is outside [{low:g}, {high:g}]")
            values.append(value)
        if len(values) > 4:
            raise LoaningPaysError(f"--regime {name}: at most 4 values (the map runs every combination)")
        grid[name] = tuple(values)
    return grid


def training_work(trace: Trace, scenario: Scenario, window: Window) -> float:
    """The window's training work in reference GPU-seconds (``work * gpus_per_worker`` summed)."""
    return math.fsum(job.work * job.gpus_per_worker for job in build_workload(trace, scenario, window).jobs)


def measure(trace: Trace, load: LoadSeries, scenario: Scenario, window: Window) -> Regime:
    """The regime of the inputs as they are."""
    check_mappable(scenario)
    (training,), (inference,) = scenario.training.groups, scenario.inference.groups
    jobs = build_workload(trace, scenario, window).jobs
    delivered = training.servers * training.gpus_per_server * scenario.speed_of(training.gpu_type) * window.length_s
    return Regime(
        idle_share=1.0 - inference_utilisation(load, inference.servers, scenario.inference.req_per_server),
        fit_share=sum(job.fits_inference_gpu for job in jobs) / len(jobs) if jobs else 0.0,
        offered_load=training_work(trace, scenario, window) / delivered,
        inference_speed=scenario.speed_of(inference.gpu_type),
    )


def scenario_at(scenario: Scenario, load: LoadSeries, work_gpu_s: float, window: Window, regime: Regime) -> Scenario:
    """The scenario set to ``regime`` by the rules of the module docstring."""
    check_mappable(scenario)
    (training,), (inference,) = scenario.training.groups, scenario.inference.groups
    per_server = training.gpus_per_server * scenario.speed_of(training.gpu_type) * window.length_s
    servers = max(1, round(work_gpu_s / (regime.offered_load * per_server)))
    rate = req_per_server_for(load, inference.servers, 1.0 - regime.idle_share)
    memory = scenario.memory.model_copy(update={"inference_fit_share": regime.fit_share, "size_exponent": 0.0})
    speed = {**scenario.speed, inference.gpu_type: regime.inference_speed}
    sized = scenario.with_sizes(training_servers=servers, inference_servers=inference.servers, req_per_server=rate)
    return sized.model_copy(update={"memory": memory, "speed": speed})


def run_scheme(task: tuple[Trace, LoadSeries, Scenario, Window, str]) -> SchemeMetrics:
    trace, load, scenario, window, scheme = task
    workload = build_workload(trace, scenario, window)
    return summarise(Simulation(workload, scenario, SCHEMES[scheme], load).run())


SCHEMES_COMPARED = ("lyra", "lyra-no-loaning")


def answer(
    trace: Trace,
    load: LoadSeries,
    scenario: Scenario,
    window: Window,
    regimes: Sequence[Regime | None],
    *,
    workers: int = 1,
    on_done: Callable[[int, int, str, str], None] | None = None,
) -> list[Answer]:
    """The gain at each regime (``None``: the inputs as they are), both schemes per regime, in parallel processes
    if ``workers > 1``. ``on_done(done, total, scheme, regime)`` after each simulation."""
    check_mappable(scenario)
    work = training_work(trace, scenario, window)
    measured = measure(trace, load, scenario, window)
    setups = [scenario if r is None else scenario_at(scenario, load, work, window, r) for r in regimes]
    tasks = [(trace, load, setup, window, scheme) for setup in setups for scheme in SCHEMES_COMPARED]
    labels = [(scheme, (r or measured).describe()) for r in regimes for scheme in SCHEMES_COMPARED]
    runs: list[SchemeMetrics] = []
    if workers > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for done, metrics in enumerate(pool.map(run_scheme, tasks), start=1):
                runs.append(metrics)
                if on_done is not None:
                    on_done(done, len(tasks), *labels[done - 1])
    else:
        for done, task in enumerate(tasks, start=1):
            runs.append(run_scheme(task))
            if on_done is not None:
                on_done(done, len(tasks), *labels[done - 1])
    answers = []
    for i, (regime, setup) in enumerate(zip(regimes, setups, strict=True)):
        (training,) = setup.training.groups
        lyra, no_loaning = runs[2 * i], runs[2 * i + 1]
        answers.append(
            Answer(
                regime or measured,
                lyra.jct_mean_s,
                no_loaning.jct_mean_s,
                training.servers,
                setup.inference.req_per_server,
                jct_bound(build_workload(trace, setup, window), setup).mean_jct_s,
                lyra.inference_short_server_s,
                lyra.inference_short_share,
            )
        )
    return answers


def shortfall_warning(answers: Sequence[Answer]) -> str | None:
    """A line when ``lyra`` left more than :data:`~lyra.sim.calibration.SHORTFALL_TOLERANCE` of the inference demand
    unmet at some regimes: there the gain is measured on a pool too small for its load (a low idle share asks more
    of the pool at the peak than it has), and reads only with that shortfall beside it."""
    short = [a for a in answers if a.inference_short_share > SHORTFALL_TOLERANCE]
    if not short:
        return None
    worst = max(a.inference_short_share for a in short)
    idle = ", ".join(f"{v:.2f}" for v in sorted({a.regime.idle_share for a in short}))
    return (
        f"WARNING: inference demand went unmet by more than {SHORTFALL_TOLERANCE:.0%} under lyra at {len(short)} of "
        f"{len(answers)} regimes (idle share {idle}; up to {worst:.1%} of the demand): the pool there is too small "
        "for its load, so read those gains with the shortfall beside them"
    )


def grid_regimes(grid: Mapping[str, Sequence[float]]) -> list[Regime]:
    return [
        Regime(idle, fit, offered, speed)
        for idle, fit, offered, speed in itertools.product(
            grid["idle-share"], grid["fit-share"], grid["offered-load"], grid["inference-speed"]
        )
    ]


def format_answers(answers: Sequence[Answer]) -> str:
    header = (
        f"{'idle share':>10} {'T4 fit':>7} {'offered load':>12} {'T4 speed':>8} {'training servers':>16} "
        f"{'no-loaning JCT (s)':>18} {'lyra JCT (s)':>12} {'gain':>7} {'pays (>= 10%)':>13} "
        f"{'bound (lyra/bound)':>18} {'lyra inf. short (s / share)':>27}"
    )
    lines = [header]
    for a in answers:
        r = a.regime
        bound = f"{a.bound_s:.0f} ({a.jct_lyra_s / a.bound_s:.2f}x)" if a.bound_s > 0 else "-"
        short = f"{a.inference_short_server_s:.0f} / {a.inference_short_share:.4%}"
        lines.append(
            f"{r.idle_share:>10.2f} {r.fit_share:>7.2f} {r.offered_load:>12.2f} {r.inference_speed:>8g} "
            f"{a.training_servers:>16d} {a.jct_no_loaning_s:>18.0f} {a.jct_lyra_s:>12.0f} {a.gain:>7.1%} "
            f"{'yes' if a.pays else 'no':>13} {bound:>18} {short:>27}"
        )
    return "\n".join(lines)
