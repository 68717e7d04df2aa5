"""The study's three plots, in the form of Shallue et al. (arXiv:1811.03600): steps to the
target against batch size on log-log axes with the perfect-scaling line, the fits and
``B_simple``; test accuracy at the end of the budget against batch size; and ``B_simple`` along
the smallest batch's runs against the fitted ``B_crit`` (McCandlish et al., arXiv:1812.06162).
Each is written from what `keras_largebatch.study.analysis` made of the ledger."""

import math
import statistics

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from keras_largebatch import _files
from keras_largebatch.study import measures
from keras_largebatch.study.optimizers import OPTIMIZERS


def _save(figure, path):
    FigureCanvasAgg(figure)
    with _files.replacing(path, suffix=".png") as temporary:
        figure.savefig(temporary, dpi=100)


def _batch_axis(axes, batch_sizes):
    axes.set_xscale("log", base=2)
    axes.set_xticks(batch_sizes, [str(size) for size in batch_sizes], rotation=45)
    axes.minorticks_off()
    axes.set_xlabel("batch size")


def _series(cells, optimizer, value):
    """``(batch size, spread, cell)`` of ``optimizer``'s cells whose median is finite."""
    points = []
    for (name, batch_size), result in sorted(cells.items()):
        spread = value(result)
        if name == optimizer and spread is not None and spread.median < math.inf:
            points.append((batch_size, spread, result))
    return points


def _error_bars(axes, points, label, tops):
    """Medians with the seeds' range; a range is drawn up to ``tops`` (one per point) at
    most."""
    medians = [spread.median for _, spread, _ in points]
    below = [spread.median - spread.low for _, spread, _ in points]
    above = [min(spread.high, top) - spread.median for (_, spread, _), top in zip(points, tops)]
    return axes.errorbar(
        [batch_size for batch_size, _, _ in points],
        medians,
        yerr=[below, above],
        marker="o",
        capsize=3,
        label=label,
    )


def _noise_at_target(noise):
    """The median over the optimizers of ``B_simple`` at the target, and the lowest low and
    highest high of their intervals; None when none was measured."""
    values = [item.at_target for item in noise if item.at_target]
    if not values:
        return None
    return (
        statistics.median(value[3] for value in values),
        min(value[4] for value in values),
        max(value[5] for value in values),
    )


def plot_steps(config, cells, fits, noise, path):
    """Median steps to the primary target against batch size (seed ranges as error bars; a
    seed that missed the target ends its range at the cell's budget, with a triangle), per
    optimizer, with the fits, perfect scaling from the fewest median steps at the
    smallest batch reached, and ``B_simple`` at the target."""
    target = config.primary_target
    figure = Figure(figsize=(7.2, 5.0))
    axes = figure.add_subplot()
    reached, missed = [], False
    for name in config.optimizers:
        points = _series(cells, name, lambda result: result.steps[target])
        if not points:
            continue
        reached += points
        # A seed that never reached the target took more than its cell's budget: its range
        # ends at the budget, marked by a triangle.
        budgets = [result.progress.step_budget for _, _, result in points]
        line = _error_bars(axes, points, OPTIMIZERS[name].label, budgets)
        beyond = [
            (batch_size, budget)
            for (batch_size, spread, _), budget in zip(points, budgets)
            if spread.high == math.inf
        ]
        if beyond:
            missed = True
            axes.plot(
                [batch_size for batch_size, _ in beyond],
                [budget for _, budget in beyond],
                linestyle="none",
                marker="^",
                color=line[0].get_color(),
            )
        fit = fits.get(name)
        if fit is not None and fit.critical_batch_size < math.inf:
            sizes = [size for size in config.batch_sizes]
            axes.plot(
                sizes,
                [fit.minimum_steps * (1 + fit.critical_batch_size / size) for size in sizes],
                color=line[0].get_color(),
                linestyle=":",
                linewidth=1,
            )
    if missed:
        axes.plot([], [], linestyle="none", marker="^", color="gray", label="a seed missed it")
    if reached:
        smallest = min(batch_size for batch_size, _, _ in reached)
        steps = min(spread.median for batch_size, spread, _ in reached if batch_size == smallest)
        sizes = [size for size in config.batch_sizes if size >= smallest]
        axes.plot(
            sizes,
            measures.perfect_scaling(sizes, smallest, steps),
            color="black",
            linestyle="--",
            label="perfect scaling",
        )
    measured = _noise_at_target(noise)
    if measured is not None and measured[0] > 0 and math.isfinite(measured[0]):
        axes.axvline(measured[0], color="gray", linestyle="-.", label=f"B_simple {measured[0]:.0f}")
        if measured[1] > 0 and math.isfinite(measured[2]):
            axes.axvspan(measured[1], measured[2], color="gray", alpha=0.15)
    axes.set_yscale("log")
    _batch_axis(axes, config.batch_sizes)
    axes.set_ylabel(f"steps to validation accuracy {target:g}")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    _save(figure, path)


def plot_accuracy(config, cells, path):
    """Median test accuracy at the end of the budget (seed ranges as error bars) against
    batch size, per optimizer."""
    figure = Figure(figsize=(7.2, 4.6))
    axes = figure.add_subplot()
    for name in config.optimizers:
        points = _series(cells, name, lambda result: result.test_accuracy)
        if points:
            _error_bars(axes, points, OPTIMIZERS[name].label, [1.0] * len(points))
    _batch_axis(axes, config.batch_sizes)
    axes.set_ylabel("test accuracy at the end of the budget")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    _save(figure, path)


def plot_noise(config, noise, fits, path):
    """``B_simple`` (95% intervals) against the training loss along each optimizer's run at
    the smallest batch, the target's point ringed, and each fitted ``B_crit`` as a line."""
    figure = Figure(figsize=(7.2, 4.6))
    axes = figure.add_subplot()
    for item in noise:
        points = [p for p in item.points if p[3] > 0 and math.isfinite(p[3])]
        if not points:
            continue
        losses = [p[1] for p in points]
        values = [p[3] for p in points]
        below = [max(p[3] - p[4], 0) if math.isfinite(p[4]) else 0 for p in points]
        above = [max(p[5] - p[3], 0) if math.isfinite(p[5]) else 0 for p in points]
        line = axes.errorbar(
            losses,
            values,
            yerr=[below, above],
            marker="o",
            linestyle="none",
            capsize=3,
            label=f"B_simple, {OPTIMIZERS[item.optimizer].label}",
        )
        if item.at_target and item.at_target[3] > 0:
            axes.plot(
                item.at_target[1],
                item.at_target[3],
                marker="o",
                markersize=12,
                fillstyle="none",
                color=line[0].get_color(),
            )
        fit = fits.get(item.optimizer)
        if fit is not None and 0 < fit.critical_batch_size < math.inf:
            axes.axhline(
                fit.critical_batch_size,
                color=line[0].get_color(),
                linestyle=":",
                label=f"B_crit, {OPTIMIZERS[item.optimizer].label}",
            )
    axes.set_yscale("log")
    axes.invert_xaxis()
    axes.set_xlabel(
        f"training loss along the best run at batch {config.batch_sizes[0]} "
        f"(ringed: first at {config.primary_target:g})"
    )
    axes.set_ylabel("examples")
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    figure.tight_layout()
    _save(figure, path)
