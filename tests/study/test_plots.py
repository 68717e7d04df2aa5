"""The steps plot drawn from cells built by hand: a seed that missed the target ends its range
at the cell's budget, marked, instead of stretching the axis."""

import matplotlib.lines

from keras_largebatch.study import config as config_lib
from keras_largebatch.study import plots

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
