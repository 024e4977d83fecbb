"""Watching the demo's day: a rich terminal view redrawn in place, or plain lines when the output is not a terminal.

Both show what :class:`~lyra.cli.demo_run.LiveResult` read from the cluster: inference servers by loan state (per GPU
type: the pool has one), jobs queued and running with their base and flexible workers, the latest decisions from
Events with their reasons, and how far the day is.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol, TextIO

from lyra.cli.demo_run import LiveResult

PLAIN_STEP = 0.1
DECISIONS_SHOWN = 6


class View(Protocol):
    def __call__(self, result: LiveResult, fraction: float) -> None: ...

    def close(self) -> None: ...


def _clock(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    return f"{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}"


class PlainView:
    """A line every tenth of the day, and at its end: for logs and CI."""

    def __init__(self, gpu_type: str, stream: TextIO | None = None) -> None:
        self.gpu_type = gpu_type
        self.stream = stream if stream is not None else sys.stdout
        self.shown = -1

    def __call__(self, result: LiveResult, fraction: float) -> None:
        step = int(fraction / PLAIN_STEP + 1e-9)
        if step == self.shown or not result.samples:
            return
        self.shown = step
        s = result.samples[-1]
        states = " ".join(f"{k} {v}" for k, v in sorted(s.states.items()))
        self.stream.write(
            f"[{result.mode}] {fraction:4.0%} {_clock(s.t)} load {s.load:6.0f} req/s, {s.ready}/{s.replicas} "
            f"replicas on {s.servers_needed} {self.gpu_type} servers needed ({states}); jobs queued {s.queued}, "
            f"running {s.running} (base {s.base_workers}, flexible {s.flexible_workers} workers)\n"
        )
        self.stream.flush()

    def close(self) -> None:
        return None


class RichView:
    """A live panel: servers, jobs, the latest decisions and a progress bar for the day."""

    def __init__(self, gpu_type: str) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn

        self.gpu_type = gpu_type
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"))
        self.task = self.progress.add_task("the day", total=1.0)
        self.live = Live(console=Console(), refresh_per_second=4, transient=False)
        self.live.start()

    def __call__(self, result: LiveResult, fraction: float) -> None:
        from rich.console import Group
        from rich.table import Table

        if not result.samples:
            return
        s = result.samples[-1]
        self.progress.update(self.task, completed=fraction, description=f"[{result.mode}] day {_clock(s.t)}")
        servers = Table(title=f"inference servers ({self.gpu_type})", expand=False)
        for column in ("load req/s", "replicas ready", "needed", "serving", "idle", "loaned", "reclaiming"):
            servers.add_column(column, justify="right")
        servers.add_row(
            f"{s.load:.0f}", f"{s.ready}/{s.replicas}", str(s.servers_needed),
            *(str(s.states.get(k, 0)) for k in ("serving", "idle", "loaned", "reclaiming")),
        )  # fmt: skip
        jobs = Table(title="training jobs", expand=False)
        for column in ("queued", "running", "base workers", "flexible workers", "finished", "GPUs by type"):
            jobs.add_column(column, justify="right")
        finished = sum(1 for j in result.jobs.values() if j.finished is not None)
        busy = ", ".join(f"{k}: {v}" for k, v in sorted(s.busy.items()))
        jobs.add_row(str(s.queued), str(s.running), str(s.base_workers), str(s.flexible_workers), str(finished), busy)
        decisions = Table(title="latest decisions (Events)", expand=True)
        for column in ("time", "reason", "object", "message"):
            decisions.add_column(column, overflow="fold")
        for when, reason, subject, message in result.decisions[-DECISIONS_SHOWN:]:
            decisions.add_row(_clock(when), reason, subject, message)
        parts: list[Any] = [servers, jobs, decisions, self.progress]
        self.live.update(Group(*parts))

    def close(self) -> None:
        self.live.stop()


def make_view(gpu_type: str, *, plain: bool) -> View:
    """The rich view on a terminal (when rich is installed), else plain lines."""
    if not plain and sys.stdout.isatty():
        try:
            return RichView(gpu_type)
        except ImportError:
            pass
    return PlainView(gpu_type)
