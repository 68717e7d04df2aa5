"""The study's results: the best trial per (optimizer, batch size), a Markdown table, and two
plots in the form of Shallue et al. (arXiv:1811.03600): best test accuracy against batch size,
and steps to the target against batch size on log-log axes with the perfect-scaling line and
the gradient noise scale ``B_simple`` (McCandlish et al., arXiv:1812.06162)."""

import math
import os
from typing import NamedTuple, Optional

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from keras_largebatch.study import measures

SUMMARY = "summary.md"
ACCURACY_PLOT = "accuracy_vs_batch_size.png"
STEPS_PLOT = "steps_to_target.png"
FILES = (SUMMARY, ACCURACY_PLOT, STEPS_PLOT)


class Cell(NamedTuple):
    """The trials of one (optimizer, batch size) after the learning-rate search."""

    optimizer: str
    batch_size: int
    trials: int
    diverged: int
    best_test_accuracy: Optional[float]  # best final accuracy of the trials that did not diverge
    best_learning_rate: Optional[float]  # the rate of that trial
    steps_to_target: Optional[int]  # fewest steps to the target over the trials; None: none


def cells(rows):
    """One `Cell` per (optimizer, batch size) of the trial rows, in the order first seen."""
    grouped = {}
    for row in rows:
        if row["kind"] == "trial":
            grouped.setdefault((row["optimizer"], row["batch_size"]), []).append(row)
    result = []
    for (optimizer, batch_size), trials in grouped.items():
        finished = [row for row in trials if row["final_test_accuracy"] is not None]
        best = max(finished, key=lambda row: row["final_test_accuracy"], default=None)
        reached = [row["steps_to_target"] for row in trials if row["steps_to_target"] is not None]
        result.append(
            Cell(
                optimizer=optimizer,
                batch_size=batch_size,
                trials=len(trials),
                diverged=sum(row["diverged"] for row in trials),
                best_test_accuracy=best and best["final_test_accuracy"],
                best_learning_rate=best and best["learning_rate"],
                steps_to_target=min(reached, default=None),
            )
        )
    return result


def noise_scale(rows):
    """The measured ``B_simple`` and the batch it was measured at, or None."""
    for row in rows:
        if row["kind"] == "noise_scale":
            return row["gradient_noise_scale"], row["batch_size"]
    return None


def markdown_table(rows, target_accuracy):
    """Per optimizer and batch size: best test accuracy (its rate), steps to the target,
    diverged trials."""
    lines = [
        f"| optimizer | batch size | best test accuracy | its learning rate | "
        f"steps to {target_accuracy:g} | diverged |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for cell in sorted(cells(rows), key=lambda cell: (cell.optimizer, cell.batch_size)):
        accuracy = "-" if cell.best_test_accuracy is None else f"{cell.best_test_accuracy:.4f}"
        rate = "-" if cell.best_learning_rate is None else f"{cell.best_learning_rate:.3g}"
        steps = "not reached" if cell.steps_to_target is None else str(cell.steps_to_target)
        lines.append(
            f"| {cell.optimizer} | {cell.batch_size} | {accuracy} | {rate} | {steps} | "
            f"{cell.diverged}/{cell.trials} |"
        )
    measured = noise_scale(rows)
    if measured is not None:
        lines += ["", f"Gradient noise scale B_simple at batch {measured[1]}: {measured[0]:.4g}"]
    return "\n".join(lines) + "\n"


def _by_optimizer(rows):
    series = {}
    for cell in cells(rows):
        series.setdefault(cell.optimizer, []).append(cell)
    return series


def _save(figure, path):
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=100)


def _batch_axis(axes, rows):
    batch_sizes = sorted({cell.batch_size for cell in cells(rows)})
    axes.set_xscale("log", base=2)
    axes.set_xticks(batch_sizes, [str(size) for size in batch_sizes], rotation=45)
    axes.minorticks_off()
    axes.set_xlabel("batch size")


def _mark_noise_scale(axes, rows):
    measured = noise_scale(rows)
    if measured is not None and math.isfinite(measured[0]) and measured[0] > 0:
        axes.axvline(
            measured[0], color="gray", linestyle=":", label=f"B_simple = {measured[0]:.0f}"
        )


def plot_accuracy(rows, path):
    """Best test accuracy at the end of the budget against batch size, per optimizer."""
    figure = Figure(figsize=(6.4, 4.4))
    axes = figure.add_subplot()
    for optimizer, series in _by_optimizer(rows).items():
        points = [(c.batch_size, c.best_test_accuracy) for c in series if c.best_test_accuracy]
        if points:
            axes.plot(*zip(*points), marker="o", label=optimizer)
    _mark_noise_scale(axes, rows)
    _batch_axis(axes, rows)
    axes.set_ylabel("best test accuracy (equal search per point)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    _save(figure, path)


def plot_steps_to_target(rows, path, target_accuracy):
    """Steps to the target against batch size on log-log axes, per optimizer, with perfect
    scaling drawn from the fewest steps at the smallest batch."""
    figure = Figure(figsize=(6.4, 4.4))
    axes = figure.add_subplot()
    reached = [c for c in cells(rows) if c.steps_to_target is not None]
    for optimizer, series in _by_optimizer(rows).items():
        points = [(c.batch_size, c.steps_to_target) for c in series if c.steps_to_target]
        if points:
            axes.plot(*zip(*points), marker="o", label=optimizer)
    if reached:
        batch_sizes = sorted({cell.batch_size for cell in cells(rows)})
        smallest = min(cell.batch_size for cell in reached)
        steps = min(cell.steps_to_target for cell in reached if cell.batch_size == smallest)
        line = measures.perfect_scaling(
            [size for size in batch_sizes if size >= smallest], smallest, steps
        )
        axes.plot(
            [size for size in batch_sizes if size >= smallest],
            line,
            color="black",
            linestyle="--",
            label="perfect scaling",
        )
    _mark_noise_scale(axes, rows)
    axes.set_yscale("log")
    _batch_axis(axes, rows)
    axes.set_ylabel(f"steps to test accuracy {target_accuracy:g}")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    _save(figure, path)


def write_report(rows, output_dir, target_accuracy):
    """Writes `SUMMARY`, `ACCURACY_PLOT` and `STEPS_PLOT` into ``output_dir``; returns
    their paths."""
    paths = [os.path.join(output_dir, name) for name in FILES]
    with open(paths[0], "w") as stream:
        stream.write(markdown_table(rows, target_accuracy))
    plot_accuracy(rows, paths[1])
    plot_steps_to_target(rows, paths[2], target_accuracy)
    return paths
