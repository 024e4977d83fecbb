"""docs/operations.md's newcomer path shows hack/newcomer.sh's commands (:mod:`lyra.chart.newcomer`): a block edited
by hand, or a script edited without the doc, is drift that ``lyra chart generate --check`` names; a script and a doc
that do not fit each other are refused with the step at fault. The script itself is bash that stops at the first
error, cleans up after itself, waits only with deadlines and listens by default where the commands do."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lyra.chart import values
from lyra.chart.newcomer import SECTION, SOURCE_NOTE, script_steps, with_commands
from lyra.cli import main
from lyra.settings import ExtenderSettings

REPOSITORY = Path(__file__).resolve().parents[3]
SCRIPT = REPOSITORY / "hack" / "newcomer.sh"
DOCS = REPOSITORY / "docs" / "operations.md"


def generate(tmp_path: Path, docs: Path, script: Path, *check: str) -> int:
    chart = tmp_path / "lyra"
    if not chart.exists():
        shutil.copytree(REPOSITORY / "helm" / "lyra", chart)
        shutil.copytree(REPOSITORY / "dashboards", tmp_path / "dashboards")
    where = ["--chart-dir", str(chart), "--docs", str(docs), "--dashboards-dir", str(tmp_path / "dashboards")]
    return main(["chart", "generate", *check, *where, "--newcomer-script", str(script)])


def copies(tmp_path: Path) -> tuple[Path, Path]:
    docs, script = tmp_path / "operations.md", tmp_path / "newcomer.sh"
    docs.write_text(DOCS.read_text())
    script.write_text(SCRIPT.read_text())
    return docs, script


def test_every_step_with_commands_shows_them_in_the_docs() -> None:
    steps = script_steps(SCRIPT.read_text())
    assert sorted(steps) == list(range(1, 8))
    section = DOCS.read_text().split(SECTION, 1)[1]
    for number, commands in steps.items():
        item = re.search(rf"^{number}\. .*?```sh\n(.*?)\n   ```", section, re.DOTALL | re.MULTILINE)
        assert item is not None, number
        assert [line.removeprefix("   ") for line in item.group(1).split("\n")] == commands, number


def test_a_command_edited_in_the_docs_is_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs, script = copies(tmp_path)
    docs.write_text(docs.read_text().replace("   kubectl scale inferenceservice chat --replicas=32\n", "", 1))
    assert generate(tmp_path, docs, script, "--check") == 1
    assert str(docs) in capsys.readouterr().err
    assert generate(tmp_path, docs, script) == 0
    assert docs.read_text() == DOCS.read_text()


def test_a_command_edited_in_the_script_is_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs, script = copies(tmp_path)
    script.write_text(script.read_text().replace("--lend-delay 10", "--lend-delay 20", 1))
    assert generate(tmp_path, docs, script, "--check") == 1
    assert str(docs) in capsys.readouterr().err
    assert generate(tmp_path, docs, script) == 0
    assert "--lend-delay 20" in docs.read_text()


def test_the_scripts_own_lines_are_not_shown() -> None:
    shown = "\n".join(line for commands in script_steps(SCRIPT.read_text()).values() for line in commands)
    for own in ("trap cleanup EXIT", "LYRA_REVISION", "expect ", "step 1 "):
        assert own in SCRIPT.read_text()
        assert own not in shown, own


DOC = f"""# Operations

{SECTION}

{SOURCE_NOTE}

1. **One**:

   ```sh
   old
   ```

2. **Two**, no commands.

## Next

```sh
not ours
```
"""


def test_a_step_takes_its_regions_joined_indented_as_its_fence() -> None:
    script = "# >>> docs step 1\na\n# <<<\nown\n# >>> docs step 1\n\nb  # c\n# <<<\n"
    assert script_steps(script) == {1: ["a", "", "b  # c"]}
    document = with_commands(DOC, script_steps(script))
    assert "   ```sh\n   a\n\n   b  # c\n   ```\n" in document
    assert document.replace("   a\n\n   b  # c\n", "   old\n") == DOC


BAD_SCRIPTS = [
    ("# >>> docs step 1\na\n", "line 1: docs step 1 is not ended by '# <<<'"),
    ("a\n# <<<\n", "line 2: '# <<<' ends no docs step"),
    ("# >>> docs step 1\n# >>> docs step 2\n# <<<\n", "line 2: a docs step starts inside the one started on line 1"),
    ("# >>> docs step 1\n# <<<\n", "line 1: docs step 1 has no command"),
]


@pytest.mark.parametrize(("script", "message"), BAD_SCRIPTS)
def test_a_malformed_script_is_refused_naming_the_line(script: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        script_steps(script)


MISFITS = [
    ("# >>> docs step 2\na\n# <<<\n", DOC, "step 1 has a sh block but hack/newcomer.sh has no '# >>> docs step 1'"),
    ("# >>> docs step 1\na\n# <<<\n# >>> docs step 3\nb\n# <<<\n", DOC, "no sh block for the commands of step(s) [3]"),
    ("# >>> docs step 1\na\n# <<<\n", DOC.replace(SOURCE_NOTE, ""), "does not say where its commands come from"),
    ("# >>> docs step 1\na\n# <<<\n", DOC.replace(SECTION, "## Elsewhere"), "no section"),
    ("# >>> docs step 1\na\n# <<<\n", DOC.replace("   ```\n\n2.", "\n2."), "the sh block of step 1 is not closed"),
    ("# >>> docs step 1\na\n# <<<\n", DOC.replace("1. **One**:", "**One**:"), "a sh block before the first"),
    ("# >>> docs step 1\na\n# <<<\n", DOC.replace("   ```\n\n2.", "   ```\n   ```sh\n   ```\n\n2."), "second sh block"),
]


@pytest.mark.parametrize(("script", "document", "message"), MISFITS)
def test_a_script_and_a_doc_that_do_not_fit_are_refused_naming_the_step(
    script: str, document: str, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        with_commands(document, script_steps(script))


def test_generate_refuses_a_malformed_script_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs, script = copies(tmp_path)
    script.write_text(script.read_text().replace("# <<<\n", "", 1))
    assert generate(tmp_path, docs, script, "--check") == 2
    error = capsys.readouterr().err
    assert f"{script}: line " in error
    assert "a docs step starts inside the one started on line" in error


def test_the_script_is_bash_that_stops_at_the_first_error_and_cleans_up() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "\nset -euo pipefail\n" in text
    assert "\ntrap cleanup EXIT\n" in text


def test_the_script_sleeps_only_in_loops_with_a_deadline() -> None:
    text = SCRIPT.read_text()
    functions = dict(re.findall(r"^(\w+)\(\) \{.*?\n(.*?)^\}$", text, re.DOTALL | re.MULTILINE))
    sleeping = {name for name, body in functions.items() if re.search(r"\bsleep\b", body)}
    assert sleeping == {"wait_for", "stop"}
    for name in sleeping:
        assert re.search(r"SECONDS >= deadline", functions[name]), name
    outside = re.sub(r"^\w+\(\) \{.*?^\}$", "", text, flags=re.DOTALL | re.MULTILINE)
    assert not re.search(r"^\s*sleep\b", outside, re.MULTILINE)


def test_the_scripts_default_ports_are_the_commands_defaults() -> None:
    text = SCRIPT.read_text()
    assert f"OPERATOR_PORT=${{OPERATOR_PORT:-{values.defaults()['operator']['httpPort']}}}" in text
    assert f"EXTENDER_PORT=${{EXTENDER_PORT:-{ExtenderSettings().port}}}" in text
