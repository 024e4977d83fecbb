"""The ablations of lyra are lyra with exactly one switch off, and every table runs them."""

from __future__ import annotations

from dataclasses import fields

from lyra.sim.schemes import SCHEMES, resolve


def _differences(a: str, b: str) -> set[str]:
    return {
        f.name
        for f in fields(SCHEMES[a])
        if f.name != "name" and getattr(SCHEMES[a], f.name) != getattr(SCHEMES[b], f.name)
    }


def test_each_ablation_turns_off_one_switch_of_lyra() -> None:
    # Turning loaning off also leaves no server to reclaim: the reclaim strategy goes with it.
    assert _differences("lyra", "lyra-no-loaning") == {"loaning", "reclaim"}
    assert _differences("lyra", "lyra-no-elasticity") == {"elastic"}
    assert _differences("lyra", "lyra-exact-free") == {"exact_durations", "free_preemption"}


def test_all_runs_the_ablations_beside_lyra() -> None:
    assert [s.name for s in resolve("all")] == [
        "baseline", "basic", "lyra-no-loaning", "lyra-no-elasticity", "lyra", "lyra-exact-free", "fifo", "sjf", "las",
    ]  # fmt: skip
