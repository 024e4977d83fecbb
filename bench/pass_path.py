"""Follow one operator pass's data through the code, as a trace of its calls (docs/architecture.md, issue 31).

``uv run --locked python -m bench.pass_path [--all] [--verbose]``. One steady pass over the unit tests' fake cluster
(three T4 inference servers, two T4 training servers, one service, one job, after four passes) is traced with a
profile hook, from ``read_world`` through ``decide``. A step is a call from one ``lyra.operator`` module (``--all``:
any Lyra module) into another, the nearest such frame on the stack being the caller, each caller-callee pair counted
once in the order first taken; a return is a step into a module already entered; a look-up is a step whose calls all
stay inside the callee (a record's property, a time helper), so the reader comes straight back. The script reads
only ``read_world`` (through the fake cluster) and ``decide``, so it runs on a tree from before the split of
``observe`` too.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from tests.unit.operator.fake_cluster import T4, FakeCluster, inference_service, node, training_job

from lyra.operator.decide import decide


@dataclass
class _Frame:
    module: str | None  # None: not a module the count follows
    step: tuple[str, str] | None = None  # the step that entered ``module``, if this call took one


@dataclass
class PassPath:
    prefix: str
    stack: list[_Frame] = field(default_factory=lambda: [_Frame("<pass>")])
    order: list[tuple[str, str]] = field(default_factory=list)
    leads_further: dict[tuple[str, str], bool] = field(default_factory=dict)
    first_function: dict[tuple[str, str], str] = field(default_factory=dict)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "return":
            if len(self.stack) > 1:
                self.stack.pop()
            return
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        module = name if name.startswith(self.prefix) else None
        entry = _Frame(module)
        caller = next(f for f in reversed(self.stack) if f.module is not None)
        if module is not None and caller.module != module:
            assert caller.module is not None
            step = (caller.module, module)
            if step not in self.leads_further:
                self.leads_further[step] = False
                self.first_function[step] = frame.f_code.co_name
                self.order.append(step)
            entry.step = step
            opener = next((f for f in reversed(self.stack) if f.step is not None and f.module == caller.module), None)
            if opener is not None and opener.step is not None:
                self.leads_further[opener.step] = True
        self.stack.append(entry)

    def count(self, *, lookups: bool) -> tuple[int, int, int, dict[str, int]]:
        """Steps, modules entered, returns, and the returns into each module."""
        entered: set[str] = set()
        steps = returns = 0
        into: dict[str, int] = {}
        for step in self.order:
            if not lookups and not self.leads_further[step]:
                continue
            steps += 1
            if step[1] in entered:
                returns += 1
                into[step[1]] = into.get(step[1], 0) + 1
            entered.add(step[1])
        return steps, len(entered), returns, into


def _steady_cluster() -> FakeCluster:
    inference = [node(f"inf-{i}", "inference", T4) for i in range(3)]
    cluster = FakeCluster([*inference, node("trn-0", "training", T4), node("trn-1", "training", T4)])
    cluster.add_service(inference_service("chat", replicas=1))
    cluster.add_job(training_job("bert", 1, 4))
    for _ in range(4):
        cluster.apply(decide(cluster.world()))
        cluster.schedule()
        cluster.tick(30)
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--all", action="store_true", help="follow every Lyra module, not only the operator's")
    parser.add_argument("--verbose", action="store_true", help="list the steps (L: a look-up)")
    args = parser.parse_args(argv)
    cluster = _steady_cluster()
    path = PassPath("lyra." if args.all else "lyra.operator.")
    sys.setprofile(path.profile)
    try:
        decide(cluster.world())
    finally:
        sys.setprofile(None)
    for lookups in (True, False):
        steps, modules, returns, into = path.count(lookups=lookups)
        by_module = ", ".join(
            f"{m.removeprefix('lyra.operator.')} {n}" for m, n in sorted(into.items(), key=lambda i: -i[1])
        )
        label = "all steps" if lookups else "without look-ups"
        print(f"{label}: {steps} steps across {modules} modules, {returns} returns ({by_module})")
    if args.verbose:
        for step in path.order:
            mark = "  " if path.leads_further[step] else "L "
            print(f"{mark}{step[0]} -> {step[1]} ({path.first_function[step]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
