from __future__ import annotations

import pytest

from lyra.sim.scenario import DurationKnowledge, ScenarioError, load_scenario, parse_scenario


def test_the_shipped_default_is_valid_and_documented_values_hold() -> None:
    scenario = load_scenario()
    assert scenario.training.gpu_type == "V100"
    assert scenario.inference.gpu_type == "T4"
    assert scenario.speed_of("T4") == 0.5
    assert scenario.durations.knowledge is DurationKnowledge.NOISY
    assert scenario.calibration.training_usage == 0.72


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("training: {servers: 0}\ninference: {servers: 1, req_per_server: 1}", "training.servers"),
        ("training: {servers: 1}\ninference: {servers: 1}", "inference.req_per_server"),
        ("training: {servers: 1}\ninference: {servers: 1, req_per_server: 1}\nelasticity: {share: 2}", "share"),
        ("training: {servers: 1, colour: red}\ninference: {servers: 1, req_per_server: 1}", "training.colour"),
        ("training: {servers: 1}\ninference: {servers: 1, req_per_server: 1}\nspeed: {T4: 0}", "speed.T4"),
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
