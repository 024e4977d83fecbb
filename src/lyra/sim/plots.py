"""PNG plots of a comparison (matplotlib, Agg backend: no display needed).

* ``jct_cdf.png``: the JCT distribution of every scheme (log time axis);
* ``loans.png``: inference servers needed by the load against servers loaned to training, per loaning scheme,
  over the first week of the window (a longer span is too dense to read);
* ``queue.png``: queued jobs over time, per scheme (symmetric-log axis: both 0 and thousands stay visible);
* ``sweep.png``: the sensitivity sweep (:mod:`lyra.sim.sweep`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from lyra.sim.engine import SimulationResult
from lyra.sim.sweep import KNOBS, SWEPT_SCHEMES, SweepResult

DAY_S = 86_400.0


def write_plots(directory: Path, results: Sequence[SimulationResult]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [_jct_cdf(directory, results), _loans(directory, results), _queue(directory, results)]


def _jct_cdf(directory: Path, results: Sequence[SimulationResult]) -> Path:
    figure, axes = plt.subplots(figsize=(8, 5))
    for result in results:
        jct = np.sort(np.array([max(r.jct_s, 1.0) for r in result.records]))
        share = np.arange(1, jct.size + 1) / jct.size
        axes.plot(jct, share, label=result.scheme, linewidth=1.4)
    axes.set_xscale("log")
    axes.set_xlabel("job completion time (s, log scale)")
    axes.set_ylabel("share of jobs")
    axes.set_title("JCT distribution per scheme")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    return _save(figure, directory / "jct_cdf.png")


def _loans(directory: Path, results: Sequence[SimulationResult]) -> Path:
    figure, axes = plt.subplots(figsize=(10, 5))
    shown = False
    for result in results:
        line = result.timeline
        if not line.time_s:
            continue
        days = np.array(line.time_s) / DAY_S
        week = days <= 7.0
        days = days[week]
        if not shown:
            axes.plot(
                days,
                np.array(line.inference_demand)[week],
                label="inference servers needed",
                color="black",
                linewidth=0.8,
            )
            axes.axhline(result.inference_servers, color="grey", linestyle="--", label="inference servers")
            shown = True
        if any(line.loaned_servers):
            axes.plot(
                days, np.array(line.loaned_servers)[week], label=f"loaned to training ({result.scheme})", linewidth=0.8
            )
    axes.set_xlabel("days since the window start")
    axes.set_ylabel("servers")
    axes.set_title("Inference load and capacity loaning (first week)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper right")
    return _save(figure, directory / "loans.png")


def _queue(directory: Path, results: Sequence[SimulationResult]) -> Path:
    figure, axes = plt.subplots(figsize=(10, 5))
    for result in results:
        line = result.timeline
        if line.time_s:
            axes.plot(np.array(line.time_s) / DAY_S, line.queued_jobs, label=result.scheme, linewidth=0.8)
    axes.set_xlabel("days since the window start")
    axes.set_ylabel("queued jobs")
    axes.set_yscale("symlog", linthresh=10)
    axes.set_title("Queue length over time")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper right")
    return _save(figure, directory / "queue.png")


def _save(figure: Figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_sweep_plot(path: Path, result: SweepResult) -> Path:
    """``sweep.png``: one panel per knob, mean JCT of each swept scheme against the knob's value, baseline
    dashed, and a red mark where the gain does not hold."""
    knobs = list(dict.fromkeys(p.knob for p in result.points))
    figure, axes = plt.subplots(1, len(knobs), figsize=(4.2 * len(knobs), 3.8), squeeze=False)
    for axis, knob in zip(axes[0], knobs, strict=True):
        points = [p for p in result.points if p.knob == knob]
        xs = [p.value for p in points]
        for scheme in SWEPT_SCHEMES:
            axis.plot(xs, [p.jct(scheme) for p in points], marker="o", label=scheme)
        axis.axhline(result.baseline.jct_mean_s, color="grey", linestyle="--", label="baseline")
        for p in points:
            if not result.holds(p):
                axis.axvspan(p.value, p.value, color="red", alpha=0.6, linewidth=6)
        axis.set_title(KNOBS[knob].label if knob in KNOBS else knob, fontsize=9)
        axis.set_xlabel(knob)
        axis.set_ylabel("mean JCT (s)")
        axis.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle("Where Lyra's gain holds (red marks: a point where it does not)", fontsize=10)
    return _save(figure, path)
