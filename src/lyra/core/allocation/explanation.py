"""Why a job waits, in words a user reads in ``lyra status`` and on the job's ``Queued`` condition: what its base
needs and what the GPU types it may use hold now and at best. Worded only when asked (the simulator never asks)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from lyra.core.allocation.problem import Problem
from lyra.core.model import TrainingJob
from lyra.core.packing import Layout


class QueuedReasons(Mapping[str, str]):
    """Why each waiting job waits, worded on first read (most callers, like the simulator, never ask)."""

    def __init__(self, problem: Problem, layout: Layout, waiting: Iterable[TrainingJob]) -> None:
        self._problem = problem
        self._layout = layout
        self._jobs = {job.name: job for job in waiting}
        self._worded: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        reason = self._worded.get(name)
        if reason is None:
            reason = self._worded[name] = why_queued(self._problem, self._jobs[name], self._layout)
        return reason

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._jobs))

    def __len__(self) -> int:
        return len(self._jobs)

    def __repr__(self) -> str:
        return repr(dict(self))


def why_queued(problem: Problem, job: TrainingJob, layout: Layout) -> str:
    """Why ``job`` waits: what its base needs and what the GPU types it may use hold now and at best."""
    i = problem.index[job.name]
    base = f"base of {job.min_workers} worker{'s' if job.min_workers > 1 else ''} x {job.gpus_per_worker} GPU"
    base += "s" if job.gpus_per_worker > 1 else ""
    allowed = problem.type_preference(i)
    excluded = [t for t in problem.types if t not in {problem.types[a] for a in allowed}]
    if not allowed:
        present = ", ".join(problem.types) or "none"
        return f"may use none of the GPU types training can use now (present: {present})"
    parts = []
    for t in allowed:
        now = layout.room(t, job.gpus_per_worker)
        most = problem.most_workers(t, job.gpus_per_worker)
        parts.append(f"{problem.types[t]} holds {now} now, at most {most}")
    reason = f"{base} does not fit: " + "; ".join(parts)
    if excluded:
        reason += f" (may not use {', '.join(excluded)})"
    return reason
