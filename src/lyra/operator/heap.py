"""The operator's heap and Python's cyclic garbage collector.

At 5,000 nodes the operator holds about 400,000 objects that live for hours (the watch caches' objects, the last
pass's readings, the API client, the modules), and a busy pass allocates as many again that live only for the pass
(records, actions, pod manifests). With the collector's default thresholds a full collection, which visits every
object (0.25 s at that size), ran about twice in every busy pass: the pass's own objects outlive two young
collections and soon make up the quarter of the heap that starts a full one. Two settings (docs/benchmarks.md,
"The collector"):

* :func:`tune_collector`: a young collection every :data:`YOUNG_THRESHOLD` allocations instead of 700, so a pass's
  objects are mostly freed (by reference counting, when the pass drops them) before any collection sees them;
* :func:`freeze_survivors`, once the first pass is done: what survived it is moved out of the collector's sight
  (``gc.freeze``), so later collections visit only what came after.

Nothing Lyra keeps is cyclic garbage: a cache's JSON object or a pass's record is freed by reference counting when it
is replaced or dropped, frozen or not. A frozen object that became part of a garbage cycle would stay (the collector
no longer looks at it); the collection before the freeze leaves none behind.
"""

from __future__ import annotations

import gc

#: Allocations (less deallocations) of container objects between two young collections (Python's default: 700).
YOUNG_THRESHOLD = 50_000
#: Young collections between two middle ones (Python's default: 10).
MIDDLE_THRESHOLD = 20


def tune_collector() -> tuple[int, int, int]:
    """Set the operator's collector thresholds; returns the ones before."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, before[2])
    return before


def freeze_survivors() -> None:
    """Collect once, then freeze every object that survived (see the module docstring)."""
    gc.collect()
    gc.freeze()
