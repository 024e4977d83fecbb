"""Queued jobs, grouped so that "who could start now" is cheap to ask.

Jobs wait in buckets keyed by (the GPU types they may use, their GPUs per worker, their base size in workers); each
bucket is sorted by the scheme's ordering key. Types, worker sizes and base sizes are few (Philly has ten sizes; a
scenario a few types), so "the best head that fits" and "a prefix per bucket" cost a handful of bucket visits, not
a scan of the queue. A bucket's base needs ``gpus_per_worker * base`` GPUs.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator

from lyra.sim.jobs import QueueEntry

#: (GPU types a job may use, GPUs per worker, base workers).
BucketKey = tuple[frozenset[str], int, int]


class JobQueue:
    def __init__(self) -> None:
        self.buckets: dict[BucketKey, list[QueueEntry]] = {}
        self.size = 0
        #: Bucket keys by base GPUs, then GPUs per worker, then types (buckets are never removed, so a new key is a
        #: new length).
        self._order: list[BucketKey] = []

    def push(self, key: BucketKey, entry: QueueEntry) -> None:
        insort(self.buckets.setdefault(key, []), entry)
        self.size += 1

    def remove(self, key: BucketKey, entry: QueueEntry) -> None:
        bucket = self.buckets[key]
        position = bisect_left(bucket, entry)
        if position >= len(bucket) or bucket[position] != entry:
            raise RuntimeError(f"queue entry for job {entry[2]} is missing")
        del bucket[position]
        self.size -= 1

    def could_start(self, available: Callable[[frozenset[str], int], int]) -> bool:
        """True if some bucket's base GPUs fit in what ``available`` says its types offer workers of its size, in
        GPUs."""
        return any(
            bucket and per_worker * base <= available(types, per_worker)
            for (types, per_worker, base), bucket in self.buckets.items()
        )

    def prefix(self, available: Callable[[frozenset[str], int], int]) -> list[int]:
        """Job indices: per bucket, the first ``available // need`` jobs, ``need`` being a base's GPUs (a superset
        of whom any allocation of that much room could admit from it, since within a bucket admission follows the
        bucket's order)."""
        chosen: list[int] = []
        if len(self._order) != len(self.buckets):
            self._order = sorted(self.buckets, key=lambda key: (key[1] * key[2], key[1], sorted(key[0])))
        for key in self._order:
            bucket = self.buckets[key]
            if not bucket:
                continue
            types, per_worker, base = key
            need = per_worker * base
            room = available(types, per_worker)
            if need <= room:
                chosen.extend(entry[3] for entry in bucket[: room // need])
        return chosen

    def best_fit(self, fits: Callable[[BucketKey], bool]) -> QueueEntry | None:
        """The head with the smallest key among buckets whose base ``fits`` says can start."""
        heads = [bucket[0] for key, bucket in self.buckets.items() if bucket and fits(key)]
        return min(heads, default=None)

    def head(self) -> QueueEntry | None:
        return min((bucket[0] for bucket in self.buckets.values() if bucket), default=None)

    def ordered(self) -> Iterator[QueueEntry]:
        return heapq.merge(*self.buckets.values())
