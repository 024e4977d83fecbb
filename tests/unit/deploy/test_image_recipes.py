"""The two recipes of Lyra's image give the same content: the Dockerfile (for Docker or another builder) and
``lyra image build`` (lyra.imagespec.recipe, no container engine). Both: Debian bookworm, Debian's Python 3.11 at the
same pinned version, uv.lock installed with ``uv sync --locked`` without dev groups and without the plotting extra,
into /opt/lyra, run as the chart's non-root user with the ``lyra`` entrypoint."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

from lyra.chart.values import NON_ROOT_UID
from lyra.imagespec import recipe

REPOSITORY = Path(__file__).resolve().parents[3]
DOCKERFILE = REPOSITORY / "Dockerfile"
DOCKERIGNORE = REPOSITORY / ".dockerignore"
HELPERS = REPOSITORY / "helm" / "lyra" / "templates" / "_helpers.tpl"
#: Debian's release numbers and names (what a debian:<N>-slim tag means).
DEBIAN_RELEASES = {"12": "bookworm", "13": "trixie"}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each Dockerfile line, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    split: list[list[tuple[str, str]]] = []
    for step in instructions(DOCKERFILE):
        if step[0] == "FROM":
            split.append([])
        split[-1].append(step)
    return split


def env_of(steps: list[tuple[str, str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for word, args in steps:
        if word == "ENV":
            found.update(dict(item.split("=", 1) for item in shlex.split(args)))
    return found


def apt_installs(steps: list[tuple[str, str]]) -> list[str]:
    packages = []
    for word, args in steps:
        if word == "RUN" and "apt-get install" in args:
            command = args.split("apt-get install", 1)[1].split("&&")[0]
            packages += [word for word in shlex.split(command) if not word.startswith("-")]
    return packages


def test_both_recipes_start_from_debian_bookworm() -> None:
    assert (recipe.SUITE, recipe.VARIANT) == ("bookworm", "minbase")
    # with its updates and security updates, as the Docker base (Debian's image) has them
    suites = {line.split()[2] for line in recipe.SOURCES}
    assert suites == {"bookworm", "bookworm-updates", "bookworm-security"}
    for stage in stages():
        base = stage[0][1].split()[0]
        match = re.fullmatch(r"debian:(?:(\d+)(?:\.\d+)?|(\w+)-\d{8})-slim(@sha256:[0-9a-f]{64})?", base)
        assert match, f"{base}: want a pinned debian:<version>-slim (Debian's slim is minbase without docs)"
        assert (DEBIAN_RELEASES.get(match.group(1) or "") or match.group(2)) == recipe.SUITE, base


def test_both_recipes_take_debians_python_311_at_the_same_version() -> None:
    assert recipe.PYTHON_PACKAGE.startswith("python3=3.11.")
    assert recipe.PYTHON == "/usr/bin/python3.11"
    build, runtime = stages()[0], stages()[-1]
    assert apt_installs(build) == apt_installs(runtime) == [recipe.PYTHON_PACKAGE]
    assert env_of(build)["UV_PYTHON"] == recipe.PYTHON
    requires = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"


def test_both_recipes_install_the_lock_without_dev_groups_or_the_plotting_extra() -> None:
    build = stages()[0]
    assert {k: v for k, v in env_of(build).items() if k.startswith("UV_")} == recipe.UV_ENV
    syncs = [shlex.split(args) for word, args in build if word == "RUN" and "uv sync" in args]
    assert syncs
    for sync in syncs:
        assert sync[: len(recipe.UV_SYNC)] == list(recipe.UV_SYNC), sync
        for flag in ("--extra", "--all-extras", "--group", "--all-groups", "--dev", "--frozen"):
            assert flag not in sync
        assert set(sync[len(recipe.UV_SYNC) :]) <= {"--no-install-project"}, sync
    assert "--no-install-project" not in syncs[-1]  # the last sync installs Lyra itself
    copied = [shlex.split(args) for word, args in build if word == "COPY" and "--from=" not in args]
    sources = {name for words in copied for name in words[:-1]}
    assert sources == set(recipe.PROJECT_FILES)
    allowed = {line.removeprefix("!").rstrip("/") for line in DOCKERIGNORE.read_text().splitlines() if line[:1] == "!"}
    assert allowed == set(recipe.PROJECT_FILES)


def test_the_plotting_library_is_an_extra_not_a_runtime_dependency() -> None:
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("matplotlib")]
    assert [d for d in project["optional-dependencies"]["report"] if d.startswith("matplotlib")]


def test_both_recipes_run_lyra_as_the_charts_non_root_user() -> None:
    runtime = stages()[-1]
    [user] = [args for word, args in runtime if word == "USER"]
    assert user == recipe.USER
    assert recipe.USER.split(":")[0] == str(NON_ROOT_UID) != "0"
    assert f"runAsUser: {NON_ROOT_UID}" in HELPERS.read_text()
    [entrypoint] = [args for word, args in runtime if word == "ENTRYPOINT"]
    [cmd] = [args for word, args in runtime if word == "CMD"]
    assert json.loads(entrypoint) == list(recipe.ENTRYPOINT)
    assert json.loads(cmd) == list(recipe.CMD)
    assert env_of(runtime) == recipe.LYRA_ENV
    [copied] = [args for word, args in runtime if word == "COPY"]
    assert copied.split() == ["--from=build", recipe.VENV, recipe.VENV]
    [exposed] = [args for word, args in runtime if word == "EXPOSE"]
    assert [f"{port}/tcp" for port in exposed.split()] == list(recipe.PORTS)


def test_the_dockerfiles_uv_is_pinned_to_the_one_ci_installs() -> None:
    [image] = [
        args.split()[0].removeprefix("--from=")
        for word, args in instructions(DOCKERFILE)
        if word == "COPY" and "astral-sh/uv" in args
    ]
    match = re.fullmatch(r"ghcr\.io/astral-sh/uv:(\d+\.\d+\.\d+)", image)
    assert match, image
    assert f'"uv=={match.group(1)}"' in (REPOSITORY / ".ci" / "run").read_text()
