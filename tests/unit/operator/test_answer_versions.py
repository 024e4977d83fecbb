"""The resourceVersion the commit step files for each write (:func:`lyra.operator.commit._version_in`) is the one the
answer's JSON says, whatever the answer: read off the front of kube-apiserver's metadata-alone answer, and otherwise
parsed. The oracle is the standard library's ``json``."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from lyra.operator.commit import _VERSION_UP_FRONT, _version_in
from lyra.operator.writes import Answer

#: kube-apiserver's answer to a pod's creation asked as the object's metadata alone, as the local control plane sent
#: it (tests/integration/test_write_answers.py checks the real one has this front), shortened.
SERVER_ANSWER = (
    b'{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"meta-w0","namespace":"ml",'
    b'"uid":"0b5e7a2c-8f1d-4c44-9d0e-6c1f5e2a9b11","resourceVersion":"48213","creationTimestamp":"2026-11-28T23:10:'
    b'04Z","labels":{"resourceVersion":"1"},"managedFields":[{"manager":"lyra-operator","operation":"Update"}]}}'
)


def oracle(data: bytes) -> str:
    try:
        body = json.loads(data)
    except ValueError:
        return ""
    meta = body.get("metadata") if isinstance(body, dict) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def test_the_servers_answer_is_read_off_its_front() -> None:
    assert _VERSION_UP_FRONT.match(SERVER_ANSWER) is not None
    assert _version_in(Answer(201, "Created", SERVER_ANSWER)) == "48213" == oracle(SERVER_ANSWER)


def test_what_is_not_an_answer_with_a_version_gives_none() -> None:
    for data in (b"", b"not json", b"[]", b'{"metadata":[]}', b'{"metadata":{}}', b'{"kind":"Status"}'):
        assert _version_in(Answer(200, "OK", data)) == "" == oracle(data)
    assert _version_in(object()) == ""


names = st.text(st.characters(codec="utf-8"), max_size=12)
versions = st.one_of(st.integers(0, 10**12).map(str), names)
keys = ("name", "generateName", "namespace", "selfLink", "uid", "labels", "annotations", "creationTimestamp")


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """A metadata object with some of the fields before and after the version, in any order, keyed maps that may
    hold a ``resourceVersion`` of their own, as the metadata alone or the object whole, compact or spaced."""
    meta: dict[str, object] = {}
    for key in draw(st.lists(st.sampled_from(keys), unique=True)):
        maps = st.dictionaries(st.sampled_from(["resourceVersion", "app", "a/b"]), names, max_size=2)
        meta[key] = draw(maps if key in {"labels", "annotations"} else names)
    if draw(st.booleans()):
        meta["resourceVersion"] = draw(versions)
    ordered = list(meta.items())
    random.Random(draw(st.integers(0, 2**16))).shuffle(ordered)
    head = (
        {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}
        if draw(st.booleans())
        else {"apiVersion": "v1", "kind": "Pod"}
    )
    body = {**head, "metadata": dict(ordered)}
    compact = draw(st.booleans())
    text = json.dumps(body, separators=(",", ":") if compact else None, ensure_ascii=draw(st.booleans()))
    return text.encode()


@settings(max_examples=400, deadline=None)
@given(answers())
def test_the_version_is_the_one_the_answers_json_says(data: bytes) -> None:
    assert _version_in(Answer(200, "OK", data)) == oracle(data)
