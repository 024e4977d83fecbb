"""The admin's YAML files are read safely, a key written twice is refused, and every fault is one line with where."""

from __future__ import annotations

import pytest

from lyra.yaml_files import YamlError, load_yaml


def test_a_document_is_read() -> None:
    assert load_yaml("a: 1\nb: [x, y]\n") == {"a": 1, "b": ["x", "y"]}
    assert load_yaml(b"a: 1\n") == {"a": 1}
    assert load_yaml("") is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("training:\n  servers: 3\n  servers: 65\n", "not valid YAML: line 3, column 3: 'servers' is written twice"),
        ("a: 1\na: 1\n", "not valid YAML: line 2, column 1: 'a' is written twice; write each key once"),
        ("a: [\n", "not valid YAML: line 2, column 1: expected the node content, but found '<stream end>'"),
        ("a: b: c\n", "not valid YAML: line 1, column 5: mapping values are not allowed here"),
        (
            '!!python/object/apply:os.system ["true"]\n',
            "not valid YAML: line 1, column 1: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object/apply:os.system'",
        ),
        ("[" * 100_000, "not valid YAML: nested too deeply"),
    ],
)
def test_a_fault_is_one_line_saying_where(text: str, said: str) -> None:
    with pytest.raises(YamlError) as raised:
        load_yaml(text)
    assert str(raised.value).startswith(said)
    assert "\n" not in str(raised.value)


def test_the_same_key_in_two_mappings_is_not_a_repeat() -> None:
    assert load_yaml("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}
