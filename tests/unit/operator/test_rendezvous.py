"""The rendezvous wiring on a job's worker pods: one c10d store on a base worker, reached by a stable DNS name through
the job's headless Service, settings that let torchrun live through scale-ins, and the template's own values winning
and able to name Lyra's (``$(LYRA_WORKER)``).

Expectations are written from torchrun's documented options and Kubernetes' DNS rules for pods with ``hostname`` and
``subdomain`` (``<hostname>.<subdomain>.<namespace>.svc``), not from :mod:`lyra.operator.manifests`' constants.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from lyra.operator import manifests

TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "x.invalid/t:1"}, {"name": "sidecar"}]}}
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def pod(index: int, *, job: str = "bert", low: int = 2, high: int = 4, template: Any = None, host: int = 0) -> Any:
    return manifests.worker_pod(
        namespace="ml", job=job, job_uid="uid-1", index=index, role="base" if index < low else "flexible",
        template=template or TEMPLATE, gpus_per_worker=4, gpu_type="Tesla-T4", planned_node=None, grace_seconds=30,
        min_workers=low, max_workers=high, rendezvous_host=host,
    )  # fmt: skip


def env(body: Any, container: int = 0) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in body["spec"]["containers"][container]["env"]}


def conf(body: Any) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in env(body)["PET_RDZV_CONF"].split(","))


def test_every_worker_meets_at_one_c10d_store_on_the_hosting_base_worker() -> None:
    gang = [pod(i) for i in range(4)]
    endpoints = {env(p)["PET_RDZV_ENDPOINT"] for p in gang}
    assert len(endpoints) == 1, "one store for the whole job"
    host = gang[0]["spec"]
    assert endpoints == {f"{host['hostname']}.{host['subdomain']}.ml.svc:29400"}
    assert [conf(p)["is_host"] for p in gang] == ["true", "false", "false", "false"]
    for body in gang:
        assert env(body)["PET_RDZV_BACKEND"] == "c10d"
        assert env(body)["PET_RDZV_ID"] == "uid-1"
        assert env(body)["PET_NNODES"] == "2:4"
        assert env(body)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1", "a fresh worker store every round"
        assert env(body, 1) == env(body), "every container of the pod gets the contract"


def test_a_gang_that_started_at_a_higher_index_is_hosted_by_its_lowest_base_worker() -> None:
    gang = [pod(i, host=3) for i in (3, 4, 5)]
    assert {env(p)["PET_RDZV_ENDPOINT"] for p in gang} == {"bert-w3.bert.ml.svc:29400"}
    assert [conf(p)["is_host"] for p in gang] == ["true", "false", "false"]


def test_the_rendezvous_outlasts_membership_changes() -> None:
    settings = conf(pod(2))
    keep_alive = int(settings["keep_alive_interval"]) * int(settings["keep_alive_max_attempt"])
    # A stopped agent never leaves the rendezvous: the survivors wait for it to be found dead, then the last call.
    assert keep_alive + int(settings["last_call_timeout"]) < int(settings["join_timeout"])
    assert int(settings["read_timeout"]) >= 300, "workers wait minutes for the host's pod to start"
    elastic, inelastic = int(env(pod(2))["PET_MAX_RESTARTS"]), int(env(pod(0, low=2, high=2))["PET_MAX_RESTARTS"])
    assert elastic >= 100 > inelastic > 0, "every scale-in costs each surviving agent one restart"
    assert float(env(pod(2))["PET_MONITOR_INTERVAL"]) <= 5


def test_the_template_s_own_values_win() -> None:
    template = {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "env": [
                        {"name": "PET_MAX_RESTARTS", "value": "7"},
                        {"name": "PET_RDZV_CONF", "value": "join_timeout=60"},
                        {"name": "PET_RDZV_ENDPOINT", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                    ],
                }
            ]
        }
    }
    given = pod(1, template=template)["spec"]["containers"][0]["env"]
    names = [e["name"] for e in given]
    assert len(names) == len(set(names)), "no variable twice"
    by_name = {e["name"]: e for e in given}
    assert by_name["PET_MAX_RESTARTS"]["value"] == "7"
    assert by_name["PET_RDZV_CONF"]["value"] == "join_timeout=60"
    assert "valueFrom" in by_name["PET_RDZV_ENDPOINT"]
    assert by_name["PET_RDZV_BACKEND"]["value"] == "c10d", "what the template leaves out is still set"


def expand(value: str, defined: dict[str, str]) -> str:
    """The kubelet's ``$(NAME)`` expansion (k8s.io/kubernetes third_party/forked/golang/expansion): a name defined
    earlier in the list is replaced, ``$$`` is a literal ``$``, anything else is kept as written."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
        lambda m: "$" if m.group(0) == "$$" else defined.get(m.group(1), m.group(0)),
        value,
    )


def test_a_template_value_may_name_lyra_s_variables_as_the_kubelet_expands_them() -> None:
    path = {"name": "LYRA_CHECKPOINT_PATH", "value": "/checkpoints/$(LYRA_JOB)-w$(LYRA_WORKER).json"}
    template = {"spec": {"containers": [{"name": "trainer", "env": [path, {"name": "LITERAL", "value": "$$(X)"}]}]}}
    for index in (0, 3):
        defined: dict[str, str] = {}
        for entry in pod(index, template=template)["spec"]["containers"][0]["env"]:
            defined[entry["name"]] = expand(entry.get("value", ""), defined)
        assert defined["LYRA_CHECKPOINT_PATH"] == f"/checkpoints/bert-w{index}.json", "one checkpoint per worker"
        assert defined["LITERAL"] == "$(X)"


def test_the_headless_service_selects_the_job_s_workers_and_belongs_to_the_job() -> None:
    service = manifests.rendezvous_service(namespace="ml", job="bert", job_uid="uid-1")
    worker = pod(1)
    assert service["kind"] == "Service"
    assert service["spec"]["clusterIP"] == "None", "headless: a DNS record per pod"
    assert service["spec"]["publishNotReadyAddresses"] is True, "names resolve before any readiness probe passes"
    assert service["metadata"]["name"] == worker["spec"]["subdomain"]
    assert service["metadata"]["namespace"] == worker["metadata"]["namespace"]
    selector = service["spec"]["selector"]
    assert selector.items() <= worker["metadata"]["labels"].items()
    (owner,) = service["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "lyra.dev/v1alpha1", "kind": "TrainingJob", "name": "bert", "uid": "uid-1", "controller": True,
        "blockOwnerDeletion": True,
    }  # fmt: skip
    assert [p["port"] for p in service["spec"]["ports"]] == [29400]


@pytest.mark.parametrize(
    "job", ["bert", "a" * 63, "9-lives", "with.dots", "x" * 51, "resnet-50-imagenet-with-a-very-long-name-indeed-yes"]
)
def test_host_and_service_names_are_valid_dns_labels_for_any_job_name(job: str) -> None:
    service = manifests.rendezvous_service(namespace="ml", job=job, job_uid="u")["metadata"]["name"]
    assert len(service) <= 63
    assert DNS_1035_LABEL.fullmatch(service), "a Service name is a DNS-1035 label"
    for index in (0, 7, 123456):
        spec = pod(index, job=job)["spec"]
        assert spec["subdomain"] == service
        assert len(spec["hostname"]) <= 63
        assert DNS_LABEL.fullmatch(spec["hostname"])
    hostnames = {pod(i, job=job)["spec"]["hostname"] for i in range(5)}
    assert len(hostnames) == 5, "workers of one job have distinct names"


def test_distinct_jobs_get_distinct_services() -> None:
    jobs = ["a" * 51, "a" * 52, "with.dots", "with-dots"]
    assert len({manifests.rendezvous_service_name(j) for j in jobs}) == len(jobs)


def test_a_starting_job_gets_its_service_before_its_workers_and_they_all_point_at_its_lowest_base_worker() -> None:
    from lyra.operator.actions import CreatePod, CreateService
    from lyra.operator.decide import OperatorConfig, decide
    from lyra.operator.isolation import subject_of

    from .fake_cluster import A100, FakeCluster, node, training_job

    cluster = FakeCluster([node("n0", "training", A100), node("n1", "training", A100)])
    cluster.add_job(training_job("bert", 2, 4))
    kinds: list[type] = []
    for _ in range(3):
        decision = decide(cluster.world(), OperatorConfig())
        kinds += [type(a) for a in decision.actions if isinstance(a, CreateService | CreatePod)]
        for action in decision.of(CreateService):
            assert isinstance(action, CreateService)
            assert subject_of(action) == action.owner, "a refused Service holds back its job's pods, not others"
        cluster.apply(decision)
    assert kinds[0] is CreateService, "the Service comes before the pods it names"
    assert CreatePod in kinds
    (service,) = cluster.headless.values()
    assert service["metadata"]["ownerReferences"][0]["uid"] == "uid-bert"
    workers = cluster.workers("bert")
    assert len(workers) == 4
    assert {env(w)["PET_RDZV_ENDPOINT"] for w in workers} == {"bert-w0.bert.ml.svc:29400"}
    assert sorted(conf(w)["is_host"] for w in workers) == ["false", "false", "false", "true"]
    assert all(w["spec"]["subdomain"] == service["metadata"]["name"] for w in workers)


def test_workers_added_later_point_at_the_store_of_the_running_gang() -> None:
    from lyra.operator.decide import OperatorConfig, decide

    from .fake_cluster import A100, FakeCluster, node, training_job

    cluster = FakeCluster([node("n0", "training", A100)])
    cluster.add_job(training_job("bert", 1, 4, gpusPerWorker=2))
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    assert len(cluster.workers("bert")) == 4
    # The gang's base worker is w0; w0 leaves with a preemption only, so a scale-in takes w3 and a later scale-out
    # makes w3 again: it must meet the others at w0.
    del cluster.pods["ml/bert-w3"]
    for _ in range(3):
        cluster.apply(decide(cluster.world(), OperatorConfig()))
    added = cluster.pods["ml/bert-w3"]
    assert env(added)["PET_RDZV_ENDPOINT"] == "bert-w0.bert.ml.svc:29400"
    assert conf(added)["is_host"] == "false"
