"""The README is a newcomer's index: it links every document under docs/."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[3]


def test_the_readme_links_every_document() -> None:
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", readme))
    documents = {path.relative_to(REPOSITORY).as_posix() for path in (REPOSITORY / "docs").glob("*.md")}
    assert documents - linked == set(), "documents the README does not link"
    assert linked - documents == set(), "README links to documents that do not exist"
