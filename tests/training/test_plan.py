"""The run's plan: the config resolved once for the replicas, the config itself left as it was."""

import copy
import dataclasses

import pytest

from keras_largebatch.training import plan
from tests.support.toy_recipe import load


def _config(*overrides):
    return load(
        "unused",
        "phases.0.global_batch_size=96",
        "phases.0.max_per_replica_batch_size=5",
        "phases.1.global_batch_size=16",
        "phases.1.gradient_accumulation_steps=2",
        *overrides,
    )


def test_each_phase_is_resolved_for_the_replicas():
    # Phase 0: 96 on 8 replicas, at most 5 each: 12 and 6 are too many, 96 = 8 x 4 x 3.
    # Phase 1: 16 examples in 2 given micro-batches of 8, on 8 replicas: 1 example each.
    first, second = plan.plan_run(_config(), 8).phases
    assert (first.index, first.number, first.key, first.is_last) == (0, 1, "phases.0", False)
    assert (first.global_batch_size, first.steps, first.first_global_step) == (96, 6, 0)
    assert (first.num_replicas, first.gradient_accumulation_steps) == (8, 3)
    assert (first.micro_batch_size, first.per_replica_batch_size) == (32, 4)
    assert first.describe_split() == (
        "global batch 96 = 8 replicas x 4 examples x 3 accumulation steps"
    )
    assert (second.number, second.is_last, second.first_global_step) == (2, True, 6)
    assert (second.micro_batch_size, second.per_replica_batch_size) == (8, 1)
    assert second.describe_split() == (
        "global batch 16 = 8 replicas x 1 example x 2 accumulation steps"
    )
    assert second.settings.learning_rate == 0.05  # the recipe's own field


def test_the_config_is_not_changed_and_the_record_holds_the_resolved_split():
    config = _config()
    before = copy.deepcopy(config.to_dict())
    run_plan = plan.plan_run(config, 8)
    assert config.to_dict() == before
    assert config.phases[0].gradient_accumulation_steps is None
    assert [p["gradient_accumulation_steps"] for p in run_plan.record["phases"]] == [3, 2]
    assert run_plan.total_steps == 12 and run_plan.num_replicas == 8
    # The phases hold copies: changing the config afterwards changes no plan.
    config.phases[0].steps = 100
    assert run_plan.phases[0].steps == 6


def test_a_plan_is_frozen():
    phase = plan.plan_run(_config(), 8).phases[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        phase.gradient_accumulation_steps = 1


def test_a_derived_accumulation_is_checked_against_the_config():
    # log_interval 2 x k = 3 micro-batches is not a whole number of 4-step executions.
    with pytest.raises(
        ValueError,
        match=r"steps_per_execution=4 must divide log_interval x "
        r"phases.0.gradient_accumulation_steps = 6",
    ):
        plan.plan_run(_config("steps_per_execution=4", "phases.1.gradient_accumulation_steps=4"), 8)


def test_a_config_changed_in_python_cannot_plan_another_batch_than_it_names():
    # Checked at load too; a config changed afterwards is checked again by the plan.
    config = _config()
    config.phases[1].gradient_accumulation_steps = 3  # 16 examples in 3 micro-batches, on 1 replica
    with pytest.raises(
        ValueError,
        match=r"phases.1.global_batch_size=16 must be divisible by "
        r"phases.1.gradient_accumulation_steps=3",
    ):
        plan.plan_run(config, 1)


def test_the_input_pipelines_split_over_the_processes_and_divide_the_micro_batches():
    # Micro-batches of 4 and 4 examples (8 / 2 micro-batches, 4 / 1).
    config = load("unused", "phases.0.gradient_accumulation_steps=2")
    config.strategy.input_pipelines = 3  # the JAX key; a TensorFlow config refuses it at load
    with pytest.raises(
        ValueError,
        match=r"strategy.input_pipelines=3 must be a multiple of the 2 processes of the run",
    ):
        plan.plan_run(config, 2, input_pipelines=3, num_processes=2)
    config.strategy.input_pipelines = 8
    with pytest.raises(
        ValueError,
        match=r"phases.0.global_batch_size=8 / gradient_accumulation_steps=2 = 4 examples per "
        r"micro-batch must be divisible by strategy.input_pipelines=8",
    ):
        plan.plan_run(config, 2, input_pipelines=8, num_processes=2)


def test_the_record_holds_the_input_pipelines_and_not_where_the_processes_meet():
    config = load("unused", "phases.0.gradient_accumulation_steps=2")
    config.strategy.num_processes, config.strategy.process_id = 2, 1
    two = plan.plan_run(config, 2, input_pipelines=2, num_processes=2).record["strategy"]
    assert two["input_pipelines"] == 2
    assert not set(two) & {"multi_host", "coordinator_address", "num_processes", "process_id"}
    # One pipeline records null, as runs recorded before the key existed.
    assert plan.plan_run(config, 1, input_pipelines=1).record["strategy"]["input_pipelines"] is None
    assert plan.plan_run(config, 1).record["strategy"]["input_pipelines"] is None
    assert plan.run_record(config)["strategy"] == {
        key: value for key, value in two.items() if key != "input_pipelines"
    } | {"input_pipelines": None}
