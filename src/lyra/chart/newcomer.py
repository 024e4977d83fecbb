"""The newcomer's path of docs/operations.md shows the commands ``hack/newcomer.sh`` runs, and only those.

The script runs the path and checks it; its lines between ``# >>> docs step N`` and ``# <<<`` are what the doc shows
in the ``sh`` code block of its step ``N`` (the numbered list item ``N. ...`` of the section :data:`SECTION`). A step
may take several such regions of the script, joined in order; the script's other lines (settings, progress, checks,
cleanup) are its own. :func:`with_commands` writes them into the doc, and ``lyra chart generate --check`` (a unit
test) fails when the doc's blocks differ from the script's.
"""

from __future__ import annotations

import re

#: The heading of the doc's section that shows the script's commands.
SECTION = "## From a fresh clone to Lyra's metrics in a local Prometheus"
#: Where the doc's section says where its commands come from.
SOURCE_NOTE = (
    "<!-- The commands below are hack/newcomer.sh's: `lyra chart generate` (make chart) copies them here; edit them "
    "there. -->"
)

_REGION_BEGIN = re.compile(r"# >>> docs step (\d+)")
_REGION_END = "# <<<"
_HEADING = re.compile(r"#{1,6} ")
_LIST_ITEM = re.compile(r"(\d+)\. ")
_FENCE_OPEN = re.compile(r"(\s*)```sh")


def script_steps(script: str) -> dict[int, list[str]]:
    """The doc's commands in ``script``: step number -> its lines, the step's regions joined in order.

    Raises ``ValueError`` naming the line of a region left open, an end with no start, a start inside a region, or
    an empty region."""
    steps: dict[int, list[str]] = {}
    current: int | None = None
    opened_at = region_start = 0
    for number, line in enumerate(script.splitlines(), start=1):
        begin = _REGION_BEGIN.fullmatch(line)
        if begin is not None:
            if current is not None:
                raise ValueError(f"line {number}: a docs step starts inside the one started on line {opened_at}")
            current, opened_at = int(begin.group(1)), number
            steps.setdefault(current, [])
            region_start = len(steps[current])
        elif line == _REGION_END:
            if current is None:
                raise ValueError(f"line {number}: {_REGION_END!r} ends no docs step")
            if len(steps[current]) == region_start:
                raise ValueError(f"line {opened_at}: docs step {current} has no command")
            current = None
        elif current is not None:
            steps[current].append(line)
    if current is not None:
        raise ValueError(f"line {opened_at}: docs step {current} is not ended by {_REGION_END!r}")
    return steps


def with_commands(document: str, steps: dict[int, list[str]]) -> str:
    """``document`` (docs/operations.md) with the ``sh`` blocks of its section :data:`SECTION` replaced by the
    script's commands (``steps``, from :func:`script_steps`), each step's under its list item, indented as its fence.

    Raises ``ValueError`` when the section or its note is missing, a block is outside a numbered step or is its
    second, a fence is not closed, or a step has commands in one and a block in the other but not both."""
    lines = document.split("\n")
    try:
        start = lines.index(SECTION)
    except ValueError:
        raise ValueError(f"no section {SECTION!r}") from None
    end = next((i for i in range(start + 1, len(lines)) if _HEADING.match(lines[i])), len(lines))
    if SOURCE_NOTE not in lines[start:end]:
        raise ValueError(f"the section {SECTION!r} does not say where its commands come from: {SOURCE_NOTE!r}")
    out = lines[: start + 1]
    item: int | None = None
    shown: set[int] = set()
    i = start + 1
    while i < end:
        line = lines[i]
        out.append(line)
        numbered = _LIST_ITEM.match(line)
        if numbered is not None:
            item = int(numbered.group(1))
        fence = _FENCE_OPEN.fullmatch(line)
        if fence is None:
            i += 1
            continue
        where = f"{SECTION!r}, line {i + 1}"
        if item is None:
            raise ValueError(f"{where}: a sh block before the first numbered step")
        if item in shown:
            raise ValueError(f"{where}: step {item} has a second sh block; the script's commands fill one")
        if item not in steps:
            raise ValueError(
                f"{where}: step {item} has a sh block but hack/newcomer.sh has no '# >>> docs step {item}'"
            )
        indent = fence.group(1)
        closing = next((j for j in range(i + 1, end) if lines[j] == f"{indent}```"), None)
        if closing is None:
            raise ValueError(f"{where}: the sh block of step {item} is not closed")
        out += [f"{indent}{command}" if command else "" for command in steps[item]]
        out.append(lines[closing])
        shown.add(item)
        i = closing + 1
    missing = sorted(set(steps) - shown)
    if missing:
        raise ValueError(f"{SECTION!r}: no sh block for the commands of step(s) {missing} of hack/newcomer.sh")
    return "\n".join(out + lines[end:])
