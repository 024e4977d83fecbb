"""Lyra: lend idle inference GPU servers to elastic training jobs, and take them back with the fewest preemptions."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lyra-scheduler")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
