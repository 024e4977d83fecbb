"""Commit: list what a pass reads, and apply a decision's actions to the API, in order, idempotently.

Creating what exists (409 AlreadyExists) and deleting what is gone (404) count as done. A conflict on a node (its
resourceVersion moved since the pass read it) or any other API error stops the rest of the decision: the next pass
reads afresh and decides again, which the action order makes safe (:mod:`lyra.operator.actions`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lyra.api import names
from lyra.operator.actions import (
    Action,
    ApplyDeployment,
    CreatePod,
    Decision,
    DeletePod,
    Emit,
    PatchStatus,
    SetNodeState,
    SetPodRole,
)
from lyra.operator.observe import World, format_time, read_world

log = logging.getLogger("lyra.operator")


@dataclass(frozen=True, slots=True)
class Outcome:
    applied: int
    failed: Action | None = None
    error: str = ""


class Cluster:
    """The operator's access to the API server."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def observe(self, now: float) -> World:
        """List nodes, GPU pods, jobs, services and Lyra's Deployments, and read them into a World."""
        nodes = self._items(self.core.list_node(label_selector=names.POOL_LABEL, _preload_content=False))
        pods = self._items(self.core.list_pod_for_all_namespaces(_preload_content=False))
        jobs = self._items(
            self.custom.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.TRAINING_JOB_PLURAL, _preload_content=False
            )
        )
        services = self._items(
            self.custom.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.INFERENCE_SERVICE_PLURAL, _preload_content=False
            )
        )
        deployments = self._items(
            self.apps.list_deployment_for_all_namespaces(label_selector=names.SERVICE_LABEL, _preload_content=False)
        )
        return read_world(now, nodes=nodes, pods=pods, jobs=jobs, services=services, deployments=deployments)

    @staticmethod
    def _items(response: Any) -> list[dict[str, Any]]:
        body = json.loads(response.data)
        items: list[dict[str, Any]] = body.get("items", [])
        return items

    def apply(self, decision: Decision, now: float) -> Outcome:
        done = 0
        for action in decision.actions:
            try:
                self._apply(action, now)
            except ApiException as error:
                if error.status == 409 and isinstance(action, CreatePod | ApplyDeployment) and _already_exists(error):
                    done += 1
                    continue
                if error.status == 404 and isinstance(action, DeletePod | SetPodRole):
                    done += 1
                    continue
                reason = _reason(error)
                log.warning(
                    "stopped after %d of %d actions: %s: %s", done, len(decision.actions), _what(action), reason
                )
                return Outcome(done, action, reason)
            done += 1
        return Outcome(done)

    def _apply(self, action: Action, now: float) -> None:
        if isinstance(action, SetNodeState):
            annotations = dict(action.annotations)
            body = {
                "metadata": {
                    "resourceVersion": action.resource_version or None,
                    "labels": {names.STATE_LABEL: action.state.value},
                    "annotations": annotations,
                },
                "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in action.taints]},
            }
            self.core.patch_node(action.node, body)
            log.info("node %s -> %s (%s)", action.node, action.state.value, action.reason)
        elif isinstance(action, PatchStatus):
            plural = (
                names.TRAINING_JOB_PLURAL
                if action.ref.kind == names.TRAINING_JOB_KIND
                else names.INFERENCE_SERVICE_PLURAL
            )
            # The whole status, as a JSON patch: a merge patch would keep map keys the new status no longer has
            # (a node a job left would stay in its placements).
            whole = [{"op": "add", "path": "/status", "value": dict(action.status)}]
            self.custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                action.ref.namespace,
                plural,
                action.ref.name,
                whole,
                _content_type="application/json-patch+json",
            )
        elif isinstance(action, DeletePod):
            self.core.delete_namespaced_pod(
                action.ref.name, action.ref.namespace, grace_period_seconds=action.grace_seconds
            )
            log.info("pod %s deleted (%s, grace %d s)", action.ref.key, action.reason, action.grace_seconds)
        elif isinstance(action, SetPodRole):
            self.core.patch_namespaced_pod(
                action.ref.name, action.ref.namespace, {"metadata": {"labels": {names.ROLE_LABEL: action.role}}}
            )
        elif isinstance(action, CreatePod):
            self.core.create_namespaced_pod(action.ref.namespace, cast(Any, dict(action.manifest)))
            log.info("pod %s created", action.ref.key)
        elif isinstance(action, ApplyDeployment):
            if action.create:
                self.apps.create_namespaced_deployment(action.ref.namespace, cast(Any, dict(action.manifest)))
            else:
                replicas = action.manifest["spec"]["replicas"]
                self.apps.patch_namespaced_deployment(
                    action.ref.name, action.ref.namespace, {"spec": {"replicas": replicas}}
                )
        elif isinstance(action, Emit):
            self._event(action, now)

    def _event(self, action: Emit, now: float) -> None:
        ref = action.ref
        namespace = ref.namespace or "default"
        api_version = "v1" if ref.kind in ("Node", "Pod") else names.API_VERSION
        stamp = format_time(now)
        body = {
            "metadata": {"generateName": f"{ref.name[:200]}.", "namespace": namespace},
            "involvedObject": {
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace or None,
                "uid": ref.uid or None,
                "apiVersion": api_version,
            },
            "reason": action.reason,
            "message": action.message[:1024],
            "type": action.type,
            "source": {"component": names.OPERATOR_NAME},
            "reportingComponent": names.OPERATOR_NAME,
            "reportingInstance": names.OPERATOR_NAME,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.core.create_namespaced_event(namespace, cast(Any, body))


def _already_exists(error: ApiException) -> bool:
    return "AlreadyExists" in str(error.body or "") or error.status == 409


def _reason(error: ApiException) -> str:
    try:
        message = json.loads(error.body or "{}").get("message", "")
    except ValueError:
        message = ""
    return f"{error.status} {error.reason}: {message}".strip(": ")


def _what(action: Action) -> str:
    if isinstance(action, SetNodeState):
        return f"node {action.node}"
    return f"{type(action).__name__} {action.ref.key}"
