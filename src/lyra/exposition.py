"""What every Prometheus exporter of Lyra's carries (the operator's and the extender's ``/metrics``): the process's
own metrics (``process_*``: CPU, resident memory, open files; ``python_*``: garbage collections, version) and no
``*_created`` series, a counter's or histogram's creation time, a second series per labelled child that no dashboard
or alert reads."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)


def exporter_registry() -> CollectorRegistry:
    """A registry for one component's metrics, with the process's collectors registered."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
