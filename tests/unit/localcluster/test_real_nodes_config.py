"""Real nodes' pure parts: the profile's realNodeGroups, the CLI's refusals, the egress proxy's request parsing and
the node's configuration files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lyra.cli import main
from lyra.localcluster.profile import ProfileError, load_default_profile, parse_profile_text
from lyra.localcluster.realnodes import cluster, nodeconfig
from lyra.localcluster.realnodes.network import _parse_connect
from lyra.localcluster.realnodes.nodeconfig import ImageArchive, NodeSpec


def test_real_nodes_take_one_node_of_each_group_in_turn() -> None:
    plan = load_default_profile().real_node_plan(3)

    assert [name for name, _group in plan] == ["real-inference-t4-0", "real-training-a100-0", "real-inference-t4-1"]
    assert [group.gpu.count for _name, group in plan if group.gpu is not None] == [4, 8, 4]


def test_asking_more_real_nodes_than_the_profile_offers_is_refused() -> None:
    with pytest.raises(ProfileError, match="offers 4 real nodes"):
        load_default_profile().real_node_plan(5)


def test_real_node_groups_are_checked_like_node_groups() -> None:
    text = "nodeGroups: [{name: a, pool: training, count: 1}]\nrealNodeGroups: [{name: a, pool: training, count: 1}]\n"
    with pytest.raises(ProfileError, match=r"realNodeGroups\[0\].name: 'a' is already used"):
        parse_profile_text(text, "p.yaml")
    with pytest.raises(ProfileError, match=r"realNodeGroups: expected a list"):
        parse_profile_text("nodeGroups: [{name: a, pool: training, count: 1}]\nrealNodeGroups: 3\n", "p.yaml")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--real-nodes", "-1"], "--real-nodes must be 0 or more, got -1"),
        (["--real-nodes", "9"], "offers 4 real nodes (realNodeGroups), 9 asked for"),
        (["--real-nodes", "1", "--images-dir", "/nonexistent-lyra-images"], "no registry.k8s.io/pause:3.10 archive"),
    ],
)
def test_bad_real_node_requests_exit_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    if os.geteuid() != 0 and arguments[1] != "-1":
        pytest.skip("as non-root the refusal is about root first")
    code = main(["cluster", "up", "--state-dir", str(tmp_path / "state"), *arguments])

    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("request_line", "target"),
    [
        ("CONNECT 10.201.0.10:10250 HTTP/1.1", ("10.201.0.10", 10250)),
        ("CONNECT 127.0.0.1:8443 HTTP/1.1", ("127.0.0.1", 8443)),
        ("CONNECT [::1]:443 HTTP/1.1", ("::1", 443)),
        ("GET / HTTP/1.1", None),
        ("CONNECT node.example:10250 HTTP/1.1", None),
        ("CONNECT 10.0.0.1:0 HTTP/1.1", None),
        ("CONNECT 10.0.0.1:70000 HTTP/1.1", None),
        ("CONNECT 10.0.0.1 HTTP/1.1", None),
    ],
)
def test_the_egress_proxy_connects_only_to_literal_addresses(request_line: str, target: tuple[str, int] | None) -> None:
    assert _parse_connect(request_line.split()) == target


def _spec(tmp_path: Path) -> NodeSpec:
    planned = cluster.plan(load_default_profile().real_node_plan(2))[1]
    return NodeSpec(
        name=planned.name,
        directory=tmp_path / planned.name,
        node_ip=planned.node_ip,
        pod_cidr=planned.pod_cidr,
        gateway=planned.gateway,
        bridge=planned.bridge,
        cgroup_parent=f"{cluster.cgroup_parent('c', tmp_path)}/{planned.name}",
        api_server=cluster.api_server_url(),
        ca_cert=tmp_path / "ca.crt",
        token=planned.token,
        kubelet=Path("/bin/kubelet"),
        containerd=Path("/bin/containerd"),
        ctr=Path("/bin/ctr"),
        runc=Path("/bin/runc"),
        cni_bin=Path("/cni"),
        device_plugin=Path("/bin/lyra-fake-gpu"),
        gpu_count=planned.gpu_count,
        labels=planned.labels(),
        taints=(),
        max_pods=30,
        images=(ImageArchive(tmp_path / "pause.oci.tar", "registry.k8s.io/pause"),),
        log_dir=tmp_path / "logs",
    )


def test_a_node_spec_survives_its_json_and_gives_each_node_its_own_network(tmp_path: Path) -> None:
    spec = _spec(tmp_path)

    assert NodeSpec.from_json(spec.to_json()) == spec
    assert (spec.node_ip, spec.pod_cidr, spec.bridge) == ("10.201.0.11", "10.244.1.0/24", "lyrabr1")
    assert spec.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert nodeconfig.cni_config(spec)["plugins"][0]["ipam"]["ranges"] == [
        [{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}]
    ]


def test_the_node_settings_each_failure_needed_are_there(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    containerd = nodeconfig.containerd_config(spec)
    kubelet = nodeconfig.kubelet_config(spec)

    for setting in ("restrict_oom_score_adj = true", "SystemdCgroup = false", "disable_apparmor = true"):
        assert setting in containerd
    assert 'sandbox_image = "registry.k8s.io/pause:3.10"' in containerd
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["cgroupRoot"] == f"/{spec.cgroup_parent}/pods"
    assert (kubelet["failSwapOn"], kubelet["failCgroupV1"], kubelet["makeIPTablesUtilChains"]) == (False, False, False)
    assert kubelet["address"] == kubelet["healthzBindAddress"] == spec.node_ip
    assert kubelet["imageGCHighThresholdPercent"] == 100
