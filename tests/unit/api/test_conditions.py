"""The condition types and reasons: each a Kubernetes-style word, none spelled twice by mistake."""

from __future__ import annotations

import re

from lyra.api import conditions

SPELLINGS = {name: value for name, value in vars(conditions).items() if name.isupper() and isinstance(value, str)}


def test_each_is_an_upper_camel_case_word() -> None:
    # metav1.Condition's reason must match this (and the type is a CamelCase word by convention).
    assert all(re.fullmatch(r"[A-Z]([A-Za-z0-9_,]*[A-Za-z0-9])?", v) for v in SPELLINGS.values()), SPELLINGS


def test_one_name_per_spelling_but_for_a_condition_type_reused_as_its_reason() -> None:
    by_value: dict[str, list[str]] = {}
    for name, value in SPELLINGS.items():
        by_value.setdefault(value, []).append(name)
    shared = {value: sorted(names) for value, names in by_value.items() if len(names) > 1}
    assert shared == {"Applied": ["APPLIED", "WRITES_APPLIED"]}
