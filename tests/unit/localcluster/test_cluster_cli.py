"""`lyra cluster` input handling: bad input exits 2 with a clear message, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lyra.cli import main


def test_a_bad_profile_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "gpus.yaml"
    profile.write_text("nodeGroups:\n  - {name: big, pool: training, count: 2, gpu: {product: Tesla-T4, count: -1}}\n")

    code = main(["cluster", "up", "--state-dir", str(tmp_path / "state"), "--profile", str(profile)])

    assert code == 2
    assert f"error: bad cluster profile: {profile}: nodeGroups[0].gpu.count: expected an integer >= 1, got -1" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://127.0.0.1:8888", "expected an http:// or https:// URL"),
        ("http://10.0.0.7:8888", "must listen on a loopback address"),
        ("http://extender.example.org", "must listen on a loopback address"),
    ],
)
def test_an_extender_off_this_host_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, problem: str
) -> None:
    code = main(["cluster", "up", "--state-dir", str(tmp_path), "--extender-url", url])

    assert code == 2
    assert problem in capsys.readouterr().err


def test_extender_url_and_no_extender_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["cluster", "up", "--no-extender", "--extender-url", "http://127.0.0.1:9999"])

    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_state_dir_that_is_not_ours_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("keep me")

    assert main(["cluster", "up", "--state-dir", str(tmp_path), "--no-extender"]) == 2
    assert "not a Lyra cluster state directory" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").exists()


def test_status_and_down_without_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = tmp_path / "nothing"

    assert main(["cluster", "status", "--state-dir", str(state_dir)]) == 1
    assert main(["cluster", "down", "--state-dir", str(state_dir)]) == 0
    out = capsys.readouterr().out
    assert out.count(f"no local cluster 'default' (nothing in {state_dir})") == 2


def test_the_default_state_dir_follows_lyra_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LYRA_STATE_DIR", str(tmp_path))

    assert main(["cluster", "status", "--name", "blue"]) == 1
    assert str(tmp_path / "cluster" / "blue") in capsys.readouterr().out


def test_kubectl_without_a_running_cluster_says_how_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["cluster", "kubectl", "--state-dir", str(tmp_path / "none"), "--", "get", "nodes"])
    err = capsys.readouterr().err
    assert code == 1
    assert "lyra cluster up" in err or "make binaries" in err
