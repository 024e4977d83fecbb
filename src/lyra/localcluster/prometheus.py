"""A local Prometheus: Debian's ``prometheus`` (cached by ``make binaries``) on loopback, scraping the given targets
at ``/metrics`` every second from a configuration it is given in its own directory, with its data there too. The demo
runs one per day it plays (``lyra demo``); the tests run theirs through it (``tests/prometheus_support.py``).

It runs in its own session with its output in a log, dies with the thread that started it (``PR_SET_PDEATHSIG``), and
:meth:`LocalPrometheus.stop` ends it (SIGTERM, then SIGKILL) and reaps it, so nothing listens on its port afterwards.
"""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from lyra.localcluster.binaries import PROMETHEUS, BinaryCache
from lyra.localcluster.ports import LOOPBACK, allocate_ports
from lyra.localcluster.processes import ProcessRecord, ProcessStartError, launch, tail, terminate
from lyra.localcluster.waiting import WaitTimeoutError, wait_for

#: Seconds between scrapes: the demo's day and the tests' scenarios change within seconds.
SCRAPE_INTERVAL_S = 1
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 30.0
#: A job name as Prometheus accepts it in ``job_name`` (and as the ``job`` label shows it).
_JOB_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_TARGET = re.compile(r"[A-Za-z0-9.-]+:[0-9]{1,5}")


class PrometheusStartError(RuntimeError):
    """Prometheus did not start or did not become ready; the message says why, with its log's last lines."""


def scrape_configuration(
    targets: Mapping[str, Sequence[str]],
    labels: Mapping[str, Mapping[str, str]] | None = None,
    *,
    interval_s: int = SCRAPE_INTERVAL_S,
    scrape_configs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Prometheus' configuration: one scrape job per entry of ``targets`` (job name -> ``host:port`` of each instance,
    scraped at ``/metrics``), each series of a job carrying its ``labels`` (as Kubernetes' service discovery adds
    ``namespace``), every ``interval_s`` seconds; ``scrape_configs``: more jobs as Prometheus spells them."""
    if not 1 <= interval_s <= 3600:
        raise ValueError(f"the scrape interval must be 1 to 3600 seconds, got {interval_s}")
    for job, instances in targets.items():
        if not _JOB_NAME.fullmatch(job):
            raise ValueError(f"scrape job name {job[:60]!r}: letters, digits and _.:- only, at most 128")
        if not instances:
            raise ValueError(f"scrape job {job}: no target")
        for instance in instances:
            if not _TARGET.fullmatch(instance) or not 0 < int(instance.rsplit(":", 1)[1]) < 65_536:
                raise ValueError(f"scrape job {job}: target {instance[:80]!r} is not host:port")
    unknown = sorted(set(labels or {}) - set(targets))
    if unknown:
        raise ValueError(f"labels for jobs that are not scraped: {', '.join(unknown)}")
    every = f"{interval_s}s"
    return {
        "global": {"scrape_interval": every, "evaluation_interval": every},
        "scrape_configs": [
            {
                "job_name": job,
                "scrape_interval": every,
                "static_configs": [{"targets": list(instances), "labels": dict((labels or {}).get(job, {}))}],
            }
            for job, instances in targets.items()
        ]
        + [dict(extra) for extra in scrape_configs],
    }


def get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    """An HTTP GET: the status and the body (of an error answer too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class LocalPrometheus:
    """Prometheus on ``LOOPBACK:port`` (``port``: one the kernel hands out when not given), its configuration, data
    and log in ``directory`` (the log at ``log`` if given). ``command_prefix`` runs it through another program (the
    tests: ``nsenter --net=...`` into a network namespace). Use it as a context manager, or :meth:`start` and
    :meth:`stop`."""

    def __init__(
        self,
        directory: Path,
        targets: Mapping[str, Sequence[str]],
        labels: Mapping[str, Mapping[str, str]] | None = None,
        *,
        port: int | None = None,
        scrape_configs: Sequence[Mapping[str, Any]] = (),
        interval_s: int = SCRAPE_INTERVAL_S,
        log: Path | None = None,
        command_prefix: Sequence[str] = (),
    ) -> None:
        configuration = scrape_configuration(targets, labels, interval_s=interval_s, scrape_configs=scrape_configs)
        self.directory = directory
        self.port = port if port is not None else allocate_ports(1)[0]
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.log = log if log is not None else directory / "prometheus.log"
        self.command_prefix = tuple(command_prefix)
        directory.mkdir(parents=True, exist_ok=True)
        self.config = directory / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(configuration))
        self.process: subprocess.Popen[bytes] | None = None
        self.record: ProcessRecord | None = None

    def argv(self, binary: Path) -> list[str]:
        return [
            *self.command_prefix,
            str(binary),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
        ]

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start Prometheus and wait until it answers ``/-/ready``; stopped again if it does not."""
        binary = BinaryCache().tool(PROMETHEUS, "prometheus")
        try:
            self.process, self.record = launch("prometheus", self.argv(binary), self.log, die_with_parent=True)
        except ProcessStartError as error:
            raise PrometheusStartError(str(error)) from None
        try:
            wait_for(self.ready, timeout_s, f"Prometheus ready on {self.url}")
        except (WaitTimeoutError, PrometheusStartError) as error:
            self.stop()
            raise PrometheusStartError(f"{error}; {self.log}:\n{self.tail()}") from None
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop Prometheus (SIGTERM, SIGKILL after a grace period) and reap it; nothing if it is not running."""
        if self.record is not None:
            terminate(self.record, self.process, grace=STOP_GRACE_S)
        self.process = self.record = None

    def __enter__(self) -> LocalPrometheus:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def get(self, url: str, timeout: float = 5) -> tuple[int, bytes]:
        """``get`` from where Prometheus runs (the tests' namespaced Prometheus overrides it)."""
        return get(url, timeout)

    def ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise PrometheusStartError(f"Prometheus exited with {self.process.returncode}")
        try:
            return self.get(f"{self.url}/-/ready")[0] == 200
        except OSError:
            return False

    def tail(self, lines: int = 40) -> str:
        return tail(self.log, lines)
