"""Whether a run is a group of processes, and where they meet: from the strategy's keys or
Keras's KERAS_DISTRIBUTION_* variables (the group itself: tests/training/test_multi_host.py)."""

import pytest

from keras_largebatch.training.config import StrategyConfig
from keras_largebatch.training.process_group import process_group_settings

ENVIRONMENT = {
    "KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:1234,10.0.0.2:2345",
    "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
    "KERAS_DISTRIBUTION_PROCESS_ID": "1",
}


def _strategy(**settings):
    return StrategyConfig(name="data_parallel", **settings)


def test_one_process_unless_a_group_is_named():
    assert process_group_settings(_strategy(), environ={}) is None
    assert process_group_settings(_strategy(multi_host=False), environ=ENVIRONMENT) is None


def test_keras_variables_name_the_group_and_the_first_address_is_the_coordinator():
    assert process_group_settings(_strategy(), environ=ENVIRONMENT) == {
        "coordinator_address": "10.0.0.1:1234",
        "num_processes": 2,
        "process_id": 1,
    }


def test_a_key_wins_over_its_variable():
    strategy = _strategy(coordinator_address="10.0.0.9:99", process_id=0)
    assert process_group_settings(strategy, environ=ENVIRONMENT) == {
        "coordinator_address": "10.0.0.9:99",
        "num_processes": 2,
        "process_id": 0,
    }


def test_multi_host_leaves_what_is_not_named_to_jax():
    assert process_group_settings(_strategy(multi_host=True), environ={}) == {
        "coordinator_address": None,
        "num_processes": None,
        "process_id": None,
    }


@pytest.mark.parametrize(
    "environ, message",
    [
        (
            {"KERAS_DISTRIBUTION_NUM_PROCESSES": "2"},
            r"a process group needs strategy.coordinator_address, num_processes and process_id "
            r".*got \{'num_processes': 2\} without \['coordinator_address', 'process_id'\].*"
            r"strategy.multi_host=true",
        ),
        (
            dict(ENVIRONMENT, KERAS_DISTRIBUTION_PROCESS_ID="one"),
            r"KERAS_DISTRIBUTION_PROCESS_ID must be an integer, got 'one'",
        ),
        (
            dict(ENVIRONMENT, KERAS_DISTRIBUTION_NUM_PROCESSES="3"),
            r"KERAS_DISTRIBUTION_JOB_ADDRESSES='10.0.0.1:1234,10.0.0.2:2345' names 2 jobs, but "
            r"the run has num_processes=3",
        ),
    ],
)
def test_an_incomplete_or_inconsistent_group_is_refused(environ, message):
    with pytest.raises(ValueError, match=message):
        process_group_settings(_strategy(), environ=environ)
