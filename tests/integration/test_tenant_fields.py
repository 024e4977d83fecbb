"""The real API server refuses every pod template field Lyra owns (the CRDs' CEL rules, lyra.api.tenancy), naming the
field, in both kinds; and accepts what stays the tenant's. The same cases as the unit tests (which run the rules in
Python): this proves the CEL says the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names, tenancy
from tests.unit.operator.test_tenant_fields import ALLOWED, REFUSED, spec_with

pytestmark = pytest.mark.integration

KINDS = {
    names.TRAINING_JOB_KIND: (
        names.TRAINING_JOB_PLURAL,
        {"minWorkers": 1, "maxWorkers": 2, "gpusPerWorker": 1, "expectedDuration": 600},
    ),
    names.INFERENCE_SERVICE_KIND: (
        names.INFERENCE_SERVICE_PLURAL,
        {"replicas": 1, "gpusPerReplica": 1, "minReplicas": 0, "maxReplicas": 2},
    ),
}


def _create(api: client.ApiClient, namespace: str, kind: str, name: str, pod_spec: dict[str, Any]) -> None:
    plural, spec = KINDS[kind]
    body = {
        "apiVersion": names.API_VERSION,
        "kind": kind,
        "metadata": {"name": name},
        "spec": {**spec, "template": {"spec": pod_spec}},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, body)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_api_server_refuses_each_lyra_field_naming_it(
    kind: str, kube_api: client.ApiClient, namespace: str
) -> None:
    messages: dict[str, list[str]] = {}
    for rule in tenancy.RULES:
        messages.setdefault(rule.field, []).append(rule.message)
    wrong = []
    for case, setting, field in REFUSED:
        try:
            _create(kube_api, namespace, kind, f"refused-{case}", spec_with(setting))
        except ApiException as error:
            message = json.loads(error.body)["message"]
            named = f"spec.template.spec.{field}: Forbidden: "
            if error.status != 422 or named not in message or not any(m in message for m in messages[field]):
                wrong.append(f"{case}: {error.status} {message}")
        else:
            wrong.append(f"{case}: accepted")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_api_server_accepts_what_stays_the_tenants(kind: str, kube_api: client.ApiClient, namespace: str) -> None:
    for case, setting in ALLOWED:
        _create(kube_api, namespace, kind, f"allowed-{case}", spec_with(setting))
