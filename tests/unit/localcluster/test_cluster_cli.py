"""`lyra cluster` input handling: bad input exits 2 with a clear message, before anything starts."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from lyra.cli import main
from lyra.localcluster.binaries import BinaryCache
from lyra.localcluster.locations import cluster_state_dir
from tests.unit.cli.running import exit_code


def test_a_bad_profile_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "gpus.yaml"
    profile.write_text("nodeGroups:\n  - {name: big, pool: training, count: 2, gpu: {product: Tesla-T4, count: -1}}\n")

    code = main(["cluster", "up", "--state-dir", str(tmp_path / "state"), "--profile", str(profile)])

    assert code == 2
    said = f"lyra cluster: bad cluster profile: {profile}: nodeGroups[0].gpu.count: expected an integer >= 1, got -1"
    assert said in capsys.readouterr().err
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


@pytest.mark.parametrize("name", ["", ".", "..", "../../etc", "a/b", "-x", "x" * 64, "a b"])
@pytest.mark.parametrize("action", ["up", "down", "status", "kubectl"])
def test_a_name_that_is_not_one_path_segment_is_refused_before_anything(
    name: str, action: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`down` removes the state directory `cluster/<name>`: an empty name there named every cluster's directory (and
    `--name "$UNSET"` is an easy slip), `..` one outside them."""
    monkeypatch.setenv("LYRA_STATE_DIR", str(tmp_path))
    (tmp_path / "cluster" / "kept").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_:
        main(["cluster", action, f"--name={name}"])
    assert exit_.value.code == 2
    assert "argument --name: expected 1 to 63 letters, digits" in capsys.readouterr().err
    assert (tmp_path / "cluster" / "kept").is_dir()
    with pytest.raises(ValueError, match="cluster name: expected"):
        cluster_state_dir(name)


@pytest.mark.parametrize("name", ["default", "blue", "lab-2", "a.b_c", "x" * 63, "7"])
def test_names_of_one_segment_are_taken(name: str, tmp_path: Path) -> None:
    assert cluster_state_dir(name, {"LYRA_STATE_DIR": str(tmp_path)}) == tmp_path / "cluster" / name


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--timeout", "nan"], "argument --timeout: expected seconds between 0 and 86400, got nan"),
        (["--timeout", "inf"], "argument --timeout: expected seconds between 0 and 86400, got inf"),
        (["--crd-dir", "{file}"], "lyra cluster: --crd-dir {file}: not a directory"),
    ],
)
def test_a_timeout_or_a_crd_dir_that_cannot_be_is_refused_before_anything(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "crds.yaml"
    file.write_text("kind: CustomResourceDefinition\n")
    argv = [arg.format(file=file) for arg in argv]
    said = said.format(file=file)
    assert exit_code(["cluster", "up", "--state-dir", str(tmp_path / "state"), "--no-extender", *argv]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("explicit", "said"),
    [
        (True, "lyra cluster: --state-dir /proc/lyra-test/state is not writable: /proc takes no new directory"),
        (False, "lyra cluster: the state directory /proc/lyra-test/cluster/default is not writable: /proc takes no"),
    ],
)
def test_a_state_dir_that_cannot_be_made_is_refused_before_anything_starts(
    explicit: bool, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state, logs and certificates go there: it once failed after the binaries, pointing at logs it never
    wrote. /proc takes no directory, even from root, whom permission bits let write anywhere."""
    from lyra.localcluster.binaries import BinaryCache

    def not_reached(*_: object, **__: object) -> None:
        raise AssertionError("the binaries were fetched for a cluster that cannot start")

    monkeypatch.setattr(BinaryCache, "ensure", not_reached)
    monkeypatch.setenv("LYRA_STATE_DIR", "/proc/lyra-test")
    argv = ["--state-dir", "/proc/lyra-test/state"] if explicit else []
    assert exit_code(["cluster", "up", "--no-extender", *argv]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("command", [["binaries"], ["up", "--no-extender"]], ids=["binaries", "up"])
def test_fetching_the_binaries_stopped_from_outside_unwinds_as_ctrl_c(
    command: list[str], signum: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`timeout` while a binary is built: the build's ``finally`` blocks (which stop its compiler, in a session of
    its own, and remove what was half-built) must run, as on Ctrl-C; SIGTERM used to end Python at once, and the
    compiler kept running."""
    unwound: list[str] = []

    def building(_cache: BinaryCache, *_args: object, **_options: object) -> object:
        try:
            os.kill(os.getpid(), signum)  # Python runs the handler before os.kill returns
            unwound.append("not stopped")
        finally:
            unwound.append("the build's finally")
        return None

    monkeypatch.setattr(BinaryCache, "ensure", building)
    monkeypatch.setenv("LYRA_STATE_DIR", str(tmp_path))
    handlers = {each: signal.getsignal(each) for each in (signal.SIGTERM, signal.SIGHUP)}
    assert exit_code(["cluster", *command]) == 128 + signum
    assert unwound == ["the build's finally"]
    name = signal.Signals(signum).name
    assert f"lyra cluster: interrupted ({name}) while fetching the binaries; nothing half-built is kept" in (
        capsys.readouterr().err
    )
    assert {each: signal.getsignal(each) for each in handlers} == handlers  # put back as they were
