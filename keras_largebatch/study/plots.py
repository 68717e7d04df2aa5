"""The study's three plots, in the form of Shallue et al. (arXiv:1811.03600): steps to the
target against batch size on log-log axes with the perfect-scaling line, the fits and
``B_simple``; test accuracy at the end of the budget against batch size; and ``B_simple`` along
the smallest batch's runs against the fitted ``B_crit`` (McCandlish et al., arXiv:1812.06162).
Each is written from what `keras_largebatch.study.analysis` made of the ledger."""

import math
import statistics

from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from keras_largebatch import _files
from keras_largebatch.study import measures
from keras_largebatch.study.optimizers import OPTIMIZERS

# The noise plot's loss axis ends at this multiple of the highest training loss at the target
# (the measurements compared with B_crit): a run's first measurements, far above it, would
# otherwise squeeze the rest into a corner.
LOSS_AXIS_FACTOR = 3.0


def _save(figure, path):
    FigureCanvasAgg(figure)
    with _files.replacing(path, suffix=".png") as temporary:
        figure.savefig(temporary, dpi=100)


def _batch_axis(axes, batch_sizes, labels=None, rotation=45):
    axes.set_xscale("log", base=2)
    axes.set_xticks(batch_sizes, labels or [str(size) for size in batch_sizes], rotation=rotation)
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
    """``(median, lowest, highest, count)`` of the optimizers' ``B_simple`` at the target
    (one measurement each); None when none was measured."""
    values = [item.at_target[3] for item in noise if item.at_target]
    if not values:
        return None
    return statistics.median(values), min(values), max(values), len(values)


def plot_steps(config, cells, fits, noise, path):
    """Median steps to the primary target against batch size (seed ranges as error bars; a
    seed that missed the target ends its range at the cell's budget, with a triangle), per
    optimizer, with the fits, perfect scaling from the fewest median steps at the
    smallest batch reached, and ``B_simple`` at the target: the median of the optimizers'
    measurements (one each, `analysis.NoiseScale.at_target`) as a line, their range as a
    band."""
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
        median, lowest, highest, count = measured
        axes.axvline(
            median,
            color="gray",
            linestyle="-.",
            label=f"B_simple at {target:g}: median of {count} runs, {median:.0f}",
        )
        if count > 1 and lowest > 0 and math.isfinite(highest):
            axes.axvspan(
                lowest,
                highest,
                color="gray",
                alpha=0.15,
                label=f"B_simple: range of the {count}, {lowest:.0f}–{highest:.0f}",
            )
    axes.set_yscale("log")
    _batch_axis(axes, config.batch_sizes)
    axes.set_ylabel(f"steps to validation accuracy {target:g}")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    _save(figure, path)


def plot_accuracy(config, cells, path):
    """Median test accuracy at the end of the budget (seed ranges as error bars) against
    batch size, per optimizer; a cell whose budget was doubled is ringed by a square, and
    each batch size's budgets in steps are written under it: the accuracy at the end of a
    budget grows with the budget, which changes along the axis."""
    figure = Figure(figsize=(7.2, 4.8))
    axes = figure.add_subplot()
    doubled = False
    for name in config.optimizers:
        points = _series(cells, name, lambda result: result.test_accuracy)
        if not points:
            continue
        line = _error_bars(axes, points, OPTIMIZERS[name].label, [1.0] * len(points))
        longer = [
            (batch_size, spread.median)
            for batch_size, spread, result in points
            if result.progress.budget_doubled
        ]
        if longer:
            doubled = True
            axes.plot(
                [batch_size for batch_size, _ in longer],
                [median for _, median in longer],
                linestyle="none",
                marker="s",
                markersize=13,
                fillstyle="none",
                color=line[0].get_color(),
            )
    if doubled:
        axes.plot(
            [],
            [],
            linestyle="none",
            marker="s",
            markersize=10,
            fillstyle="none",
            color="gray",
            label="budget doubled",
        )
    labels = []
    for batch_size in config.batch_sizes:
        budgets = sorted(
            {
                result.progress.step_budget
                for (_, size), result in cells.items()
                if size == batch_size
            }
        )
        labels.append("\n".join([str(batch_size), ", ".join(str(b) for b in budgets)]))
    _batch_axis(axes, config.batch_sizes, labels, rotation=0)
    axes.set_xlabel("batch size (under it: the step budgets of its cells)")
    axes.set_ylabel("test accuracy at the end of the budget")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    _save(figure, path)


def _drawn(item):
    return [p for p in item.points if p[3] > 0 and math.isfinite(p[3])]


def noise_loss_axis(noise):
    """``(limit, outside)``: the noise plot's highest training loss (`LOSS_AXIS_FACTOR` x the
    highest at the target; None when no run reached it, and the axis shows every point) and
    the ``(optimizer, point)`` measurements above it, drawn as arrows at the axis's end."""
    losses = [item.at_target[1] for item in noise if item.at_target]
    if not losses:
        return None, []
    limit = LOSS_AXIS_FACTOR * max(losses)
    outside = [(item.optimizer, p) for item in noise for p in _drawn(item) if p[1] > limit]
    return limit, outside


def plot_noise(config, noise, fits, path):
    """``B_simple`` (95% intervals) against the training loss along each optimizer's run at
    the smallest batch, the target's point ringed, and each fitted ``B_crit`` as a line. The
    loss axis ends at `noise_loss_axis`'s limit; a point beyond it is an arrow at the axis's
    end, at its ``B_simple``, and is counted in the axis label."""
    figure = Figure(figsize=(7.2, 4.6))
    axes = figure.add_subplot()
    limit, outside = noise_loss_axis(noise)
    for item in noise:
        points = [p for p in _drawn(item) if limit is None or p[1] <= limit]
        beyond = [p for name, p in outside if name == item.optimizer]
        if not points and not beyond:
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
        if beyond:
            axes.plot(
                [limit] * len(beyond),
                [p[3] for p in beyond],
                linestyle="none",
                marker="<",
                markersize=9,
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
    label = (
        f"training loss along the best run at batch {config.batch_sizes[0]} "
        f"(ringed: first at {config.primary_target:g})"
    )
    if outside:
        count = "1 measurement" if len(outside) == 1 else f"{len(outside)} measurements"
        label += f"\n{count} at a loss above {limit:.2f}: arrowheads at the left end"
    # A log axis: the measurements near the target, at losses within a factor 2 of each
    # other, get as much room as the early ones.
    axes.set_xscale("log")
    axes.xaxis.set_major_locator(
        ticker.LogLocator(subs=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0), numticks=20)
    )
    axes.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    axes.xaxis.set_minor_formatter(ticker.NullFormatter())
    axes.invert_xaxis()
    axes.set_xlabel(label)
    axes.set_ylabel("examples")
    axes.grid(True, which="both", alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    figure.tight_layout()
    _save(figure, path)
