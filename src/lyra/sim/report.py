"""The poster's table as text, the JSON with every figure, and the per-job CSV.

The JSON holds no wall-clock time, so the same inputs and seed give the same bytes.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lyra.sim.engine import SimulationResult
from lyra.sim.metrics import SchemeMetrics
from lyra.sim.schemes import SCHEMES

#: The poster's table (Baseline, Basic, Advanced = Lyra, Ideal), for side-by-side reading. The poster's Ideal has
#: no counterpart here (``lyra-exact-free`` is not an ideal); it is shown as the poster printed it.
POSTER: dict[str, dict[str, float]] = {
    "baseline": {
        "queue_mean_s": 3072, "queue_median_s": 55, "queue_p95_s": 8357,
        "jct_mean_s": 16610, "jct_median_s": 791, "jct_p95_s": 82933,
        "usage_training": 0.72, "usage_overall": 0.52, "preemption_ratio": 0.0,
    },
    "basic": {
        "queue_mean_s": 2010, "queue_median_s": 26, "queue_p95_s": 3358,
        "jct_mean_s": 11236, "jct_median_s": 568, "jct_p95_s": 56477,
        "usage_training": 0.86, "usage_overall": 0.65, "preemption_ratio": 0.1224,
    },
    "lyra": {
        "queue_mean_s": 1835, "queue_median_s": 24, "queue_p95_s": 3238,
        "jct_mean_s": 10434, "jct_median_s": 525, "jct_p95_s": 56553,
        "usage_training": 0.86, "usage_overall": 0.68, "preemption_ratio": 0.0735,
    },
    "ideal": {
        "queue_mean_s": 1157, "queue_median_s": 22, "queue_p95_s": 3204,
        "jct_mean_s": 8891, "jct_median_s": 422, "jct_p95_s": 41146,
        "usage_training": 0.93, "usage_overall": 0.72, "preemption_ratio": 0.0572,
    },
}  # fmt: skip


def ratios(metrics: SchemeMetrics, baseline: SchemeMetrics | None) -> dict[str, float | None]:
    """Reductions against the baseline (baseline / scheme, so 1.67 means 1.67x shorter)."""
    if baseline is None:
        return {"queue_mean_reduction": None, "jct_mean_reduction": None}
    return {
        "queue_mean_reduction": _ratio(baseline.queue_mean_s, metrics.queue_mean_s),
        "jct_mean_reduction": _ratio(baseline.jct_mean_s, metrics.jct_mean_s),
    }


def _ratio(before: float, after: float) -> float | None:
    if after <= 0:
        return None if before <= 0 else math.inf
    return before / after


def where_the_gain_comes_from(metrics: Mapping[str, SchemeMetrics]) -> str | None:
    """One sentence: how much of lyra's mean-JCT gain over baseline each part gives alone (the two ablations), and
    whether lyra beats both parts. ``None`` unless baseline, lyra and both ablations are in ``metrics``."""
    needed = ("baseline", "lyra", "lyra-no-loaning", "lyra-no-elasticity")
    if not all(name in metrics for name in needed):
        return None
    base = metrics["baseline"].jct_mean_s
    both = base - metrics["lyra"].jct_mean_s
    elasticity = base - metrics["lyra-no-loaning"].jct_mean_s
    loaning = base - metrics["lyra-no-elasticity"].jct_mean_s
    parts = f"elasticity without loaning saves {elasticity:.0f} s, loaning without elasticity {loaning:.0f} s"
    better, better_name = max((elasticity, "elasticity"), (loaning, "loaning"))
    if both >= better:
        verdict = f"lyra (both) saves {both:.0f} s, {both - better:.0f} s more than {better_name} alone"
    else:
        verdict = f"lyra (both) saves {both:.0f} s, {better - both:.0f} s LESS than {better_name} alone"
    usage = (
        f"overall usage {metrics['baseline'].usage_overall:.2f} -> {metrics['lyra'].usage_overall:.2f}, "
        f"lent GPU-time used {metrics['lyra'].loaned_usage:.0%}"
    )
    return f"where the gain comes from (mean JCT, baseline {base:.0f} s): {parts}; {verdict}; {usage}"


def format_table(
    metrics: Mapping[str, SchemeMetrics], *, bound_s: float | None = None, with_poster: bool = True
) -> str:
    """The table; ``bound_s`` (the lower bound on mean JCT, :mod:`lyra.sim.bound`) adds a ``bound`` column: the
    bound and the scheme's mean JCT over it."""
    baseline = metrics.get("baseline")
    header = (
        f"{'scheme':<18} {'queue mean/median/p95 (s)':>27} {'JCT mean/median/p95 (s)':>27} "
        f"{'usage tr/all':>12} {'lent used':>9} {'preempt':>8} {'lost GPU-h':>10} {'inf. short s / share':>20} "
        f"{'inf. wait':>9} {'queue x':>8} {'JCT x':>6}"
    ) + (f" {'bound (JCT / bound)':>20}" if bound_s is not None else "")
    lines = [header, "-" * len(header)]
    for name, m in metrics.items():
        r = ratios(m, baseline)
        lines.append(
            _row(
                name,
                queue=(m.queue_mean_s, m.queue_median_s, m.queue_p95_s),
                jct=(m.jct_mean_s, m.jct_median_s, m.jct_p95_s),
                usage=(m.usage_training, m.usage_overall),
                lent_used=m.loaned_usage if name in SCHEMES and SCHEMES[name].loaning else None,
                preemption=m.preemption_ratio,
                lost=m.work_lost_gpu_h,
                short=(m.inference_short_server_s, m.inference_short_share),
                wait=m.reclaim_wait_share,
                queue_ratio=r["queue_mean_reduction"],
                jct_ratio=r["jct_mean_reduction"],
            )
            + (f" {bound_cell(m.jct_mean_s, bound_s):>20}" if bound_s is not None else "")
        )
    sentence = where_the_gain_comes_from(metrics)
    if sentence is not None:
        lines.append(sentence)
    lines.extend(format_counts(metrics))
    if with_poster:
        lines.append("poster (Philly-like 15-day production trace, >50,000 jobs):")
        base = POSTER["baseline"]
        for name, p in POSTER.items():
            lines.append(
                _row(
                    f"  {name}",
                    queue=(p["queue_mean_s"], p["queue_median_s"], p["queue_p95_s"]),
                    jct=(p["jct_mean_s"], p["jct_median_s"], p["jct_p95_s"]),
                    usage=(p["usage_training"], p["usage_overall"]),
                    lent_used=None,
                    preemption=p["preemption_ratio"],
                    lost=None,
                    short=None,
                    wait=None,
                    queue_ratio=base["queue_mean_s"] / p["queue_mean_s"],
                    jct_ratio=base["jct_mean_s"] / p["jct_mean_s"],
                )
            )
    return "\n".join(lines)


def bound_cell(jct_mean_s: float, bound_s: float) -> str:
    """``bound (mean JCT / bound)``, e.g. ``5210 (1.47x)``: how far a scheme is from the best possible."""
    ratio = f"{jct_mean_s / bound_s:.2f}x" if bound_s > 0 else "-"
    return f"{bound_s:.0f} ({ratio})"


def _row(
    name: str,
    *,
    queue: Sequence[float],
    jct: Sequence[float],
    usage: Sequence[float],
    lent_used: float | None,
    preemption: float,
    lost: float | None,
    short: tuple[float, float] | None,
    wait: float | None,
    queue_ratio: float | None,
    jct_ratio: float | None,
) -> str:
    def triple(values: Sequence[float]) -> str:
        return " / ".join(f"{v:.0f}" for v in values)

    def times(value: float | None) -> str:
        if value is None:
            return "-"
        return ">1000x" if value > 1000 else f"{value:.2f}x"

    lent = "-" if lent_used is None else f"{lent_used:.1%}"
    lost_h = "-" if lost is None else f"{lost:.0f}"
    waited = "-" if wait is None else f"{wait:.3%}"
    shortfall = "-" if short is None else f"{short[0]:.0f} / {short[1]:.3%}"
    return (
        f"{name:<18} {triple(queue):>27} {triple(jct):>27} "
        f"{usage[0]:>5.2f}/{usage[1]:<6.2f} {lent:>9} {preemption:>7.2%} {lost_h:>10} {shortfall:>20} {waited:>9} "
        f"{times(queue_ratio):>8} {times(jct_ratio):>6}"
    )


def format_counts(metrics: Mapping[str, SchemeMetrics]) -> list[str]:
    """The counts that compare schemes, inside the window with the tail after it in brackets, and the window's
    preemptions and scale-ins per busy lent GPU-hour (exposure). Only schemes that lend or preempt; none: no lines."""
    shown = {
        name: m
        for name, m in metrics.items()
        if (name in SCHEMES and SCHEMES[name].loaning) or m.preemptions or m.preemptions_tail
    }
    if not shown:
        return []

    def split(window: float, tail: float) -> str:
        return f"{window:.0f} [{tail:.0f}]"

    def per_hour(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    header = (
        f"{'counts: window [tail]':<22} {'reclaims':>13} {'servers recl.':>15} {'preempted jobs':>14} "
        f"{'preemptions':>13} {'scale-ins':>13} {'lost GPU-h':>11} {'busy lent GPU-h':>15} "
        f"{'preempt/h':>9} {'scale-in/h':>10}"
    )
    lines = [header]
    for name, m in shown.items():
        lines.append(
            f"{name:<22} {split(m.reclaims, m.reclaims_tail):>13} "
            f"{split(m.reclaimed_servers, m.reclaimed_servers_tail):>15} "
            f"{split(m.preempted_jobs, m.preempted_jobs_tail):>14} {split(m.preemptions, m.preemptions_tail):>13} "
            f"{split(m.scale_ins, m.scale_ins_tail):>13} {split(m.work_lost_gpu_h, m.work_lost_tail_gpu_h):>11} "
            f"{m.busy_lent_gpu_h:>15.0f} {per_hour(m.preemptions_per_busy_lent_gpu_h):>9} "
            f"{per_hour(m.scale_ins_per_busy_lent_gpu_h):>10}"
        )
    return lines


def results_json(metrics: Mapping[str, SchemeMetrics], context: Mapping[str, Any]) -> str:
    """``{"schemes": {name: figures}, "poster": ..., **context}``; infinities become null."""
    baseline = metrics.get("baseline")
    schemes = {name: {**m.as_dict(), **ratios(m, baseline)} for name, m in metrics.items()}
    document = {"schemes": schemes, "poster": POSTER, **context}
    return json.dumps(_finite(document), indent=2) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


JOB_COLUMNS = (
    "scheme", "name", "submit_s", "num_gpus", "gpus_per_worker", "min_workers", "max_workers", "first_start_s",
    "finish_s",
    "queue_s", "jct_s", "preemptions", "resizes", "migrations",
)  # fmt: skip


def write_jobs_csv(path: Path, results: Sequence[SimulationResult]) -> None:
    """One row per job and scheme, in scheme order then trace order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(JOB_COLUMNS)
        for result in results:
            for r in result.records:
                writer.writerow(
                    (
                        result.scheme, r.name, f"{r.submit_s:.3f}", r.num_gpus, r.gpus_per_worker, r.min_workers,
                        r.max_workers,
                        f"{r.first_start_s:.3f}", f"{r.finish_s:.3f}", f"{r.queue_s:.3f}", f"{r.jct_s:.3f}",
                        r.preemptions, r.resizes, r.migrations,
                    )
                )  # fmt: skip
