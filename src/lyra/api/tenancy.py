"""The scheduling fields of a pod template that belong to Lyra, not to the tenant (docs/security.md).

A TrainingJob's or InferenceService's ``spec.template`` becomes pods the operator makes. Where those pods may run
is Lyra's decision, enforced by what the operator writes (required node affinity, the toleration of one loan state
taint); a template that set its own would let one tenant's pods onto servers lent to, or reclaimed for, someone else,
or raise them above other tenants' pods in kube-scheduler's preemption. Each such field is *refused*:

* by the API server at ``kubectl apply``: the rules below are CEL rules on the template's ``spec`` in both CRDs
  (:mod:`lyra.api.crds`), each naming its field;
* by the operator, for an object stored before the rules existed: :func:`scheduling_problem` names the field and the
  object gets an ``InvalidSpec`` condition instead of pods;
* and whatever reaches :mod:`lyra.operator.manifests` is overridden anyway (defence in depth).

What stays the tenant's: ``nodeSelector`` on keys that are not Lyra's (they can only narrow where a pod runs, as
every node selector and affinity term must match), ``podAffinity`` and ``podAntiAffinity`` whose terms select pods of
the object's own namespace (no ``namespaces``, no ``namespaceSelector``: those are refused, as they would let one
tenant's pods repel or attract another's), ``topologySpreadConstraints`` (kube-scheduler counts only pods of the
pod's own namespace for them), tolerations of other
taints (by key), ``serviceAccountName`` (a ServiceAccount of the object's own namespace: creating a TrainingJob is
creating pods in that namespace, and the namespace's PodSecurity and quotas apply to them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from lyra.api import names

#: Labels and annotations under this prefix are Lyra's; the operator removes the template's and writes its own.
OWNED_PREFIX: Final = f"{names.GROUP}/"
#: Node labels Lyra's placement selects on besides its own prefix (a template may not select on them).
OWNED_NODE_LABELS: Final = (names.GPU_PRODUCT_LABEL,)
#: Pod spec fields only the operator (or kube-scheduler) sets.
OWNED_FIELDS: Final = ("nodeName", "schedulerName", "priorityClassName", "priority")


@dataclass(frozen=True, slots=True)
class Rule:
    """One refused setting: its field (under ``spec.template.spec``), the CEL rule the CRD carries, the message both
    the API server and the operator give, and the same rule in Python (``True``: refused)."""

    field: str
    cel: str
    message: str
    refuses: Callable[[Mapping[str, Any]], bool]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _tolerations(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    value = spec.get("tolerations")
    return [_mapping(t) for t in value] if isinstance(value, list) else []


def _owned_key(key: object) -> bool:
    return isinstance(key, str) and (key.startswith(OWNED_PREFIX) or key in OWNED_NODE_LABELS)


def _field_rule(field: str, why: str) -> Rule:
    return Rule(field, f"!has(self.{field})", f"{field} may not be set: {why}; remove it", lambda s: field in s)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_NODE_LABELS_CEL = " && ".join([f"!k.startsWith('{OWNED_PREFIX}')", *(f"k != '{k}'" for k in OWNED_NODE_LABELS)])


def _reaching_terms(affinity: object) -> bool:
    """Whether a podAffinity or podAntiAffinity (JSON) has a term that names namespaces or selects them."""
    part = _mapping(affinity)
    required = part.get(_REQUIRED)
    preferred = part.get(_PREFERRED)
    terms = [_mapping(t) for t in required] if isinstance(required, list) else []
    if isinstance(preferred, list):
        terms += [_mapping(_mapping(w).get("podAffinityTerm")) for w in preferred]
    return any("namespaces" in t or "namespaceSelector" in t for t in terms)


def _own_namespace_rule(field: str) -> Rule:
    """Pod (anti-)affinity terms select pods of the object's own namespace only: a term with ``namespaces`` or a
    ``namespaceSelector`` (``{}`` is every namespace) would let a tenant's pods keep another's off a node or out of a
    zone, and a running pod's required anti-affinity also repels every pod it selects that comes after it."""
    path = f"self.affinity.{field}"
    no_namespaces = "!has({t}.namespaces) && !has({t}.namespaceSelector)"
    cel = (
        f"!has(self.affinity) || !has({path}) || "
        f"((!has({path}.{_REQUIRED}) || {path}.{_REQUIRED}.all(t, {no_namespaces.format(t='t')})) && "
        f"(!has({path}.{_PREFERRED}) || {path}.{_PREFERRED}.all(w, {no_namespaces.format(t='w.podAffinityTerm')})))"
    )
    message = (
        f"affinity.{field} terms select pods of the object's own namespace only: remove namespaces and "
        "namespaceSelector from its terms (they would reach other tenants' pods)"
    )
    return Rule(f"affinity.{field}", cel, message, lambda s: _reaching_terms(_mapping(s.get("affinity")).get(field)))


RULES: Final = (
    _field_rule(
        "nodeName", "kube-scheduler binds each pod to a node Lyra's rules allow; a pod bound by name skips them"
    ),
    _field_rule("schedulerName", "Lyra's pods are placed by the cluster's scheduler, with Lyra's rules and extender"),
    _field_rule(
        "priorityClassName",
        "pod priority decides whose pods kube-scheduler preempts; a TrainingJob's spec.priority orders Lyra's queue",
    ),
    _field_rule(
        "priority", "pod priority decides whose pods kube-scheduler preempts; it comes from a priority class, not a pod"
    ),
    Rule(
        "tolerations",
        "!has(self.tolerations) || self.tolerations.all(t, has(t.key) && t.key != '')",
        "tolerations need a key: a toleration without one tolerates every taint, Lyra's loan states included",
        lambda s: any(not t.get("key") for t in _tolerations(s)),
    ),
    Rule(
        "tolerations",
        f"!has(self.tolerations) || self.tolerations.all(t, !has(t.key) || t.key != '{names.STATE_TAINT}')",
        f"tolerations of {names.STATE_TAINT} are Lyra's: the operator adds the one each pod needs; remove it",
        lambda s: any(t.get("key") == names.STATE_TAINT for t in _tolerations(s)),
    ),
    Rule(
        "nodeSelector",
        f"!has(self.nodeSelector) || self.nodeSelector.all(k, {_NODE_LABELS_CEL})",
        f"nodeSelector keys under {OWNED_PREFIX} and {', '.join(OWNED_NODE_LABELS)} are Lyra's: it chooses the pool, "
        "loan state and GPU type (spec.gpuTypes, spec.gpuType); remove them",
        lambda s: any(_owned_key(k) for k in _mapping(s.get("nodeSelector"))),
    ),
    Rule(
        "affinity.nodeAffinity",
        "!has(self.affinity) || !has(self.affinity.nodeAffinity)",
        "affinity.nodeAffinity is Lyra's (the nodes a pod may run on); narrow placement with nodeSelector or "
        "podAffinity instead",
        lambda s: "nodeAffinity" in _mapping(s.get("affinity")),
    ),
    _own_namespace_rule("podAffinity"),
    _own_namespace_rule("podAntiAffinity"),
)


def cel_rules() -> list[dict[str, str]]:
    """The rules as ``x-kubernetes-validations`` of the template's ``spec``."""
    return [
        {"rule": r.cel, "message": r.message, "fieldPath": f".{r.field}", "reason": "FieldValueForbidden"}
        for r in RULES
    ]


def scheduling_problem(spec: Mapping[str, Any], where: str = "spec.template.spec") -> str | None:
    """Why a template's pod ``spec`` (JSON) is refused, naming the field; ``None`` if no rule refuses it."""
    for rule in RULES:
        if rule.refuses(spec):
            return f"{where}.{rule.field}: {rule.message}"
    return None
