"""The YAML files an admin writes for Lyra (a simulator scenario, a cluster profile, a GPU catalogue), read one way:
YAML's safe loader (no tag builds an object), a key written twice in one mapping refused (YAML would keep the last
silently: ``servers: 3`` above ``servers: 65`` would be lost without a word, as kubectl refuses it), and any fault
said in one line with where it is (``line 4, column 3: 'servers' is written twice``) instead of PyYAML's three lines
with a caret.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml

#: How much of a key, and of a parser's message, an error quotes.
_KEY_QUOTED = 80
_MESSAGE_QUOTED = 200


class YamlError(ValueError):
    """Not YAML, or YAML a person would not mean: the message says where and why, in one line."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"{_short(str(key), _KEY_QUOTED)!r} is written twice; write each key once",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str | bytes) -> Any:
    """The document in ``text``; :class:`YamlError` when it is not YAML or writes a key twice."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a safe loader (yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        said = error.problem or error.context or "cannot parse it"
        raise YamlError(f"not valid YAML: {where}{_short(said, _MESSAGE_QUOTED)}") from None
    except yaml.YAMLError as error:
        lines = str(error).strip().splitlines()
        raise YamlError(
            f"not valid YAML: {_short(lines[0], _MESSAGE_QUOTED) if lines else 'cannot parse it'}"
        ) from None
    except RecursionError:
        raise YamlError("not valid YAML: nested too deeply") from None


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
