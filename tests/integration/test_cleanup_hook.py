"""The chart's cleanup hook (``cleanup.restoreNodesOnUninstall``): rendered, a post-delete Job that runs `lyra nodes
restore` with the chart's image and a ServiceAccount allowed exactly what the restore needs; on the local control
plane, after the operator lent servers and ran training on them, ``helm uninstall`` runs the hook, and the Job's own
command line, run as the hook's ServiceAccount (KWOK fakes containers: the Job's pod completes without running it),
drains the training pods and leaves no node with a key under ``lyra.dev/``; a GPU pod that is not Lyra's then runs
on a server that was lent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from lyra.api import names
from lyra.chart.rendering import helm_template
from lyra.localcluster.binaries import BinaryCache, BinarySet
from lyra.localcluster.controlplane import ControlPlane
from lyra.localcluster.testing import temporary_namespace
from lyra.localcluster.waiting import wait_for
from tests.integration.test_nodes_restore import a_plain_gpu_pod_runs_on, lyra_keys
from tests.operator_support import (
    DEADLINE_S,
    OPERATOR_NAMESPACE,
    Operator,
    lend_to_an_elastic_job,
    token_kubeconfig,
    workers,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPOSITORY = Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "helm" / "lyra"
VALUES = Path(__file__).parent / "data" / "chart-values" / "cleanup.yaml"
RELEASE = "cleanup"
HOOK = f"{RELEASE}-lyra-restore-nodes"
#: Only the hook and the operator's objects: no CRDs (the session's are kept), no extender or bundled scheduler.
INSTALL = (
    "cleanup.restoreNodesOnUninstall=true",
    "cleanup.drain=true",
    "cleanup.poolLabels=true",
    "crds.enabled=false",
    "extender.enabled=false",
    "scheduler.enabled=false",
    "operator.replicas=1",
)


@pytest.fixture(scope="module")
def binaries() -> BinarySet:
    return BinaryCache().binary_set()


def hook_objects(
    binaries: BinarySet, *, values_files: tuple[Path, ...] = (), settings: tuple[str, ...] = ()
) -> dict[str, dict[str, Any]]:
    """The hook's rendered objects by kind (release ``cleanup`` in the operator's namespace)."""
    rendered = helm_template(
        binaries.helm, CHART, release=RELEASE, namespace=OPERATOR_NAMESPACE, values_files=values_files,
        settings=settings,
    )  # fmt: skip
    found = {}
    for document in yaml.safe_load_all(rendered):
        if document and document["metadata"]["name"] == HOOK:
            assert document["kind"] not in found
            found[document["kind"]] = document
    return found


def test_the_hook_is_off_by_default(binaries: BinarySet) -> None:
    assert hook_objects(binaries) == {}


def test_the_hook_is_a_post_delete_job_run_after_its_account_and_removed_once_it_succeeds(binaries: BinarySet) -> None:
    objects = hook_objects(binaries, values_files=(VALUES,))
    assert sorted(objects) == ["ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"]
    for kind, document in objects.items():
        annotations = document["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-delete", kind
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded", kind
        expected_weight = 0 if kind == "Job" else -5  # the account and its rights exist before the Job starts
        assert int(annotations["helm.sh/hook-weight"]) == expected_weight, kind
    job = objects["Job"]
    assert job["spec"]["backoffLimit"] == 2
    pod = job["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert container["image"] == "lyra:0.1.0"  # the chart's own image, as the operator's
    assert container["args"] == [
        "nodes", "restore", f"--lease-namespace={OPERATOR_NAMESPACE}", "--timeout=300", "--drain", "--pool-labels",
    ]  # fmt: skip
    assert pod["spec"]["serviceAccountName"] == HOOK
    assert pod["spec"]["restartPolicy"] == "Never"
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert objects[binding]["subjects"] == [
            {"kind": "ServiceAccount", "name": HOOK, "namespace": OPERATOR_NAMESPACE}
        ]
        assert objects[binding]["roleRef"]["name"] == HOOK


def test_the_hooks_account_may_do_what_the_restore_needs_and_drain_adds_deleting_pods(binaries: BinarySet) -> None:
    drained = hook_objects(binaries, values_files=(VALUES,))
    assert drained["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "get", "delete"]},
    ]
    assert drained["Role"]["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [names.OPERATOR_NAME],
            "verbs": ["get"],
        }
    ]
    plain = hook_objects(binaries, settings=("cleanup.restoreNodesOnUninstall=true",))
    assert plain["ClusterRole"]["rules"][1] == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    assert plain["Job"]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "nodes", "restore", f"--lease-namespace={OPERATOR_NAMESPACE}", "--timeout=600",
    ]  # fmt: skip


def test_the_hooks_pod_takes_the_admins_placement_metadata_and_security(binaries: BinarySet) -> None:
    pod = hook_objects(binaries, values_files=(VALUES,))["Job"]["spec"]["template"]
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert spec["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert pod["metadata"]["annotations"] == {"example.com/owner": "platform"}
    assert pod["metadata"]["labels"]["team"] == "platform"
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "restore-nodes"
    [container] = spec["containers"]
    assert container["env"] == [{"name": "PYTHONFAULTHANDLER", "value": "1"}]
    assert container["resources"] == {"requests": {"cpu": 0.1, "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def notes(binaries: BinarySet, *settings: str) -> str:
    """The release notes helm prints after an install (a client-side dry run: no cluster)."""
    command = [str(binaries.helm), "install", RELEASE, str(CHART), "--dry-run=client"]
    for setting in settings:
        command += ["--set", setting]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


def test_the_release_notes_say_what_uninstall_leaves_on_nodes_or_what_the_hook_runs(binaries: BinarySet) -> None:
    assert "set cleanup.restoreNodesOnUninstall=true to run it on uninstall" in notes(binaries)
    hooked = notes(binaries, "cleanup.restoreNodesOnUninstall=true", "cleanup.drain=true")
    assert f"the Job {HOOK} runs `lyra nodes restore --drain` once the operator is gone" in hooked
    assert "--timeout longer than 600s" in hooked


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("cleanup.restoreNodesOnUninstall=yes", "at '/cleanup/restoreNodesOnUninstall'"),
        ("cleanup.timeoutSeconds=0", "at '/cleanup/timeoutSeconds'"),
        ("cleanup.backoffLimit=11", "at '/cleanup/backoffLimit'"),
        ("cleanup.restore=true", "additional properties 'restore' not allowed"),
    ],
)
def test_bad_cleanup_values_are_refused_naming_the_key(binaries: BinarySet, setting: str, message: str) -> None:
    command = [str(binaries.helm), "template", RELEASE, str(CHART), "--set", setting]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


# -- on the local control plane ------------------------------------------------------------------------------------


def helm(binaries: BinarySet, cluster: ControlPlane, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [str(binaries.helm), *argv, "--namespace", OPERATOR_NAMESPACE, "--kubeconfig", str(cluster.kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)


def kubectl(binaries: BinarySet, cluster: ControlPlane, verb: str, documents: list[dict[str, Any]]) -> None:
    command = [str(binaries.kubectl), "--kubeconfig", str(cluster.kubeconfig), verb, "-f", "-"]
    if verb == "delete":
        command.append("--ignore-not-found")
    result = subprocess.run(
        command, input=yaml.safe_dump_all(documents), capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


_LEASES = ("coordination.k8s.io", "leases")
#: (verb, API group, resource, in the release's namespace?, object name) -> may the hook's ServiceAccount do it?
ACCESS = {
    ("patch", "", "nodes", False, ""): True,
    ("list", "", "pods", False, ""): True,
    ("delete", "", "pods", False, ""): True,  # cleanup.drain
    ("get", *_LEASES, True, names.OPERATOR_NAME): True,
    ("get", *_LEASES, True, "another-lease"): False,
    ("update", *_LEASES, True, names.OPERATOR_NAME): False,
    ("delete", "", "nodes", False, ""): False,
    ("create", "", "pods", False, ""): False,
    ("get", "", "secrets", True, ""): False,
    ("create", "apps", "deployments", True, ""): False,
}


def may(api: client.ApiClient, case: tuple[str, str, str, bool, str]) -> bool:
    """What RBAC grants the hook's ServiceAccount (a SubjectAccessReview) for one case of :data:`ACCESS`."""
    verb, group, resource, namespaced, name = case
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}", "system:authenticated"]
    attributes = client.V1ResourceAttributes(
        verb=verb,
        group=group,
        resource=resource,
        namespace=OPERATOR_NAMESPACE if namespaced else None,
        name=name or None,
    )
    spec = client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{OPERATOR_NAMESPACE}:{HOOK}", groups=groups, resource_attributes=attributes
    )
    review = client.AuthorizationV1Api(api).create_subject_access_review(client.V1SubjectAccessReview(spec=spec))
    return bool(review.status.allowed)


def hook_job_ran(cluster: ControlPlane) -> bool:
    """The API server's audit log shows helm creating the hook's Job (201: Helm 4 applies it server-side) and then
    deleting it (200; ``hook-succeeded``: helm deletes it once it succeeded, and ``helm uninstall`` waited for that)."""
    steps = []
    for line in cluster.layout.audit_log.read_text().splitlines():
        event = json.loads(line)
        reference = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("userAgent", "").startswith("Helm/")
            and (reference.get("resource"), reference.get("namespace"), reference.get("name"))
            == ("jobs", OPERATOR_NAMESPACE, HOOK)
            and not reference.get("subresource")
        ):
            steps.append((event["verb"], (event.get("responseStatus") or {}).get("code")))
    created = [i for i, step in enumerate(steps) if step in {("create", 201), ("patch", 201)}]
    deleted = [i for i, step in enumerate(steps) if step == ("delete", 200)]
    return bool(created and deleted and created[0] < deleted[-1])


def test_uninstall_runs_the_hook_and_its_command_as_its_account_leaves_no_lyra_key(
    cluster: ControlPlane, api: client.ApiClient, operator_kubeconfig: Path, binaries: BinarySet, tmp_path: Path
) -> None:
    operator = Operator(operator_kubeconfig, tmp_path / "operator.log")
    settings = [arg for setting in INSTALL for arg in ("--set", setting)]
    installed = helm(binaries, cluster, "install", RELEASE, str(CHART), *settings)
    assert installed.returncode == 0, installed.stderr
    rendered = helm_template(
        binaries.helm, CHART, release=RELEASE, namespace=OPERATOR_NAMESPACE, settings=INSTALL
    )  # what the hook creates: the same chart, release and values
    hook = [d for d in yaml.safe_load_all(rendered) if d and d["metadata"]["name"] == HOOK]
    account = [d for d in hook if d["kind"] != "Job"]
    [job] = [d for d in hook if d["kind"] == "Job"]
    uninstalled = False
    with temporary_namespace(api, "cleanup-hook") as namespace:
        try:
            lent = lend_to_an_elastic_job(api, namespace, operator)
            operator.stop()  # as helm uninstall stops the release's operator: it releases its Lease

            # The hook runs (KWOK completes the Job's pod without running its container) and goes once it succeeded.
            removed = helm(binaries, cluster, "uninstall", RELEASE, "--wait", "--timeout", "180s")
            assert removed.returncode == 0, removed.stderr
            uninstalled = True
            assert client.BatchV1Api(api).list_namespaced_job(OPERATOR_NAMESPACE).items == []
            assert hook_job_ran(cluster), "the uninstall did not create, then delete once succeeded, the hook's Job"
            assert lyra_keys(api) != {}, "the uninstall itself removed Lyra's keys"

            # The Job's command line, as the hook's ServiceAccount with the hook's rights.
            kubectl(binaries, cluster, "apply", account)
            wait_for(lambda: may(api, next(iter(ACCESS))), DEADLINE_S, "the hook's rights to reach the authorizer")
            assert {case: may(api, case) for case in ACCESS} == ACCESS
            kubeconfig = token_kubeconfig(cluster, api, HOOK, OPERATOR_NAMESPACE, tmp_path / "restore-nodes.kubeconfig")
            [container] = job["spec"]["template"]["spec"]["containers"]
            command = [sys.executable, "-m", "lyra", *container["args"], "--kubeconfig", str(kubeconfig)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
            assert done.returncode == 0, done.stderr
            assert "note:" not in done.stderr, done.stderr  # the Lease was read: no "could not read" note
            assert "would drain 4 training pods" not in done.stdout
            assert "will drain 4 training pods on lent servers first" in done.stdout
            assert "restored" in done.stdout
            assert lyra_keys(api) == {}
            assert workers(api, namespace, "elastic") == []

            a_plain_gpu_pod_runs_on(api, namespace, lent[0])
        except BaseException:
            print("--- operator ---\n" + operator.tail())
            raise
        finally:
            operator.stop()
            kubectl(binaries, cluster, "delete", account)
            if not uninstalled:
                helm(binaries, cluster, "uninstall", RELEASE, "--no-hooks")
