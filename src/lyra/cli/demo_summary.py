"""The demo's figures: what the cluster did (from :class:`~lyra.cli.demo_run.LiveResult`, read from the cluster),
what the simulator says the same day gives (:func:`simulate_day`), and how far apart they are (:func:`compare`).

Times are trace hours. Queueing is a job's wait from submission to its first start, JCT from submission to its end,
on both sides. The figures held to the cluster (:data:`HELD`) must agree within :data:`TOLERANCE` (relative), or,
for counts, within :data:`COUNT_SLACK` events.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lyra.api import conditions
from lyra.cli.demo_day import Day, base_only
from lyra.cli.demo_run import LiveResult
from lyra.emulator import StepReport
from lyra.sim.engine import Simulation, SimulationResult
from lyra.sim.scenario import Scenario
from lyra.sim.schemes import Admission, Scheme, resolve
from lyra.sim.workload import Workload

TOLERANCE = 0.15
COUNT_SLACK = 2
#: The figures the simulator is held to, and whether each is a count of events.
HELD: Mapping[str, bool] = {
    "jct_mean_h": False,
    "queue_mean_h": False,
    "lent_gpu_h": False,
    "preemptions": True,
}
LABELS = {
    "jobs_finished": "jobs finished",
    "queue_mean_h": "queueing mean (h)",
    "queue_p95_h": "queueing p95 (h)",
    "jct_mean_h": "JCT mean (h)",
    "jct_p95_h": "JCT p95 (h)",
    "training_gpu_h": "GPU-hours, training pool",
    "lent_gpu_h": "GPU-hours lent (inference pool)",
    "busy_lent_gpu_h": "GPU-hours trained on lent servers",
    "preemptions": "preemptions",
    "scale_ins": "scale-ins",
    "reclaims": "servers reclaimed",
    "reclaim_mean_h": "reclaim duration mean (h)",
    "short_count": "inference short (stretches)",
    "short_longest_h": "inference short, longest (h)",
    "reclaim_wait_longest_h": "replicas waiting on a reclaim, longest (h)",
}
#: The scheme of each live mode: Lyra's, and the cluster with loaning and elasticity off (jobs at their base).
OFF_SCHEME = Scheme("off", Admission.CORE)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _p95(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def live_figures(result: LiveResult, day: Day) -> dict[str, float]:
    done = [j for j in result.jobs.values() if j.finished is not None and j.started is not None]
    samples = result.samples
    lent = busy_lent = training = 0.0
    for before, after in itertools.pairwise(samples):
        # Inside the day only, as the simulator counts them (its window); not the tail while the last jobs finish.
        dt = (min(after.t, day.seconds) - min(before.t, day.seconds)) / 3600
        lent += before.states.get("loaned", 0) * result.gpus_per_server * dt
        training += before.busy.get(day.training_type, 0) * dt
        busy_lent += before.busy.get(day.inference_type, 0) * dt
    return {
        "jobs_finished": len(done),
        "queue_mean_h": _mean([(j.started or 0) - j.submitted for j in done]) / 3600,
        "queue_p95_h": _p95([(j.started or 0) - j.submitted for j in done]) / 3600,
        "jct_mean_h": _mean([(j.finished or 0) - j.submitted for j in done]) / 3600,
        "jct_p95_h": _p95([(j.finished or 0) - j.submitted for j in done]) / 3600,
        "training_gpu_h": training,
        "lent_gpu_h": lent,
        "busy_lent_gpu_h": busy_lent,
        "preemptions": sum(j.preemptions for j in result.jobs.values()),
        "scale_ins": sum(j.scale_ins for j in result.jobs.values()),
        "reclaims": result.events.get(conditions.RECLAIMING, 0),
        "reclaim_mean_h": _mean(result.reclaim_durations) / 3600,
        "short_count": len(result.short),
        "short_longest_h": max((end - begin for begin, end in result.short), default=0.0) / 3600,
        "reclaim_wait_longest_h": result.longest_reclaim_wait / 3600,
    }


def simulate_day(day: Day, mode: str, pass_s: float = 0.0) -> SimulationResult:
    """The day replayed by the simulator: Lyra's scheme, or loaning and elasticity off (every job at its base). A
    decision comes the scenario's ``decision_delay_s`` (the wait for the next pass) plus ``pass_s`` wall seconds (the
    pass itself, as the run measured it) times the speed-up after the change that calls for it."""
    if mode == "lyra":
        (scheme,) = resolve("lyra")
        jobs = day.jobs
    else:
        scheme, jobs = OFF_SCHEME, base_only(day.jobs)
    from lyra.sim.workload import Window

    workload = Workload(jobs, Window(0.0, day.seconds), 0)
    scenario = day.scenario
    if pass_s:
        data = scenario.model_dump()
        data["scheduler"]["decision_delay_s"] += pass_s * day.speed_up
        scenario = Scenario.model_validate(data)
    return Simulation(workload, scenario, scheme, day.load).run()


def sim_figures(result: SimulationResult) -> dict[str, float]:
    done = [r for r in result.records if math.isfinite(r.finish_s) and math.isfinite(r.first_start_s)]
    return {
        "jobs_finished": len(done),
        "queue_mean_h": _mean([r.first_start_s - r.submit_s for r in done]) / 3600,
        "queue_p95_h": _p95([r.first_start_s - r.submit_s for r in done]) / 3600,
        "jct_mean_h": _mean([r.finish_s - r.submit_s for r in done]) / 3600,
        "jct_p95_h": _p95([r.finish_s - r.submit_s for r in done]) / 3600,
        "training_gpu_h": result.busy_training_gpu_s / 3600,
        "lent_gpu_h": result.loaned_gpu_s / 3600,
        "busy_lent_gpu_h": result.busy_loaned_gpu_s / 3600,
        "preemptions": sum(r.preemptions for r in result.records),
        "scale_ins": result.scale_ins.total,
        "reclaims": result.reclaimed_servers.total,
    }


@dataclass(frozen=True, slots=True)
class Difference:
    figure: str
    live: float
    simulated: float
    held: bool
    within: bool

    @property
    def relative(self) -> float | None:
        if self.live == 0:
            return None if self.simulated == 0 else math.inf
        return (self.simulated - self.live) / abs(self.live)


def compare(live: Mapping[str, float], simulated: Mapping[str, float]) -> list[Difference]:
    """Each figure both sides have, and whether the held ones agree."""
    rows = []
    for figure in LABELS:
        if figure not in live or figure not in simulated:
            continue
        a, b = live[figure], simulated[figure]
        is_count = HELD.get(figure, False)
        if is_count:
            within = abs(a - b) <= COUNT_SLACK or abs(a - b) <= TOLERANCE * max(abs(a), abs(b))
        else:
            within = abs(a - b) <= TOLERANCE * max(abs(a), abs(b)) or a == b
        rows.append(Difference(figure, a, b, figure in HELD, within))
    return rows


def side_by_side(lyra: Mapping[str, float], off: Mapping[str, float]) -> str:
    lines = [f"{'':36} {'Lyra on':>10} {'Lyra off':>10}"]
    for figure, label in LABELS.items():
        if figure in lyra and figure in off:
            lines.append(f"{label:36} {_fmt(lyra[figure]):>10} {_fmt(off[figure]):>10}")
    return "\n".join(lines)


def comparison_table(mode: str, rows: Sequence[Difference]) -> str:
    lines = [f"{'[' + mode + '] figure':36} {'live':>9} {'simulated':>9} {'error':>8}"]
    for row in rows:
        rel = row.relative
        error = "-" if rel is None else ("inf" if math.isinf(rel) else f"{rel:+.0%}")
        mark = "" if not row.held else (" ok" if row.within else " OUT OF BOUNDS")
        lines.append(f"{LABELS[row.figure]:36} {_fmt(row.live):>9} {_fmt(row.simulated):>9} {error:>8}{mark}")
    return "\n".join(lines)


def markdown_table(tables: Mapping[str, Sequence[Difference]]) -> str:
    lines = ["| run | figure | live | simulated | relative error | held to 15 % |", "|---|---|---:|---:|---:|---|"]
    for mode, rows in tables.items():
        for row in rows:
            rel = row.relative
            error = "-" if rel is None else ("inf" if math.isinf(rel) else f"{rel:+.1%}")
            held = ("yes, within" if row.within else "yes, OUT") if row.held else "no"
            lines.append(
                f"| {mode} | {LABELS[row.figure]} | {_fmt(row.live)} | {_fmt(row.simulated)} | {error} | {held} |"
            )
    return "\n".join(lines)


#: How much longer than its interval the emulator's mean period may be before the demo warns: the simulator charges
#: each job's first progress and end one step of the interval (:func:`lyra.cli.demo_day.scenario_for`).
STEP_SLACK = 0.1


def emulator_steps(mode: str, report: StepReport | None, speed_up: float) -> tuple[str, str | None]:
    """A line on how the emulator kept its interval in the ``mode`` run, and a warning when it did not (the live
    run's starts and ends then waited longer than the simulator charges), or when that is unknown."""
    if report is None:
        return f"[{mode}] the emulator left no report of its steps", (
            f"[{mode}] the emulator left no report of its steps: whether they kept their interval is unknown"
        )
    period = report.mean_period_s
    if period is None:
        return f"[{mode}] the emulator ran {report.steps} step(s)", (
            f"[{mode}] the emulator ran fewer than two steps: whether they kept their interval is unknown"
        )
    said = (
        f"[{mode}] the emulator stepped every {period:.3f} s (interval {report.interval_s:g} s); "
        f"{report.late_steps} of {report.steps} steps took longer, the longest {report.longest_step_s:.3f} s"
    )
    if period <= report.interval_s * (1 + STEP_SLACK):
        return said, None
    extra = (period - report.interval_s) * speed_up
    return said, (
        f"[{mode}] the emulator stepped every {period:.3f} s, not every {report.interval_s:g} s: each job's first "
        f"progress and its end waited about {extra:.0f} trace seconds longer than the simulator charges; this host "
        f"is too busy for --speed-up {speed_up:g}"
    )


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"
