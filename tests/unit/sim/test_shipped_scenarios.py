"""The scenarios shipped beside the default parse, and each differs from the default only where docs/evaluation.md
says it does (the sizes that ``--calibrate`` replaces aside): a scenario is fixed before schemes are compared on
it, and a change to one must show here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import lyra.sim
from lyra.sim.scenario import load_scenario

SCENARIOS = Path(lyra.sim.__file__).parent / "scenarios"
#: Replaced by ``lyra simulate --calibrate``: the documented runs of these scenarios calibrate.
CALIBRATED = {
    ("training", "groups", "0", "servers"),
    ("inference", "groups", "0", "servers"),
    ("inference", "req_per_server"),
}
#: What each scenario changes against default.yaml, as field paths or their prefixes (docs/evaluation.md names the
#: same fields).
DOCUMENTED = {
    "reclaim-stress.yaml": {("bursts",), ("calibration", "inference_utilisation")},
    "poster-usage.yaml": {
        ("memory", "inference_fit_share"),
        ("memory", "size_exponent"),
        ("calibration", "training_usage"),
    },
}


def differences(left: Any, right: Any, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if isinstance(left, dict) and isinstance(right, dict):
        found: set[tuple[str, ...]] = set()
        for key in sorted(set(left) | set(right)):
            if key not in left or key not in right or left[key] is None or right[key] is None:
                if left.get(key) != right.get(key):
                    found.add((*path, key))
                continue
            found |= differences(left[key], right[key], (*path, key))
        return found
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)) and len(left) == len(right):
        found = set()
        for index, (one, other) in enumerate(zip(left, right, strict=True)):
            found |= differences(one, other, (*path, str(index)))
        return found
    return set() if left == right else {path}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_a_shipped_scenario_differs_from_the_default_only_where_documented(name: str) -> None:
    default = load_scenario().model_dump()
    scenario = load_scenario(SCENARIOS / name).model_dump()
    found = differences(default, scenario) - CALIBRATED
    documented = DOCUMENTED[name]
    undocumented = {path for path in found if not any(path[: len(d)] == d for d in documented)}
    assert not undocumented, f"{name} differs from default.yaml where docs/evaluation.md does not say: {undocumented}"
    unchanged = {d for d in documented if not any(path[: len(d)] == d for path in found)}
    assert not unchanged, f"{name} no longer differs from default.yaml in {unchanged}"


def test_every_shipped_scenario_parses() -> None:
    names = sorted(p.name for p in SCENARIOS.glob("*.yaml"))
    assert {"default.yaml", *DOCUMENTED} <= set(names)
    for name in names:
        load_scenario(SCENARIOS / name)


def test_the_poster_usage_scenario_holds_its_documented_values() -> None:
    scenario = load_scenario(SCENARIOS / "poster-usage.yaml")
    assert scenario.calibration.training_usage == 0.90
    assert (scenario.memory.inference_fit_share, scenario.memory.size_exponent) == (0.8, 0.0)
