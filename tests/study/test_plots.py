"""The plots drawn from cells built by hand: in the steps plot a seed that missed the target
ends its range at the cell's budget, marked, instead of stretching the axis, and the noise
scale's line and band say what they are; the accuracy plot marks a doubled budget and writes
the budgets; the noise plot's loss axis leaves out an early point far above the rest and says
so."""

import matplotlib.lines
import pytest

from keras_largebatch.study import analysis, plots
from keras_largebatch.study import config as config_lib

from .test_analysis import cell


def test_a_seed_that_missed_the_target_is_drawn_at_its_cells_budget(tmp_path, monkeypatch):
    config = config_lib.preset("full", optimizers=["adamw"], batch_sizes=[64, 1024])
    cells = {
        ("adamw", 64): cell([1200, 1300, 1400], budget=4102),
        ("adamw", 1024): cell([220, 233, None], budget=300),  # one seed never got there
    }
    figures = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: figures.append(figure))
    plots.plot_steps(config, cells, {}, [], str(tmp_path / "steps.png"))
    (axes,) = figures[0].axes
    bars = [collection for collection in axes.collections if collection.get_segments()]
    tops = sorted(max(segment[:, 1]) for segment in bars[0].get_segments())
    assert tops == [300, 1400]
    assert axes.get_ylim()[1] < 10_000
    triangles = [
        line
        for line in axes.get_lines()
        if isinstance(line, matplotlib.lines.Line2D)
        and line.get_marker() == "^"
        and len(line.get_xdata())
    ]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in triangles] == [
        ([1024], [300])
    ]
    assert "a seed missed it" in [text.get_text() for text in axes.get_legend().get_texts()]


def drawn(monkeypatch, draw, *arguments):
    """The one axes of the figure ``draw`` makes from ``arguments``, not saved."""
    figures = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: figures.append(figure))
    draw(*arguments, "unused.png")
    (axes,) = figures[0].axes
    return axes


def legend_texts(axes):
    return [text.get_text() for text in axes.get_legend().get_texts()]


def noise_scale(optimizer, points, target=0.87):
    """An `analysis.NoiseScale` at batch 64 of (loss, accuracy, B_simple) points, each with
    an interval of +-10%."""
    rows = [
        (100 * (i + 1), loss, accuracy, value, 0.9 * value, 1.1 * value)
        for i, (loss, accuracy, value) in enumerate(points)
    ]
    return analysis.NoiseScale(
        optimizer, 64, rows, next((row for row in rows if row[2] >= target), None)
    )


def test_the_steps_plot_says_its_noise_scale_line_is_the_median_of_the_measurements(monkeypatch):
    config = config_lib.preset("full", optimizers=["adamw"], batch_sizes=[64, 1024])
    cells = {
        ("adamw", 64): cell([1200, 1300, 1400], budget=4102),
        ("adamw", 1024): cell([220, 233, 240]),
    }
    noise = [
        noise_scale("sgd_momentum", [(0.5, 0.8, 100), (0.3, 0.875, 700)]),
        noise_scale("adamw", [(0.3, 0.88, 400)]),
        noise_scale("lamb", [(0.3, 0.871, 1750)]),
        noise_scale("lars", [(0.5, 0.8, 90)]),  # never at the target: not counted
    ]
    axes = drawn(monkeypatch, plots.plot_steps, config, cells, {}, noise)
    texts = legend_texts(axes)
    assert "B_simple at 0.87: median of 3 runs, 700" in texts
    assert "B_simple: range of the 3, 400–1750" in texts
    (band,) = [patch for patch in axes.patches if patch.get_label().startswith("B_simple")]
    assert (band.get_x(), band.get_x() + band.get_width()) == pytest.approx((400, 1750))
    (line,) = [line for line in axes.get_lines() if line.get_label().startswith("B_simple")]
    assert list(line.get_xdata()) == [700, 700]


def test_the_accuracy_plot_marks_a_doubled_budget_and_writes_the_budgets(monkeypatch):
    config = config_lib.preset("full", optimizers=["adamw", "lars"], batch_sizes=[1024, 4096])
    cells = {
        ("adamw", 1024): cell([200] * 3, accuracy=(0.87, 0.875, 0.88)),
        ("adamw", 4096): cell([200] * 3, accuracy=(0.87, 0.875, 0.88)),
        ("lars", 1024): cell([200] * 3, accuracy=(0.87, 0.875, 0.88)),
        ("lars", 4096): cell([200] * 3, accuracy=(0.88, 0.89, 0.9), budget=600),
    }
    axes = drawn(monkeypatch, plots.plot_accuracy, config, cells)
    squares = [line for line in axes.get_lines() if line.get_marker() == "s"]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in squares] == [
        ([4096], [0.89]),
        ([], []),  # the legend's entry
    ]
    assert "budget doubled" in legend_texts(axes)
    assert [label.get_text() for label in axes.get_xticklabels()] == ["1024\n300", "4096\n300, 600"]


def test_the_noise_plots_loss_axis_leaves_out_an_early_point_and_says_so(monkeypatch):
    config = config_lib.preset("full", optimizers=["adamw", "lamb"], batch_sizes=[64, 128])
    noise = [
        noise_scale("adamw", [(0.6, 0.8, 40), (0.33, 0.871, 400), (0.25, 0.89, 900)]),
        noise_scale("lamb", [(2.2, 0.25, 70), (0.3, 0.875, 700)]),
    ]
    limit, outside = plots.noise_loss_axis(noise)
    assert limit == pytest.approx(0.99) and [(name, p[1]) for name, p in outside] == [("lamb", 2.2)]
    axes = drawn(monkeypatch, plots.plot_noise, config, noise, {})
    assert max(axes.get_xlim()) < 1.1 and axes.get_xscale() == "log"
    arrows = [line for line in axes.get_lines() if line.get_marker() == "<"]
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in arrows] == [
        ([pytest.approx(0.99)], [70])
    ]
    assert "1 measurement at a loss above 0.99" in axes.get_xlabel()
    # Every other point is drawn: 3 of AdamW's, 1 of LAMB's.
    assert [list(container.lines[0].get_xdata()) for container in axes.containers] == [
        [0.6, 0.33, 0.25],
        [0.3],
    ]
    # Without a point at the target there is no limit: every point is drawn.
    assert plots.noise_loss_axis([noise_scale("adamw", [(2.2, 0.5, 70)])]) == (None, [])
