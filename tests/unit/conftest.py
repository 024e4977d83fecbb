"""Settings every unit test shares.

Hypothesis's per-example deadline (200 ms by default) is a timed assertion: on a loaded machine (CI shares two
cores with control planes) a correct example can exceed it and fail the test. Timing belongs to the benchmarks
(``make bench``), so the unit tests' profile has no deadline; what an example checks is unchanged.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("lyra-unit", deadline=None)
settings.load_profile("lyra-unit")
