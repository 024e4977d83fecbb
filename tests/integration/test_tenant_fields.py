"""The real API server refuses every pod template field Lyra owns (the CRDs' CEL rules, lyra.api.tenancy), naming the
field, in both kinds; and accepts what stays the tenant's. The same cases as the unit tests (which run the rules in
Python): this proves the CEL says the same. And the admin's bound on a TrainingJob's spec.priority that
docs/security.md shows (a ValidatingAdmissionPolicy, docs/examples) works as written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names, tenancy
from lyra.localcluster.waiting import wait_for
from tests.unit.operator.test_tenant_fields import ALLOWED, REFUSED, spec_with

pytestmark = pytest.mark.integration

POLICY = Path(__file__).resolve().parents[2] / "docs" / "examples" / "trainingjob-priority-policy.yaml"

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


def test_an_admins_admission_policy_bounds_a_jobs_priority(kube_api: client.ApiClient, namespace: str) -> None:
    """docs/examples/trainingjob-priority-policy.yaml, bound to this test's namespace only: a TrainingJob above
    priority 0 is refused on create and on edit, one at 0 is accepted, and the operator's status writes are not
    matched (Lyra itself has no setting that bounds spec.priority)."""
    policy, binding = yaml.safe_load_all(POLICY.read_text())
    binding["spec"]["matchResources"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    admission = client.AdmissionregistrationV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    plural, spec = KINDS[names.TRAINING_JOB_KIND]
    pod = {"containers": [{"name": "main", "image": "x.invalid/a:1"}]}

    def job(name: str, priority: int) -> dict[str, Any]:
        body = {"spec": {**spec, "priority": priority, "template": {"spec": pod}}, "metadata": {"name": name}}
        return {"apiVersion": names.API_VERSION, "kind": names.TRAINING_JOB_KIND, **body}

    def refused(name: str) -> str:
        try:
            custom.create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, job(name, 5))
        except ApiException as error:
            return f"{error.status} {json.loads(error.body)['message']}"
        custom.delete_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, name)
        return ""  # the policy is not in force yet

    admission.create_validating_admission_policy(cast(Any, policy))
    try:
        admission.create_validating_admission_policy_binding(cast(Any, binding))
        wait_for(lambda: refused("urgent"), 30, "the admission policy in force")
        message = refused("urgent")
        assert message.startswith("403 ")
        assert f"spec.priority 5 is above 0, which namespace {namespace} may not set" in message
        custom.create_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, job("plain", 0))
        patch = {"spec": {"priority": 1_000_000}}
        with pytest.raises(ApiException) as raised:
            custom.patch_namespaced_custom_object(names.GROUP, names.VERSION, namespace, plural, "plain", patch)
        assert raised.value.status == 403
        status = {"status": {"phase": "Queued"}}
        custom.patch_namespaced_custom_object_status(names.GROUP, names.VERSION, namespace, plural, "plain", status)
    finally:
        admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
        admission.delete_validating_admission_policy(policy["metadata"]["name"])
