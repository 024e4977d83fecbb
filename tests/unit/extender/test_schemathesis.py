"""Schemathesis against the extender's own OpenAPI document: bodies generated from the wire models (valid ones and,
with negative generation, invalid ones) never get a 5xx."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from lyra.api.objects import Node, Pod
from lyra.extender.app import FixedView, create_app
from lyra.extender.view import build_view

from .test_app import NODES, RUNNING

APP = create_app(
    FixedView(build_view([Node.model_validate(n) for n in NODES], [Pod.model_validate(p) for p in RUNNING]))
)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(modes=list(schemathesis.GenerationMode), deterministic=True)


@schema.parametrize()
@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_body_gets_a_server_error(case: Any) -> None:
    response = case.call()
    assert response.status_code < 500, response.text
