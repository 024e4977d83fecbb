"""CustomResourceDefinitions generated from the pydantic models (:mod:`lyra.api.resources`).

``lyra api crds --out-dir manifests/crds`` writes them; ``--check`` fails when the checked-in files differ, and a
unit test does the same, so the YAML never drifts from the models. The JSON schema pydantic gives is made
*structural*, as the API server requires: references inlined, every node typed, ``X | None`` written as an optional
``X`` (a field that is absent), a quantity (``int | str``) as ``x-kubernetes-int-or-string``. Pod templates are a
typed subset of PodTemplateSpec (the parts the operator reads) whose other fields are kept with
``x-kubernetes-preserve-unknown-fields``, so ``containers: "x"`` is refused at ``kubectl apply``. Cross-field
and transition rules are CEL (``x-kubernetes-validations``) with messages that say what to fix.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from lyra.api import names
from lyra.api.resources import (
    NAME_RULE,
    InferenceServiceSpec,
    InferenceServiceStatus,
    TrainingJobSpec,
    TrainingJobStatus,
)

_DROPPED = ("title", "discriminator")
HELM_RESOURCE_POLICY = "helm.sh/resource-policy"

TRAINING_RULES: list[dict[str, str]] = [
    {
        "rule": "self.minWorkers <= self.maxWorkers",
        "message": "minWorkers must be <= maxWorkers: lower minWorkers or raise maxWorkers",
    },
    {
        "rule": "self.gpusPerWorker == oldSelf.gpusPerWorker",
        "message": "gpusPerWorker is immutable: delete the TrainingJob and create it again to change it",
    },
]
INFERENCE_RULES: list[dict[str, str]] = [
    {
        "rule": "self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
        "message": "replicas must be within minReplicas and maxReplicas: change replicas or widen the range",
    },
    {
        "rule": "self.gpusPerReplica == oldSelf.gpusPerReplica",
        "message": "gpusPerReplica is immutable: create a new InferenceService to change it",
    },
]


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (pydantic's JSON schema, with ``$defs``) as a structural OpenAPI v3 schema."""
    definitions = schema.get("$defs", {})

    def convert(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return convert(merged)
        node = {k: v for k, v in node.items() if k not in _DROPPED and k != "$defs"}
        if "anyOf" in node:
            options = [option for option in node.pop("anyOf") if option.get("type") != "null"]
            if sorted(option.get("type", "") for option in options) == ["integer", "string"]:
                options = [{"x-kubernetes-int-or-string": True}]  # a quantity: 2 or "500m"
            if len(options) != 1:
                raise ValueError(f"a union the API server cannot express: {options}")
            rest = {k: v for k, v in node.items() if not (k == "default" and v is None)}
            node = {**convert(options[0]), **rest}
        if "enum" in node and "type" not in node:
            node["type"] = "string"
        if node.get("type") == "object" and node.get("additionalProperties") is True:
            node.pop("additionalProperties")
            node["x-kubernetes-preserve-unknown-fields"] = True
        if "properties" in node:
            node["properties"] = {key: convert(value) for key, value in node["properties"].items()}
            if not node["properties"] and node.get("x-kubernetes-preserve-unknown-fields"):
                node.pop("properties")
        if isinstance(node.get("additionalProperties"), dict):
            node["additionalProperties"] = convert(node["additionalProperties"])
        if "items" in node:
            node["items"] = convert(node["items"])
        if node.get("additionalProperties") is False:
            node.pop("additionalProperties")
        for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(node.get(bound), int | float) and not isinstance(node.get(bound), bool):
                node[limit] = node.pop(bound)  # OpenAPI v3.0: a boolean beside the bound
                node[bound] = True
        if node.get("type") == "number" and isinstance(node.get("default"), int):
            node["default"] = float(node["default"])
        return node

    converted: dict[str, Any] = convert({k: v for k, v in schema.items() if k != "$defs"})
    return converted


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return structural(model.model_json_schema(by_alias=True, mode="serialization"))


def _resource_schema(spec: type[BaseModel], status: type[BaseModel], rules: list[dict[str, str]]) -> dict[str, Any]:
    spec_schema = _schema(spec)
    spec_schema["x-kubernetes-validations"] = rules
    return {
        "type": "object",
        # The name is the value of the label on the object's pods: one Lyra cannot label is refused at the root.
        "x-kubernetes-validations": [dict(NAME_RULE)],
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": _schema(status),
        },
    }


def _crd(
    kind: str, plural: str, short: str, schema: dict[str, Any], columns: list[dict[str, str]], *, scale: bool
) -> dict[str, Any]:
    subresources: dict[str, Any] = {"status": {}}
    if scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # Helm never deletes a CRD with this policy (nor, so, users' objects) when the chart is uninstalled.
        "metadata": {"name": f"{plural}.{names.GROUP}", "annotations": {HELM_RESOURCE_POLICY: "keep"}},
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": [names.CATEGORY],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def training_job_crd() -> dict[str, Any]:
    columns = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Workers", "type": "integer", "jsonPath": ".status.workers.current"},
        {"name": "Target", "type": "integer", "jsonPath": ".status.workers.target"},
        {"name": "GPU/Worker", "type": "integer", "jsonPath": ".spec.gpusPerWorker"},
        {"name": "GPU Type", "type": "string", "jsonPath": ".status.gpuType"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    schema = _resource_schema(TrainingJobSpec, TrainingJobStatus, TRAINING_RULES)
    # An absent object gets no defaults of its own fields unless it defaults to {} itself.
    schema["properties"]["spec"]["properties"]["preemption"]["default"] = {}
    return _crd(
        names.TRAINING_JOB_KIND, names.TRAINING_JOB_PLURAL, names.TRAINING_JOB_SHORT, schema, columns, scale=False
    )


def inference_service_crd() -> dict[str, Any]:
    columns = [
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
        {"name": "Servers", "type": "integer", "jsonPath": ".status.serversNeeded"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    schema = _resource_schema(InferenceServiceSpec, InferenceServiceStatus, INFERENCE_RULES)
    return _crd(
        names.INFERENCE_SERVICE_KIND,
        names.INFERENCE_SERVICE_PLURAL,
        names.INFERENCE_SERVICE_SHORT,
        schema,
        columns,
        scale=True,
    )


def all_crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD."""
    crds = [training_job_crd(), inference_service_crd()]
    return {f"{crd['metadata']['name']}.yaml": crd for crd in crds}
