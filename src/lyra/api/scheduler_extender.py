"""How kube-scheduler calls Lyra's extender: one entry of a KubeSchedulerConfiguration's ``extenders``. The local
cluster's scheduler (:mod:`lyra.localcluster.componentconfig`) and the Helm chart's bundled scheduler
(:mod:`lyra.chart.sources`) both use :func:`extender_stanza`, so the stanza is spelled once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyra.api.names import GPU_RESOURCE

#: kube-scheduler's wait for one extender call; the extender's own bounds (its latency buckets, the body deadline)
#: are set against it.
EXTENDER_TIMEOUT = "5s"


@dataclass(frozen=True, slots=True)
class ExtenderClientTls:
    """How kube-scheduler calls an ``https`` extender: the CA it trusts and the client certificate it presents (none
    when the extender checks no client)."""

    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None


def extender_stanza(url: str, tls: ExtenderClientTls | None = None) -> dict[str, Any]:
    """One entry of ``extenders``: Lyra's extender at ``url``, over HTTPS when ``tls`` is given."""
    extender: dict[str, Any] = {
        "urlPrefix": url,
        "prioritizeVerb": "prioritize",
        "preemptVerb": "preempt",
        "weight": 1,
        "nodeCacheCapable": True,
        # Scoring only: Lyra's rules are in the taints and node affinity, so kube-scheduler places pods
        # correctly without the extender (docs/architecture.md, "Where a pod lands").
        "ignorable": True,
        "httpTimeout": EXTENDER_TIMEOUT,
        "managedResources": [{"name": GPU_RESOURCE, "ignoredByScheduler": False}],
    }
    if tls is not None:
        extender["enableHTTPS"] = True
        extender["tlsConfig"] = {"caFile": str(tls.ca_file)}
        if tls.cert_file is not None and tls.key_file is not None:
            extender["tlsConfig"] |= {"certFile": str(tls.cert_file), "keyFile": str(tls.key_file)}
    return extender
