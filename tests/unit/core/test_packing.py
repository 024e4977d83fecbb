"""The one placement rule (``Layout``): where added workers go, which leave on a scale-in, all-or-nothing gangs,
exact undo and independent copies.

Servers are written ``name:free`` with a ``!`` for a loaned (unsafe) server and an optional ``@type`` (default V):
``"a:8 b!:4 c:6@T"``. Servers are indexed in name order, which is the final tie-break.
"""

from __future__ import annotations

import pytest

from lyra.core.packing import Layout, Slot


def layout(spec: str, placed: list[tuple[str, str, int, int]] | None = None) -> Layout:
    slots = []
    for item in spec.split():
        head, _, gpu_type = item.partition("@")
        name, _, free = head.partition(":")
        safe = not name.endswith("!")
        slots.append(Slot(name.rstrip("!"), gpu_type or "V", int(free), safe))
    return Layout(slots, placed or [])


def type_index(built: Layout, gpu_type: str = "V") -> int:
    return built.types.index(gpu_type)


# (id, servers, workers already placed (job, server, workers, GPUs per worker), GPUs per worker, workers to add,
#  expected placement of job "j" afterwards, or None when the gang does not fit)
PLACE: list[tuple[str, str, list[tuple[str, str, int, int]], int, int, dict[str, int] | None]] = [
    # 1. servers already hosting the job first, while they have room
    ("hosting-server-first", "a:8 b:6", [("j", "b", 2, 1)], 1, 3, {"b": 5}),
    ("hosting-servers-then-the-rest", "a:8 b:3", [("j", "b", 1, 1)], 1, 5, {"a": 3, "b": 3}),
    ("hosting-safe-before-hosting-loaned", "a!:8 b:8", [("j", "a", 1, 1), ("j", "b", 1, 1)], 1, 2, {"a": 1, "b": 3}),
    ("hosting-server-of-another-type-ignored", "a:8 b:8@T", [("j", "b", 1, 1)], 1, 2, {"a": 2, "b": 1}),
    # 2. the tightest single server that takes them all (best fit)
    ("tightest-that-fits", "a:8 b:3 c:5", [], 1, 3, {"b": 3}),
    ("tightest-that-fits-skips-too-small", "a:8 b:3 c:5", [], 1, 4, {"c": 4}),
    ("tightest-counts-worker-size", "a:8 b:3 c:4", [], 2, 2, {"c": 2}),
    ("tightness-before-safety", "a!:3 b:4", [], 1, 3, {"a": 3}),
    ("safe-before-loaned-on-equal-room", "a!:4 b:4", [], 1, 3, {"b": 3}),
    ("lower-index-on-equal-room", "b:4 a:4", [], 1, 3, {"a": 3}),
    # 3. otherwise the roomiest (most workers), then again from 2. for the rest
    ("roomiest-then-tightest", "a:8 b:3 c:5", [], 1, 10, {"a": 8, "b": 2}),
    ("roomiest-safe-first", "a!:6 b:6 c:2", [], 1, 8, {"b": 6, "c": 2}),
    ("roomiest-counts-whole-workers", "a:7 b:6 c:3", [], 3, 3, {"b": 2, "c": 1}),
    ("roomiest-equal-workers-tightest-first", "a:5 b:4", [], 3, 2, {"a": 1, "b": 1}),
    ("fills-every-server", "a:8 b:3 c:5", [], 1, 16, {"a": 8, "b": 3, "c": 5}),
    # All or nothing.
    ("one-more-than-free", "a:8 b:3 c:5", [], 1, 17, None),
    ("three-6-gpu-servers-hold-three-4-gpu-workers", "a:6 b:6 c:6", [], 4, 3, {"a": 1, "b": 1, "c": 1}),
    ("three-6-gpu-servers-do-not-hold-four", "a:6 b:6 c:6", [], 4, 4, None),
    ("worker-larger-than-any-server", "a:3 b:3", [], 4, 1, None),
    ("only-its-own-type", "a:2 b:8@T", [], 1, 3, None),
    ("nothing-to-add", "a:0", [], 4, 0, {}),
]


@pytest.mark.parametrize(
    ("servers", "placed", "gpus_per_worker", "count", "expected"), [c[1:] for c in PLACE], ids=[c[0] for c in PLACE]
)
def test_place(
    servers: str,
    placed: list[tuple[str, str, int, int]],
    gpus_per_worker: int,
    count: int,
    expected: dict[str, int] | None,
) -> None:
    built = layout(servers, placed)
    free_before = list(built.free)
    before = built.placement("j")
    moves = built.place("j", gpus_per_worker, type_index(built), count)
    if expected is None:
        assert moves is None
        assert built.free == free_before, "a gang that does not fit changes nothing"
        assert built.placement("j") == before
        return
    assert moves is not None
    assert built.placement("j") == expected
    added = {built.names[s]: n for s, n in moves}
    assert sum(added.values()) == count
    for i, name in enumerate(built.names):
        assert built.free[i] == free_before[i] - added.get(name, 0) * gpus_per_worker >= 0


# (id, servers, placed workers of "j" (1 GPU each), workers to remove, expected placement afterwards)
REMOVE: list[tuple[str, str, dict[str, int], int, dict[str, int]]] = [
    ("loaned-before-safe", "a:8 b!:8", {"a": 1, "b": 3}, 2, {"a": 1, "b": 1}),
    ("fewest-workers-first", "a!:8 b!:8 c!:8", {"a": 3, "b": 1, "c": 2}, 3, {"a": 3}),
    ("higher-index-on-ties", "a!:8 b!:8 c!:8", {"a": 1, "b": 1, "c": 1}, 2, {"a": 1}),
    ("leaves-loaned-servers-entirely-first", "a:8 b!:8 c!:8", {"a": 1, "b": 3, "c": 1}, 2, {"a": 1, "b": 2}),
    ("then-safe-servers", "a:8 b:8 c!:8", {"a": 2, "b": 3, "c": 1}, 3, {"b": 3}),
    ("everything", "a:8 b!:8", {"a": 2, "b": 1}, 3, {}),
]


@pytest.mark.parametrize(
    ("servers", "placed", "count", "expected"), [c[1:] for c in REMOVE], ids=[c[0] for c in REMOVE]
)
def test_remove(servers: str, placed: dict[str, int], count: int, expected: dict[str, int]) -> None:
    built = layout(servers, [("j", s, n, 1) for s, n in placed.items()])
    free_before = list(built.free)
    moves = built.remove("j", 1, count)
    assert built.placement("j") == expected
    assert -sum(n for _, n in moves) == count
    assert sum(built.free) == sum(free_before) + count


def test_remove_only_one_type() -> None:
    built = layout("a:8 b!:8@T", [("j", "a", 2, 1), ("j", "b", 2, 1)])
    built.remove("j", 1, 1, only_type=type_index(built, "V"))
    assert built.placement("j") == {"a": 1, "b": 2}, "the loaned T4 server is not touched"


def test_remove_more_than_placed_refuses_and_changes_nothing() -> None:
    built = layout("a:8 b:8", [("j", "a", 2, 2), ("j", "b", 1, 2)])
    free_before = list(built.free)
    with pytest.raises(ValueError, match=r"job j: cannot remove 4 workers, it has 3"):
        built.remove("j", 2, 4)
    assert built.placement("j") == {"a": 2, "b": 1}
    assert built.free == free_before


def test_remove_all() -> None:
    built = layout("a:8 b!:8", [("j", "a", 2, 2), ("j", "b", 1, 2), ("k", "a", 1, 1)])
    built.remove_all("j", 2)
    assert built.placement("j") == {}
    assert built.workers("j") == 0
    assert built.free == [7, 8]
    assert "j" not in built.jobs


def test_initial_workers_take_their_gpus() -> None:
    built = layout("b:8 a:6@T", [("j", "a", 1, 4), ("k", "b", 3, 2), ("k", "b", 1, 2)])
    assert built.names == ["a", "b"]
    assert built.types == ["T", "V"]
    assert built.free == [2, 0]
    assert built.size == [6, 8], "the size is the free GPUs before the decision's jobs"
    assert built.placement("k") == {"b": 4}
    assert built.job_types("j") == {type_index(built, "T")}
    assert built.free_of_type == [2, 0]


def test_layout_refuses_overbooked_servers() -> None:
    with pytest.raises(ValueError, match=r"server a: -1 free GPUs"):
        layout("a:4", [("j", "a", 5, 1)])
    with pytest.raises(ValueError, match=r"server a: -1 free GPUs"):
        layout("a:-1")


def test_add_refuses_what_does_not_fit() -> None:
    built = layout("a:4")
    with pytest.raises(ValueError, match=r"job j: cannot move 3 workers on server a"):
        built.add("j", 0, 3, 2)
    with pytest.raises(ValueError, match=r"job j: cannot move -1 workers on server a"):
        built.add("j", 0, -1, 1)
    assert built.free == [4]


# (id, servers, GPUs per worker, room in workers, has room)
ROOM = [
    ("one-gpu-workers-count-gpus", "a:3 b:5", 1, 8, True),
    ("whole-workers-per-server", "a:3 b:5", 2, 3, True),
    ("three-6-gpu-servers", "a:6 b:6 c:6", 4, 3, True),
    ("no-server-big-enough", "a:3 b:3", 4, 0, False),
    ("empty", "a:0", 1, 0, False),
]


@pytest.mark.parametrize(
    ("servers", "gpus_per_worker", "room", "has_room"), [c[1:] for c in ROOM], ids=[c[0] for c in ROOM]
)
def test_room(servers: str, gpus_per_worker: int, room: int, has_room: bool) -> None:
    built = layout(servers)
    assert built.room(type_index(built), gpus_per_worker) == room
    assert built.has_room(type_index(built), gpus_per_worker) is has_room
    if room:
        assert built.place("j", gpus_per_worker, type_index(built), room) is not None, "room is what place adds"
    assert layout(servers).place("j", gpus_per_worker, type_index(built), room + 1) is None


def _state(built: Layout) -> tuple[list[int], dict[str, dict[int, int]], list[int]]:
    return list(built.free), {j: dict(h) for j, h in built.jobs.items()}, list(built.free_of_type)


def test_undo_restores_exactly() -> None:
    spec = "a:8 b!:3 c:5 d!:6@T"
    placed = [("k", "a", 2, 1), ("k", "c", 1, 1), ("m", "d", 1, 2)]
    fresh = layout(spec, placed)
    built = layout(spec, placed)
    history = []
    for job, g, t, count in [("j", 1, "V", 7), ("k", 1, "V", 3), ("m", 2, "T", 2), ("j", 1, "V", 1)]:
        moves = built.place(job, g, type_index(built, t), count)
        assert moves is not None
        history.append((job, moves, g))
    history.append(("k", built.remove("k", 1, 4), 1))
    for job, moves, g in reversed(history):
        built.undo(job, moves, g)
    assert _state(built) == _state(fresh)
    # The buckets behind the rule are restored too: the same placements land in the same places.
    for job, g, count in [("x", 1, 3), ("y", 2, 2), ("z", 1, 6)]:
        assert built.place(job, g, type_index(built), count) == fresh.place(job, g, type_index(fresh), count)
    assert _state(built) == _state(fresh)


def test_copies_are_independent() -> None:
    original = layout("a:8 b!:4 c:6", [("k", "a", 2, 1)])
    snapshot_before = _state(original)
    clone = original.copy()
    assert clone.place("j", 2, 0, 5) is not None
    clone.remove("k", 1, 1)
    assert _state(original) == snapshot_before, "changing the copy leaves the original alone"
    reference = layout("a:8 b!:4 c:6", [("k", "a", 2, 1)])
    for job, g, count in [("j", 2, 5), ("x", 1, 3)]:
        assert original.place(job, g, 0, count) == reference.place(job, g, 0, count)
    assert _state(original) == _state(reference)
    assert clone.placement("j") != {}
    assert _state(clone) != _state(original)


def test_long_lived_layout_stays_consistent() -> None:
    """Many placements and removals on one layout (the simulator keeps one for a whole run) behave like the same
    operations on a fresh layout with the same occupancy."""
    built = layout(" ".join(f"s{i}:8" for i in range(6)))
    for round_ in range(200):
        job = f"j{round_ % 7}"
        if built.workers(job):
            built.remove_all(job, 1)
        else:
            built.place(job, 1, 0, 1 + round_ % 11)
    occupancy = [(j, built.names[s], n, 1) for j, hosts in built.jobs.items() for s, n in hosts.items()]
    fresh = layout(" ".join(f"s{i}:8" for i in range(6)), occupancy)
    assert built.free == fresh.free
    for count in range(1, 6):
        a, b = built.copy(), fresh.copy()
        assert a.place("new", 1, 0, count) == b.place("new", 1, 0, count), count
