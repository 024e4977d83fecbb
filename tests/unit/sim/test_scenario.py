from __future__ import annotations

from pathlib import Path

import pytest

import lyra.sim
from lyra.sim.scenario import DurationKnowledge, ScenarioError, load_scenario, parse_scenario

SHIPPED = Path(lyra.sim.__file__).parent / "scenarios"
POOLS = "training: {servers: 1}\ninference: {servers: 1, req_per_server: 1}\n"


def test_the_shipped_default_is_valid_and_documented_values_hold() -> None:
    scenario = load_scenario()
    assert scenario.training.describe() == "65 x 8 V100"
    assert scenario.inference.describe() == "108 x 8 T4"
    assert scenario.speed_of("V100") == 1.0
    assert scenario.speed_of("T4") == 0.4
    assert scenario.inference.headroom_servers == 6  # 5% of 108, rounded up
    assert (scenario.loaning.lend_hysteresis_s, scenario.loaning.drain_s) == (1800, 30)
    assert scenario.memory.inference_fit_share == 0.5
    assert scenario.scaling.overhead == 0.0
    assert (scenario.elasticity.share, scenario.elasticity.mixing_share) == (0.5, 0.0)
    preemption = scenario.preemption
    assert (preemption.checkpoint_grace_s, preemption.saves_on_signal) == (60, False)
    assert (preemption.restart_cost_s, preemption.resize_cost_s, preemption.checkpoint_interval_s) == (60, 20, 1800)
    assert (scenario.scheduler.decision_interval_s, scenario.scheduler.migration) == (30, True)
    assert scenario.durations.knowledge is DurationKnowledge.NOISY
    assert scenario.calibration.training_usage == 0.72


def test_fields_left_out_take_the_documented_defaults() -> None:
    scenario = parse_scenario(POOLS)
    assert scenario.speed == {"V100": 1.0, "T4": 0.4}
    assert scenario.speed_of("A100") == 1.0  # a type not listed runs at its family's default in the core's catalogue
    assert scenario.speed_of("P100") == 0.5
    assert scenario.speed_of("Z9") == 1.0  # an unknown family at the reference speed
    assert (scenario.loaning.lend_hysteresis_s, scenario.loaning.drain_s) == (1800, 30)
    assert scenario.memory.inference_fit_share == 0.5
    assert (scenario.preemption.checkpoint_grace_s, scenario.preemption.saves_on_signal) == (60, False)
    assert scenario.scheduler.migration is True


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("training: {servers: 0}\ninference: {servers: 1, req_per_server: 1}", "training.groups.0.servers"),
        ("training: {servers: 1}\ninference: {servers: 1}", "inference.req_per_server"),
        (POOLS + "elasticity: {share: 2}", "elasticity.share"),
        ("training: {servers: 1, colour: red}\ninference: {servers: 1, req_per_server: 1}", "training.colour"),
        (POOLS + "speed: {T4: 0}", "speed.T4"),
        (POOLS + "loaning: {lend_hysteresis_s: -1}", "loaning.lend_hysteresis_s"),
        (POOLS + "loaning: {drain_s: -5}", "loaning.drain_s"),
        (POOLS + "loaning: {drain_s: soon}", "loaning.drain_s"),
        (POOLS + "loaning: {lend_every_s: 5}", "loaning.lend_every_s"),
        (POOLS + "memory: {inference_fit_share: 1.5}", "memory.inference_fit_share"),
        (POOLS + "memory: {inference_fit_share: -0.1}", "memory.inference_fit_share"),
        (POOLS + "memory: {gib: 16}", "memory.gib"),
        (POOLS + "scaling: {overhead: 1.5}", "scaling.overhead"),
        (POOLS + "scaling: {overhead: -0.01}", "scaling.overhead"),
        (POOLS + "elasticity: {mixing_share: 2}", "elasticity.mixing_share"),
        (POOLS + "elasticity: {mixing_share: -1}", "elasticity.mixing_share"),
        (POOLS + "preemption: {checkpoint_grace_s: -1}", "preemption.checkpoint_grace_s"),
        (POOLS + "preemption: {saves_on_signal: perhaps}", "preemption.saves_on_signal"),
        (POOLS + "scheduler: {migration: sometimes}", "scheduler.migration"),
        (POOLS + "scheduler: {decision_interval_s: -30}", "scheduler.decision_interval_s"),
        # Infinite (or longer than a week): the simulation never ended.
        (POOLS + "scheduler: {decision_interval_s: .inf}", "scheduler.decision_interval_s"),
        (POOLS + "scheduler: {decision_delay_s: 1e30}", "scheduler.decision_delay_s"),
        (POOLS + "scheduler: {decision_delay_s: -1}", "scheduler.decision_delay_s"),
        (POOLS + "scheduler: {rebalance_interval_s: 604801}", "scheduler.rebalance_interval_s"),
        (POOLS + "scheduler: {whole_cluster_jobs: -1}", "scheduler.whole_cluster_jobs"),
        (POOLS + "preemption: {start_cost_s: .inf}", "preemption.start_cost_s"),
        (POOLS + "preemption: {start_cost_s: -1}", "preemption.start_cost_s"),
        (POOLS + "preemption: {resize_cost_s: 1e30}", "preemption.resize_cost_s"),
        (POOLS + "preemption: {rendezvous: {last_call_s: -1}}", "preemption.rendezvous.last_call_s"),
        (POOLS + "preemption: {rendezvous: {leave_detection_s: .inf}}", "preemption.rendezvous.leave_detection_s"),
        (POOLS + "preemption: {rendezvous: {last_call: 30}}", "preemption.rendezvous.last_call"),
        (POOLS + "preemption: {restart_cost_s: 2e9}", "preemption.restart_cost_s"),
        (POOLS + "preemption: {checkpoint_grace_s: .inf}", "preemption.checkpoint_grace_s"),
        ("training: {groups: [{gpu_type: A100}]}\n" + POOLS.split("\n")[1], "training.groups.0.servers"),
        ("training: {groups: [{servers: 2}]}\n" + POOLS.split("\n")[1], "training.groups.0.gpu_type"),
        (
            "training: {groups: [{gpu_type: A100, servers: 1, gpus_per_server: 0}]}\n" + POOLS.split("\n")[1],
            "training.groups.0.gpus_per_server",
        ),
        (
            "training: {groups: [{gpu_type: A100, servers: 1, zone: b}]}\n" + POOLS.split("\n")[1],
            "training.groups.0.zone",
        ),
        ("training: {groups: []}\n" + POOLS.split("\n")[1], "groups is empty"),
        (
            "training: {servers: 2, groups: [{gpu_type: A100, servers: 1}]}\n" + POOLS.split("\n")[1],
            "give either groups or servers, gpus_per_server, gpu_type (one group), not both",
        ),
        (
            "training: {servers: 1}\ninference: {req_per_server: 1, groups: [{gpu_type: T4, servers: 1}, "
            "{gpu_type: T4, servers: 2}]}",
            "GPU type T4 has two groups",
        ),
    ],
)
def test_a_bad_field_is_named(text: str, field: str) -> None:
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text, "s.yaml")
    assert str(error.value).startswith("s.yaml: ")
    assert field in str(error.value)


def test_not_a_mapping_and_bad_yaml() -> None:
    with pytest.raises(ScenarioError, match="must be a mapping"):
        parse_scenario("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        parse_scenario("training: [\n")


def test_a_pool_of_several_groups_and_the_one_group_form_read_alike() -> None:
    one = parse_scenario("training: {servers: 3, gpu_type: A100}\ninference: {servers: 2, req_per_server: 9}")
    grouped = parse_scenario(
        "training: {groups: [{gpu_type: A100, servers: 3}]}\n"
        "inference: {groups: [{gpu_type: T4, servers: 2}], req_per_server: 9}"
    )
    assert one == grouped
    three = parse_scenario(
        "training: {groups: [{gpu_type: V100, servers: 3}, {gpu_type: A100, servers: 2, gpus_per_server: 4}]}\n"
        "inference: {groups: [{gpu_type: T4, servers: 20, gpus_per_server: 1}], req_per_server: 9, "
        "headroom_share: 0.05}"
    )
    assert three.training.describe() == "3 x 8 V100 + 2 x 4 A100"
    assert (three.training.servers, three.training.gpus, three.training.gpu_types) == (5, 32, ("A100", "V100"))
    assert three.gpu_types == ("A100", "T4", "V100")
    assert three.inference.headroom_servers == 1
    with pytest.raises(ValueError, match="only a pool of one server group can be resized"):
        three.with_sizes(training_servers=4, inference_servers=4, req_per_server=1.0)


@pytest.mark.parametrize("name", sorted(p.name for p in SHIPPED.glob("*.yaml")))
def test_every_shipped_scenario_reads(name: str) -> None:
    scenario = load_scenario(SHIPPED / name)
    assert scenario.training.servers >= 1
    assert scenario.inference.servers >= 1


def test_the_three_types_example_has_its_groups() -> None:
    scenario = load_scenario(SHIPPED / "three-types.yaml")
    assert scenario.training.describe() == "16 x 8 A100 + 48 x 8 V100"
    assert scenario.inference.describe() == "216 x 4 T4"
    assert [scenario.speed_of(t) for t in scenario.gpu_types] == [1.5, 0.4, 1.0]
