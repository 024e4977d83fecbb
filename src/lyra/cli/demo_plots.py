"""The demo's plots, from what the cluster did: lent servers against the inference load over the day, the training
queue, and the CDF of job completion times, Lyra on against off (``day.png`` puts the three side by side)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from lyra.cli.demo_day import Day
from lyra.cli.demo_run import LiveResult

COLOURS = {"lyra": "tab:blue", "off": "tab:grey"}


def plot_day(live: Mapping[str, LiveResult], day: Day, out_dir: Path) -> Path:
    """Write ``day.png`` to ``out_dir`` and return its path."""
    figure, (loans, queue, cdf) = plt.subplots(1, 3, figsize=(15, 4.2))
    for mode, result in live.items():
        hours = [s.t / 3600 for s in result.samples]
        colour = COLOURS.get(mode, "tab:orange")
        label = "Lyra on" if mode == "lyra" else "Lyra off"
        if mode == "lyra":
            loans.step(hours, [s.states.get("loaned", 0) for s in result.samples], where="post", color=colour,
                       label="servers lent (Lyra on)")  # fmt: skip
            loans.step(hours, [s.states.get("reclaiming", 0) for s in result.samples], where="post",
                       color="tab:red", label="servers reclaiming")  # fmt: skip
        queue.step(hours, [s.queued for s in result.samples], where="post", color=colour, label=label)
        jcts = sorted((j.finished - j.submitted) / 3600 for j in result.jobs.values() if j.finished is not None)
        if jcts:
            cdf.step(jcts, [(i + 1) / len(jcts) for i in range(len(jcts))], where="post", color=colour,
                     label=label)  # fmt: skip
    any_run = next(iter(live.values()))
    hours = [s.t / 3600 for s in any_run.samples]
    needed = loans.twinx()
    needed.plot(hours, [s.load for s in any_run.samples], color="tab:green", alpha=0.6, label="inference load")
    needed.set_ylabel("requests per second")
    loans.set(title="Inference servers lent against the load", xlabel="hour of the day", ylabel="servers")
    loans.legend(loc="upper left", fontsize=8)
    needed.legend(loc="upper right", fontsize=8)
    queue.set(title="Training jobs queued", xlabel="hour of the day", ylabel="jobs")
    queue.legend(fontsize=8)
    cdf.set(title="Job completion time (CDF)", xlabel="hours", ylabel="share of jobs")
    cdf.legend(fontsize=8)
    for axes in (loans, queue):
        axes.set_xlim(0, max(day.seconds / 3600, max(hours, default=0)))
    figure.suptitle(f"lyra demo: one day ({len(day.jobs)} Philly jobs, ServeGen load), speed-up {day.speed_up:g}")
    figure.tight_layout()
    path = out_dir / "day.png"
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
