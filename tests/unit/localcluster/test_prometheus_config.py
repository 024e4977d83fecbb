"""The local Prometheus' configuration (lyra.localcluster.prometheus): one scrape job per target group, every second,
with its labels; what it cannot scrape is refused with a message before Prometheus is started."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lyra.localcluster.prometheus import LocalPrometheus, scrape_configuration


def test_each_job_scrapes_its_instances_every_second_with_its_labels() -> None:
    config = scrape_configuration(
        {"lyra-operator": ["127.0.0.1:8080", "127.0.0.1:8081"], "lyra-extender": ["127.0.0.1:8888"]},
        {"lyra-operator": {"namespace": "lyra-system"}},
        scrape_configs=[{"job_name": "tls", "scheme": "https"}],
    )
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert config["scrape_configs"] == [
        {
            "job_name": "lyra-operator",
            "scrape_interval": "1s",
            "static_configs": [
                {"targets": ["127.0.0.1:8080", "127.0.0.1:8081"], "labels": {"namespace": "lyra-system"}}
            ],
        },
        {
            "job_name": "lyra-extender",
            "scrape_interval": "1s",
            "static_configs": [{"targets": ["127.0.0.1:8888"], "labels": {}}],
        },
        {"job_name": "tls", "scheme": "https"},
    ]
    assert scrape_configuration({"a": ["localhost:1"]}, interval_s=15)["global"]["scrape_interval"] == "15s"


@pytest.mark.parametrize(
    ("targets", "labels", "interval", "message"),
    [
        ({"a b": ["127.0.0.1:1"]}, None, 1, "scrape job name 'a b'"),
        ({"": ["127.0.0.1:1"]}, None, 1, "scrape job name ''"),
        ({"a": []}, None, 1, "scrape job a: no target"),
        ({"a": ["127.0.0.1"]}, None, 1, "target '127.0.0.1' is not host:port"),
        ({"a": ["127.0.0.1:0"]}, None, 1, "target '127.0.0.1:0' is not host:port"),
        ({"a": ["127.0.0.1:70000"]}, None, 1, "target '127.0.0.1:70000' is not host:port"),
        ({"a": ["http://127.0.0.1:80/metrics"]}, None, 1, "is not host:port"),
        ({"a": ["127.0.0.1:80"]}, {"b": {"namespace": "x"}}, 1, "labels for jobs that are not scraped: b"),
        ({"a": ["127.0.0.1:80"]}, None, 0, "the scrape interval must be 1 to 3600 seconds, got 0"),
    ],
)
def test_what_cannot_be_scraped_is_refused(
    targets: dict[str, list[str]], labels: dict[str, dict[str, str]] | None, interval: int, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scrape_configuration(targets, labels, interval_s=interval)


def test_its_files_and_command_line_are_in_its_directory_on_its_port(tmp_path: Path) -> None:
    prometheus = LocalPrometheus(
        tmp_path / "prometheus", {"lyra-operator": ["127.0.0.1:8080"]}, port=9191, log=tmp_path / "logs" / "p.log"
    )
    assert prometheus.url == "http://127.0.0.1:9191"
    assert yaml.safe_load(prometheus.config.read_text()) == scrape_configuration({"lyra-operator": ["127.0.0.1:8080"]})
    assert prometheus.argv(Path("/bin/prometheus")) == [
        "/bin/prometheus",
        f"--config.file={tmp_path / 'prometheus' / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'prometheus' / 'data'}",
        "--web.listen-address=127.0.0.1:9191",
    ]
    assert prometheus.log == tmp_path / "logs" / "p.log"
    prometheus.stop()  # never started: nothing to stop
