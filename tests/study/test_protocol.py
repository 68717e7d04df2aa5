"""One cell's protocol walked over fake trials whose curves follow from their points: the
search, the trials beyond an edge, the doubled budget, the confirmations, and a study killed
after every trial and started again ending as one never stopped."""

import math

import pytest

from keras_largebatch.study import config as config_lib
from keras_largebatch.study import ledger, measures, protocol, search, sobol
from keras_largebatch.study.runner import run_study
from tests.study import fake_trials
from tests.support.fashion_mnist_files import write_fashion_mnist
from tests.support.runs import ROOT


@pytest.fixture
def config():
    # Budgets: 768 / 16 = 48 steps, and the floor of 6 steps... 768 / 64 = 12.
    return config_lib.preset(
        "tiny", trials_per_cell=4, extension_trials=2, seeds=3, evaluations_per_budget=12
    )


def walk(config, optimizer, batch_size=16):
    """Runs the cell to its end with the fake trials; returns its progress and the keys in
    the order they ran."""
    rows, order = {}, []
    while True:
        progress = protocol.walk_cell(config, optimizer, batch_size, rows)
        if not progress.pending:
            return progress, order
        for trial in progress.pending:
            rows[trial.key()] = fake_trials.run_trial(trial, config)
            order.append(trial.key())


def test_the_search_is_the_same_sobol_points_at_every_batch_size(config):
    points = sobol.sobol_points(4, search.DIMENSIONS, seed=config.search_seed)
    for batch_size in (16, 64):
        trials = protocol.search_trials(config, "lamb", batch_size, 48)
        assert [t.point for t in trials] == [tuple(p) for p in points]
        assert {t.phase for t in trials} == {"search"} and {t.seed for t in trials} == {0}
    assert trials[0].key() == "lamb/64/48/search/0/0"


def test_a_best_point_at_an_edge_gets_trials_beyond_it_and_is_flagged(config):
    progress, order = walk(config, "adamw")
    points = sobol.sobol_points(4, search.DIMENSIONS, seed=config.search_seed)
    first_best = min(range(4), key=lambda i: points[i][0])  # adamw is faster at low rates
    assert points[first_best][0] < search.EDGE
    assert order[:4] == [f"adamw/16/48/search/{i}/0" for i in range(4)]
    assert order[4:6] == ["adamw/16/48/extension/0/0", "adamw/16/48/extension/1/0"]
    assert order[6:] == [f"adamw/16/48/confirmation/0/{seed}" for seed in range(3)]
    assert progress.edges == [("learning_rate", "low")]
    # The farthest trial beyond the edge is the fastest: the best lies beyond the range.
    assert progress.best["key"] == "adamw/16/48/extension/1/0"
    assert progress.best["point"][0] == -search.EXTENSION
    assert progress.best_beyond_range and not progress.budget_doubled
    assert [row["point"] for row in progress.confirmations] == [progress.best["point"]] * 3
    assert len(progress.search_rows) == 6


def test_a_best_trial_past_80_percent_of_its_budget_doubles_it_once(config):
    progress, order = walk(config, "lamb")
    # 0.2 is reached at 90% of the first budget of 48 steps, at 45% of the doubled one.
    assert progress.budget_doubled and progress.step_budget == 96
    assert [key for key in order if "/48/" in key] == [f"lamb/16/48/search/{i}/0" for i in range(4)]
    assert order[-3:] == [f"lamb/16/96/confirmation/0/{seed}" for seed in range(3)]
    assert {row["step_budget"] for row in progress.search_rows} == {96}
    assert protocol.needs_more_budget(progress.best, 0.2, 48)
    assert not protocol.needs_more_budget(progress.best, 0.2, 96)


@pytest.mark.parametrize("budget", [300, 513, 1026, 2051, 4102, 8204])
def test_the_evaluation_at_80_percent_of_any_budget_is_within_it(budget):
    # The 32nd of 40 evaluations is at 80% of the budget rounded up to a step, as the
    # threshold is: reaching the target there never doubles the budget, one evaluation
    # later always does, whether or not 80% of the budget is a whole number of steps.
    steps = measures.evaluation_steps(budget, 40)
    assert protocol.rerun_threshold(budget) == steps[31]
    at, after = ({"curve": [(step, 0.9, 0.3)]} for step in steps[31:33])
    assert not protocol.needs_more_budget(at, 0.87, budget)
    assert protocol.needs_more_budget(after, 0.87, budget)


def test_the_best_trial_is_the_fastest_to_the_primary_target(config):
    def row(curve, index):
        return {"curve": curve, "index": index}

    rows = [
        row([(10, 0.1, 1.0), (20, 0.25, 1.0)], 0),  # 0.2 at 20
        row([(10, 0.2, 1.0), (20, 0.15, 1.0)], 1),  # 0.2 at 10: the best
        row([(10, 0.2, 1.0)], 2),  # as fast, but later in the order
        row([(10, 0.19, 1.0)], 3),  # not reached
    ]
    assert protocol.best_row(rows, 0.2)["index"] == 1
    # Among trials that do not reach the target, the most accurate.
    assert protocol.best_row([rows[3], row([(10, 0.18, 1.0)], 4)], 0.2)["index"] == 3
    assert protocol.rank(rows[3], 0.2) == (math.inf, -0.19)


def test_diverged_trials_lose_to_any_that_trained(config):
    progress, _ = walk(config, "sgd_momentum")
    diverged = [row for row in progress.search_rows if row["stop"] == "diverged"]
    assert diverged and progress.best["stop"] != "diverged"


def test_a_ledger_from_another_search_is_refused(config):
    rows = {}
    trial = protocol.search_trials(config, "lars", 16, 48)[0]
    rows[trial.key()] = dict(fake_trials.run_trial(trial, config), point=(0.5,) * 5)
    with pytest.raises(protocol.PlanMismatch, match=r"lars/16/48/search/0/0 ran at point"):
        protocol.walk_cell(config, "lars", 16, rows)
    # The same point, but the ranges it maps to have changed.
    row = fake_trials.run_trial(trial, config)
    rows[trial.key()] = dict(row, settings=dict(row["settings"], layerwise_rate=0.5))
    with pytest.raises(protocol.PlanMismatch, match=r"ran at settings .*layerwise_rate': 0.5"):
        protocol.walk_cell(config, "lars", 16, rows)
    assert issubclass(protocol.PlanMismatch, ledger.LedgerError)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fashion_mnist")
    write_fashion_mnist(directory, num_train=256, num_test=100)
    return str(directory)


def test_a_study_killed_after_every_trial_ends_as_one_never_stopped(config, data_dir, tmp_path):
    config = config_lib.preset(
        "tiny",
        data_dir=data_dir,
        trials_per_cell=4,
        extension_trials=2,
        seeds=2,
        evaluations_per_budget=12,
    )
    reference = run_study(config, str(tmp_path / "once"), run_trial=fake_trials.run_trial)
    expected = [row["key"] for row in reference.rows]
    assert reference.trials_trained == len(expected) > 40

    class Killed(Exception):
        pass

    calls = 0
    while True:
        trained = []

        def one_then_kill(trial, *arguments):
            if trained:
                raise Killed
            trained.append(trial.key())
            return fake_trials.run_trial(trial, *arguments)

        calls += 1
        try:
            outcome = run_study(config, str(tmp_path / "killed"), run_trial=one_then_kill)
            break
        except Killed:
            assert [row["key"] for row in ledger.read_rows(tmp_path / "killed")] == (
                expected[:calls]
            )
    assert calls == len(expected) and outcome.trials_skipped == len(expected) - 1
    assert [row["key"] for row in outcome.rows] == expected
    summary = (tmp_path / "killed" / "summary.md").read_text()
    assert summary == (tmp_path / "once" / "summary.md").read_text()


def test_the_full_runs_seed_0_repeats_the_selected_trial_in_every_cell():
    # Seed 0 of a cell's confirmations trains the selected trial's settings with the search's
    # seed, 0: the same run again, its curve the search trial's up to where that one stopped
    # (at the last target) and then on to the budget's end. Seed 0 of the committed ledger is
    # not a fresh seed, and the study's page says so.
    output_dir = ROOT / "docs" / "guides" / "study-full"
    settings = ledger.read_settings(output_dir)
    settings.pop("validation_split")
    full = config_lib.StudyConfig(**settings).validate()
    rows_by_key = {row["key"]: row for row in ledger.read_rows(output_dir)}
    repeated = []
    for batch_size in full.batch_sizes:
        for optimizer in full.optimizers:
            progress = protocol.walk_cell(full, optimizer, batch_size, rows_by_key)
            seed_0 = progress.confirmations[0]
            assert seed_0["seed"] == 0 and seed_0["step_budget"] == progress.best["step_budget"]
            selected = progress.best["curve"]
            repeated.append(seed_0["curve"][: len(selected)] == selected)
    assert len(repeated) == 28 and all(repeated)
