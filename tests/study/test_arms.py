"""The second edition's protocol, pilot, fit and verdict, on a fake workload whose steps to
the target are known (McCandlish et al.'s model with a known B_crit), so every decision can
be checked against the numbers that made it; then arm A end to end on its tiny preset."""

import math
import os

import numpy as np
import pytest

from keras_largebatch.study import criteria, ledger
from keras_largebatch.study.arms import (
    analysis,
    estimate,
    measures,
    noise_scale,
    plots,
    protocol,
    report,
    runner,
)
from keras_largebatch.study.arms.config import ArmConfig, preset
from keras_largebatch.study.arms.spaces import OPTIMIZERS
from tests.support.fashion_mnist_files import write_fashion_mnist

CRITICAL = 256
MINIMUM_STEPS = 100


class _Data:
    fingerprint = "fake"
    train_examples = 100_000


class FakeWorkload:
    metric = "accuracy"
    decay_exclusions = ()
    divergence_loss = 10.0

    def settings(self):
        return {"workload": "fake"}

    def load(self):
        return _Data()


def fake_steps(trial, speedups):
    """The steps a trial needs: S(B) = S_min (1 + B_crit / B), times a penalty for a rate
    away from its range's centre (the best rate), divided by the optimizer's speed-up, times
    a seed's noise (seed 0: none)."""
    spec = OPTIMIZERS[trial.optimizer]
    centre = spec.rate_dimension(trial.batch_size)
    best = math.sqrt(centre.low * centre.high)
    penalty = math.exp(abs(math.log10(trial.settings["learning_rate"] / best)))
    noise = 1.0 if trial.seed == 0 else math.exp(0.03 * np.random.default_rng(trial.seed).normal())
    ideal = MINIMUM_STEPS * (1 + CRITICAL / trial.batch_size)
    return ideal * penalty * noise / speedups.get(trial.optimizer, 1.0)


def fake_trainer(speedups=None, calls=None):
    speedups = speedups or {}

    def run_trial(trial, config, workload, data):
        if calls is not None:
            calls.append(trial)
        needed = fake_steps(trial, speedups)
        curve, stop = [], "budget"
        steps = measures.evaluation_steps(
            trial.step_budget, config.evaluation_growth, config.first_evaluation
        )
        if trial.stop_after is not None:
            steps = sorted({s for s in steps if s < trial.stop_after} | {trial.stop_after})
        for step in steps:
            accuracy = 0.95 if step >= needed else 0.5
            curve.append((step, accuracy, 0.3))
            if accuracy >= config.target:
                stop = "target"
                break
        else:
            if trial.stop_after is not None:
                stop = "pruned"
        test = {"accuracy": 0.9, "loss": 0.3} if trial.phase == protocol.SEEDS else None
        return trial.row(curve[-1][0], stop, curve, test, seconds=36.0)  # 0.01 h each

    return run_trial


def fake_config(**overrides):
    fields = dict(
        target=0.9,
        pilot_batch_sizes=[64, 256, 1024, 4096],
        multiples=[0.5, 2, 8, 32],
        budget_examples=2_000_000,
        min_steps=2000,
        search_trials=4,
        refinement_trials=2,
        seeds=5,
        pilot_seeds=3,
        evaluation_growth=1.04,
        bootstrap_samples=200,
    )
    fields.update(overrides)
    return ArmConfig(**fields).validate()


def run(config, output_dir, speedups=None, calls=None, **keywords):
    return runner.run_arm(
        config,
        str(output_dir),
        run_trial=fake_trainer(speedups, calls),
        workload=FakeWorkload(),
        noise=False,
        **keywords,
    )


@pytest.fixture(scope="module")
def equal_arm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("equal")
    calls = []
    outcome = run(fake_config(), directory, calls=calls)
    return outcome, directory, calls


def test_the_pilot_finds_the_critical_batch_size_and_sets_the_batch_sizes(equal_arm):
    outcome, _, _ = equal_arm
    fit = outcome.state.fit
    # The steps are known to within the evaluation grid's 4%.
    assert fit.critical_batch_size == pytest.approx(CRITICAL, rel=0.1)
    assert fit.low <= fit.critical_batch_size <= fit.high
    expected = sorted({2 ** round(math.log2(m * fit.critical_batch_size)) for m in (0.5, 2, 8, 32)})
    assert outcome.state.batch_sizes == expected == [128, 512, 2048, 8192]
    assert outcome.state.batch_note == "fitted"


def test_identical_optimizers_tie_and_twice_as_fast_is_found_faster(equal_arm, tmp_path):
    outcome, _, _ = equal_arm
    config = fake_config()
    _, by_outcome, _ = analysis.verdict(config, outcome.state, "accuracy")
    assert by_outcome[criteria.TIE] == outcome.state.batch_sizes
    faster = run(config, tmp_path, speedups={"lars": 2.0})
    ratios, by_outcome, _ = analysis.verdict(config, faster.state, "accuracy")
    assert by_outcome[criteria.LAYERWISE_FASTER] == faster.state.batch_sizes
    for ratio in ratios.values():
        assert ratio.ratio == pytest.approx(0.5, rel=0.06)
    slower = run(config, tmp_path / "slower", speedups={"nesterov": 2.0})
    _, by_outcome, _ = analysis.verdict(config, slower.state, "accuracy")
    assert by_outcome[criteria.BASELINE_FASTER] == slower.state.batch_sizes


def test_a_trial_behind_the_best_stops_where_the_best_reached_the_target(equal_arm):
    outcome, _, calls = equal_arm
    config = fake_config()
    for cell in outcome.state.pilot + outcome.state.main:
        best = math.inf
        for row, trial in zip(
            cell.trial_rows, [c for c in calls if c.key() in {r["key"] for r in cell.trial_rows}]
        ):
            assert trial.stop_after == (None if best == math.inf else best)
            reached = measures.steps_to_target(row["curve"], config.target, "accuracy")
            if reached is not None:
                best = min(best, reached)
            else:
                assert row["stop"] == "pruned"
                assert row["steps_trained"] == trial.stop_after


def test_seeds_are_fresh_and_run_the_best_settings(equal_arm):
    outcome, _, _ = equal_arm
    for cell in outcome.state.main:
        assert [row["seed"] for row in cell.seed_rows] == [1, 2, 3, 4, 5]
        for row in cell.seed_rows:
            assert row["point"] == cell.best["point"]
        assert all(row["seed"] == 0 for row in cell.trial_rows)
    for cell in outcome.state.pilot:
        assert [row["seed"] for row in cell.seed_rows] == [1, 2, 3]


def test_main_cells_on_the_pilot_s_grid_continue_the_baseline_s_pilot_cells(
    equal_arm, tmp_path, monkeypatch
):
    config = fake_config(multiples=[0.6, 3, 12], main_grid=4, max_batch_size=1024, reuse_pilot=True)
    calls = []
    outcome = run(config, tmp_path, calls=calls)
    state = outcome.state
    # B_crit (about 256) times 0.6, 3 and 12 on the pilot's grid (64 times a power of 4;
    # powers of 2 would give 128 first), the last above max_batch_size.
    assert state.batch_sizes == [256, 1024]
    assert state.batch_note == "fitted; 4,096 left out, above max_batch_size 1,024"
    pilot = {cell.batch_size: cell for cell in state.pilot}
    ran = {trial.key() for trial in calls}
    for cell in state.main:
        if cell.optimizer == "lars":
            assert all(row["key"].startswith("main/") for row in cell.trial_rows)
            continue
        # The baseline's cell continues its pilot cell's search there, with 5 fresh seeds.
        before = pilot[cell.batch_size]
        assert [r["key"] for r in cell.trial_rows] == [r["key"] for r in before.trial_rows]
        assert cell.best is before.best
        assert [row["seed"] for row in cell.seed_rows] == [4, 5, 6, 7, 8]
        assert all(row["key"].startswith("main/") for row in cell.seed_rows)
        assert {row["key"] for row in cell.seed_rows} <= ran
        assert all(row["point"] == before.best["point"] for row in cell.seed_rows)
    # The same steps as without the reuse (the fake trainer is deterministic): still a tie.
    _, by_outcome, _ = analysis.verdict(config, state, "accuracy")
    assert by_outcome[criteria.TIE] == [256, 1024]
    # What ran: the pilot's 4 cells of 9 trials, LARS's 2 cells of 11, Nesterov's 5 seeds at
    # each of its 2 batch sizes.
    assert len(calls) == 4 * 9 + 2 * 11 + 2 * 5
    summary = (tmp_path / "summary.md").read_text()
    assert (
        "Nesterov's main cells at 256, 1,024 continue its pilot cells there: their search and "
        "refinement are the pilot's trials; their 5 seeds are fresh (4 to 8)."
    ) in summary
    assert "| Nesterov (the pilot's search) | 256 |" in summary
    # A continued cell's search is counted once, in the pilot's cost.
    assert (
        "Cost: 68 trials, 0.7 h of trials' wall time (the pilot 0.4 h, the main cells 0.3 h)."
        in summary
    )
    # The search plot: a panel per batch size of the pilot and the main cells; a continued
    # pilot cell is drawn once, as the main cell that continues it.
    figures = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: figures.append(figure))
    plots.plot_search(config, state, "accuracy", "unused.png")
    panels = {axes.get_title(): axes for axes in figures[0].axes}
    assert list(panels) == ["batch 64", "batch 256", "batch 1,024", "batch 4,096"]
    labels = {
        title: [(line.get_label(), line.get_linestyle()) for line in axes.get_lines()[:-1]]
        for title, axes in panels.items()
    }
    assert labels["batch 64"] == labels["batch 4,096"] == [("Nesterov (pilot)", ":")]
    assert labels["batch 256"] == [("LARS", "-"), ("Nesterov (the pilot's search)", "-")]
    critical = state.fit.critical_batch_size
    assert (
        "Main batch sizes: 256, 1,024 (fitted; 4,096 left out, above max_batch_size 1,024; "
        f"B / B_crit {256 / critical:.2g}, {1024 / critical:.2g})."
    ) in summary


@pytest.mark.parametrize(
    "critical, grid, expected, note",
    [
        # Fitted: the nearest point of the grid in log scale.
        (300.0, 2, [128, 512, 2048], "fitted"),
        (300.0, 4, [128, 512, 2048], "fitted"),
        (700.0, 4, [512, 2048], "fitted; 8,192 left out, above max_batch_size 4,096"),
        # Below the pilot's smallest, a grid of 2 halves it: still whole batch sizes.
        (40.0, 2, [16, 64, 256], "fitted"),
        # B_crit taken at a pilot's edge sits between two points of a grid of 4: halves up.
        (10.0, 4, [32, 128, 512], "B_crit below the pilot's smallest batch size: taken as that"),
        (None, 4, [2048], "fewer than two batch sizes"),
        (math.inf, 4, [2048], "perfect scaling over the whole pilot"),
        (9000.0, 4, [2048], "B_crit above the pilot's largest batch size: taken as that"),
    ],
)
def test_main_batch_sizes_round_to_the_grid_and_say_where_b_crit_came_from(
    critical, grid, expected, note
):
    config = fake_config(
        pilot_batch_sizes=[32, 128, 512, 2048],
        multiples=[0.5, 2, 8],
        main_grid=grid,
        max_batch_size=4096,
    )
    fit = None
    if critical is not None:
        fit = analysis.PilotFit((32, 2048), (1.0, 1.0), 100.0, critical, critical, critical)
    sizes, said = analysis.main_batch_sizes(config, fit, 100_000)
    assert sizes == expected and all(type(size) is int for size in sizes)
    assert note in said


def test_the_report_gives_multiples_of_b_crit_only_for_a_fitted_one():
    config = fake_config(pilot_batch_sizes=[32, 128, 512, 2048], multiples=[0.5, 2, 8])
    for critical, expected in ((0.0, "taken as that)."), (300.0, "(fitted; B / B_crit 0.43,")):
        fit = analysis.PilotFit((32, 2048), (1.0, 1.0), 100.0, critical, critical, critical)
        sizes, note = analysis.main_batch_sizes(config, fit, 100_000)
        state = analysis.ArmState([], fit, sizes, note, [])
        assert expected in report.markdown(config, state, "accuracy")


def test_the_estimate_counts_the_main_trials_the_protocol_runs():
    speed = ({256: 100.0, 512: 200.0}, {256: 2.0, 512: 3.0}, 0.5)
    fit = analysis.PilotFit((64, 1024), (500.0, 125.0), 100.0, 256.0, 200.0, 300.0)
    # S(B) = 100 (1 + 256 / B): 200 steps at 256, 150 at 512, each with its evaluations.
    evaluations = {s: len(measures.evaluation_steps(s, 1.04, 5)) for s in (200, 150)}
    at_256 = 200 * 256 / 100 + evaluations[200] * 0.5 + 2.0
    at_512 = 150 * 512 / 200 + evaluations[150] * 0.5 + 3.0
    assert estimate.trial_seconds(fake_config(), speed, 256, 200) == pytest.approx(at_256)
    # Both optimizers' cells: 4 search, 2 refinement and 5 seed trials each.
    trials, seconds = estimate.main_cost(fake_config(), speed, fit, [256, 512])
    assert (trials, seconds) == (44, pytest.approx(22 * at_256 + 22 * at_512))
    # Reused, the baseline's cell at the pilot's 256 runs only its 5 seeds; 512 is not a
    # pilot batch size.
    trials, seconds = estimate.main_cost(fake_config(reuse_pilot=True), speed, fit, [256, 512])
    assert (trials, seconds) == (38, pytest.approx(16 * at_256 + 22 * at_512))


def test_the_rate_range_is_centred_by_the_scaling_rule():
    lars, nesterov = OPTIMIZERS["lars"], OPTIMIZERS["nesterov"]
    for spec, exponent in ((lars, 0.5), (nesterov, 1.0)):
        small, large = spec.rate_dimension(256), spec.rate_dimension(256 * 16)
        assert large.low / small.low == pytest.approx(16**exponent)
        assert large.high / large.low == pytest.approx(1000)


def test_refinement_stays_near_the_best_point_and_inside_natural_ends():
    config = fake_config(refinement_trials=8, refinement_width=0.125)
    best = (0.5, 0.98, 0.01, 0.3, 0.7)
    points = protocol.refinement_points(config, "lars", 256, best)
    assert len(points) == 8
    for point in points:
        assert abs(point[0] - 0.5) <= 0.125
        assert 0.98 - 0.125 <= point[1] <= 1.0  # 1 - momentum may not pass its range's top
        assert 0.0 <= point[2] <= 0.01 + 0.125  # nor the warmup below 1 step
        assert point[3:] == best[3:]


def test_a_stopped_arm_resumes_to_the_same_ledger(equal_arm, tmp_path):
    _, directory, _ = equal_arm
    config = fake_config()
    for _ in range(40):
        outcome = run(config, tmp_path, max_trials=60)
        if outcome.trials_trained == 0:
            break
    whole = ledger.read_rows(str(directory))
    pieces = ledger.read_rows(str(tmp_path))
    assert [row["key"] for row in pieces] == [row["key"] for row in whole]
    assert [row["curve"] for row in pieces] == [row["curve"] for row in whole]


def test_evaluation_steps_grow_geometrically_and_end_at_the_budget():
    steps = measures.evaluation_steps(100, 1.5, 2)
    assert steps == [2, 3, 5, 8, 12, 18, 27, 41, 62, 93, 100]
    assert measures.evaluation_steps(3, 1.05, 5) == [3]


def test_a_loss_target_is_reached_from_above():
    curve = [(10, 0.1, 6.0), (20, 0.2, 4.5), (30, 0.3, 3.9)]
    assert measures.steps_to_target(curve, 4.0, measures.LOSS) == 30
    assert measures.steps_to_target(curve, 0.2, measures.ACCURACY) == 20
    assert measures.rank(curve, 3.0, measures.LOSS) == (math.inf, pytest.approx(0.9))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(arm="resnet"), "arm must be one of"),
        (dict(search_trials=6), "search_trials must be a power of 2"),
        (dict(multiples=[2, 1]), "multiples must be ascending"),
        (dict(pilot_batch_sizes=[64]), "pilot_batch_sizes must be an ascending list of at least 2"),
        (dict(refinement_width=0.7), "refinement_width"),
        (dict(main_grid=1), "main_grid"),
        (dict(max_batch_size=32), "max_batch_size"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        ArmConfig(**overrides).validate()


def test_a_page_without_the_arms_markers_is_refused_before_any_trial(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# no markers\n")
    calls = []
    with pytest.raises(ValueError, match="study-arm resnet_lars: begin"):
        run(fake_config(), tmp_path / "out", calls=calls, page=str(page))
    assert calls == []


def test_arm_a_runs_end_to_end_on_its_tiny_preset(tmp_path):
    pytest.importorskip("keras_hub")
    page = tmp_path / "page.md"
    page.write_text(
        "# arms\n<!-- study-arm resnet_lars: begin -->\n<!-- study-arm resnet_lars: end -->\n"
    )
    # On Fashion-MNIST files of the preset's 384 training images (its 320 and 64 validation)
    # and 100 test images: each seed's run ends on the test set, whose 10,000 real images cost
    # more than its training.
    write_fashion_mnist(tmp_path / "fashion-mnist", num_train=384, num_test=100)
    config = preset("resnet_lars", "tiny", data_dir=str(tmp_path / "fashion-mnist"))
    outcome = runner.run_arm(config, str(tmp_path / "arm"), page=str(page))
    rows = ledger.read_rows(str(tmp_path / "arm"))
    # Pilot: 2 batch sizes x (1 search + 1 refinement + 1 seed); main: 1 batch size x 2
    # optimizers x (1 + 1 + 1 seed).
    assert outcome.trials_trained == len(rows) == 12
    assert {row["phase"] for row in rows} == {
        f"{stage}-{phase}"
        for stage in ("pilot", "main")
        for phase in ("search", "refinement", "seed")
    }
    for row in rows:
        assert row["curve"] and row["stop"] in ("target", "budget", "pruned", "diverged")
        if row["phase"].endswith("seed") and row["stop"] != "diverged":
            assert 0 <= row["test_accuracy"] <= 1
    for path in outcome.report_paths:
        assert os.path.getsize(path) > 0
    text = page.read_text()
    assert "LARS against Nesterov on a ResNet" in text and "Verdict" in text
    # The page shows the plots, linked from where it is.
    assert (
        "![Steps to the target against batch size, LARS and Nesterov](arm/steps_to_target.png)"
        in text
    )
    assert "after each trial of each cell's search](arm/search_progress.png)" in text
    summary = (tmp_path / "arm" / "summary.md").read_text()
    # The complete arm measured Nesterov's noise scale at batch 8 with a fresh seed of its
    # selected settings, 4 micro-batches a measurement, and reports its window.
    noise = noise_scale.read(str(tmp_path / "arm"))
    pilot = outcome.state.pilot[0]
    assert (noise["optimizer"], noise["batch_size"], noise["seed"]) == ("nesterov", 8, 3)
    assert noise["settings"] == pilot.best["settings"] and noise["micro_batches"] == 4
    assert noise["points"] and all(point["trace_covariance"] for point in noise["points"])
    assert "Nesterov's noise scale at batch 8 (seed 3): " in summary
    # The report from the ledger alone is the same.
    runner.report_only(str(tmp_path / "arm"))
    assert (tmp_path / "arm" / "summary.md").read_text() == summary
    # Done: a second call trains nothing.
    assert runner.run_arm(config, str(tmp_path / "arm")).trials_trained == 0
    # The estimate measures each batch size here and costs the pilot, and the main cells from
    # the pilot's fit in the ledger when it has one.
    lines = estimate.estimate(config, str(tmp_path / "arm"), examples=64)
    rates = [float(line.split(":")[1].split()[0]) for line in lines[:2]]
    assert [line.split(":")[0] for line in lines[:2]] == ["batch      8", "batch     16"]
    assert min(rates) > 0 and lines[2].startswith("one validation evaluation: ")
    assert lines[3].startswith("pilot: 6 trials; at most ") and lines[4].startswith("main cells")


def test_the_command_reports_a_ledger_without_its_arm_and_refuses_a_run_without_one(
    equal_arm, capsys
):
    from keras_largebatch.study.arms import __main__ as command

    _, directory, _ = equal_arm
    os.remove(directory / "summary.md")
    assert command.main(["--report-only", "--output-dir", str(directory)]) == 0
    assert "Verdict" in (directory / "summary.md").read_text()
    with pytest.raises(SystemExit) as raised:
        command.main(["--preset", "tiny"])
    assert raised.value.code == 2
    assert "--arm is required" in capsys.readouterr().err
    # The noise scale of another arm's ledger is refused before its data are read.
    noise = ["--arm", "resnet_lars", "--output-dir", str(directory), "--noise-scale"]
    assert command.main(noise + ["--data-dir", str(directory / "none")]) == 2
    assert "holds a study with other settings" in capsys.readouterr().err


def test_a_cell_s_line_tells_a_diverged_seed_from_one_out_of_budget():
    from keras_largebatch.study.arms import report

    config = ArmConfig(target=0.87)

    def row(stop, accuracy, test_accuracy=0.87):
        # (step, validation accuracy, validation loss) at steps 10 and 206
        return {
            "stop": stop,
            "curve": [[10, 0.5, 1.0], [206, accuracy, 0.4]],
            "test_accuracy": None if stop == "diverged" else test_accuracy,
            "step_budget": 1563,
        }

    best = {"settings": {"learning_rate": 0.222}}

    def line(*seeds):
        cell = protocol.Cell("pilot", "nesterov", 256, None, [row("target", 0.9)], best, seeds)
        return report._cell_line(cell, config, measures.ACCURACY)

    assert "| 206; 1 of 2 seeds diverged |" in line(row("target", 0.9), row("diverged", 0.5))
    assert "| 206; 1 of 2 seeds not within the 1,563-step budget |" in line(
        row("target", 0.9), row("budget", 0.8)
    )
    both = line(row("target", 0.9), row("budget", 0.8), row("diverged", 0.1))
    assert "1 of 3 seeds not within the 1,563-step budget; 1 of 3 seeds diverged" in both
    assert "| 206 |" in line(row("target", 0.9), row("target", 0.95))
    # The test accuracy's median of an even number of seeds is the mean of the middle two.
    tested = line(*(row("target", 0.9, accuracy) for accuracy in (0.80, 0.86, 0.90, 0.92)))
    assert "| 0.8800 |" in tested
    assert "| 0.8300 |" in line(row("target", 0.9, 0.8), row("target", 0.9, 0.86))
