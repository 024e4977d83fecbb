"""A real Prometheus for tests: :class:`lyra.localcluster.prometheus.LocalPrometheus` (Debian's ``prometheus``,
cached by ``make binaries``, on loopback on a free port, scraping the given targets every second), queried through its
HTTP API with assertions, and optionally run inside a network namespace."""

from __future__ import annotations

import concurrent.futures
import ctypes
import json
import os
import subprocess
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lyra.localcluster.binaries import PROMETHEUS, BinaryCache
from lyra.localcluster.prometheus import LocalPrometheus, get

__all__ = ["Prometheus", "check_metrics", "get", "promtool"]


def promtool() -> Path:
    return BinaryCache().tool(PROMETHEUS, "promtool")


def check_metrics(exposition: bytes) -> str:
    """``promtool check metrics`` on an exposition; returns its complaints ("" when there are none)."""
    result = subprocess.run(
        [str(promtool()), "check", "metrics"], input=exposition, capture_output=True, timeout=60, check=False
    )
    return (result.stdout + result.stderr).decode().strip() if result.returncode else ""


class _InNamespace:
    """One thread that entered a network namespace: what it opens (sockets) lives there."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, initializer=self._enter)

    def _enter(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        descriptor = os.open(self.namespace, os.O_RDONLY)
        try:
            if libc.setns(descriptor, 0x40000000) != 0:  # CLONE_NEWNET
                raise OSError(ctypes.get_errno(), f"setns {self.namespace}")
        finally:
            os.close(descriptor)


class Prometheus(LocalPrometheus):
    """``targets``: job name -> the ``host:port`` of each instance, scraped at ``/metrics``; ``labels``: job name ->
    labels added to each of its series (as Kubernetes' service discovery adds ``namespace``); ``scrape_configs``:
    more jobs as Prometheus spells them (TLS, authorization). ``network_namespace`` (a ``/proc/<pid>/ns/net``): run
    Prometheus there (``nsenter``), on that namespace's loopback, and query it from a thread inside it."""

    def __init__(
        self,
        directory: Path,
        targets: Mapping[str, Sequence[str]],
        labels: Mapping[str, Mapping[str, str]] | None = None,
        *,
        scrape_configs: Sequence[Mapping[str, Any]] = (),
        network_namespace: str | None = None,
    ) -> None:
        prefix = ("nsenter", f"--net={network_namespace}", "--") if network_namespace else ()
        super().__init__(directory, targets, labels, scrape_configs=scrape_configs, command_prefix=prefix)
        self.network_namespace = network_namespace
        self._inside = _InNamespace(network_namespace) if network_namespace is not None else None

    def __enter__(self) -> Prometheus:
        try:
            self.start()
        except BaseException:
            self._leave()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.stop()
        finally:
            self._leave()

    def _leave(self) -> None:
        if self._inside is not None:
            self._inside.thread.shutdown(wait=True)

    def get(self, url: str, timeout: float = 5) -> tuple[int, bytes]:
        """``get`` from where Prometheus runs."""
        if self._inside is None:
            return get(url, timeout)
        return self._inside.thread.submit(get, url, timeout).result()

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector ``expression`` evaluates to now (``/api/v1/query``)."""
        status, body = self.get(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expression})}")
        answer = json.loads(body)
        assert status == 200, f"{expression}: {answer}"
        assert answer["status"] == "success", f"{expression}: {answer}"
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def query_range(self, expression: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """The range vector ``expression`` evaluates to from ``start`` to ``end`` (``/api/v1/query_range``)."""
        parameters = {"query": expression, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        status, body = self.get(f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(parameters)}")
        answer = json.loads(body)
        assert status == 200, f"{expression}: {answer}"
        assert answer["status"] == "success", f"{expression}: {answer}"
        assert answer["data"]["resultType"] == "matrix", f"{expression}: {answer}"
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, expression: str) -> float | None:
        """The value of a query that yields at most one series (``None``: no series)."""
        result = self.query(expression)
        assert len(result) <= 1, f"{expression} yields {len(result)} series"
        return float(result[0]["value"][1]) if result else None
