"""An arm's two plots: the seeds' steps to the target against batch size (log-log, with the
pilot's fit and the perfect-scaling line), and each cell's best steps after each trial of its
search and refinement."""

import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from keras_largebatch import _files
from keras_largebatch.study.arms import analysis
from keras_largebatch.study.arms.spaces import OPTIMIZERS

_COLOURS = {"nesterov": "tab:blue", "lars": "tab:orange", "adamw": "tab:green", "lamb": "tab:red"}


def _save(figure, path):
    FigureCanvasAgg(figure)
    with _files.replacing(path, suffix=".png") as temporary:
        figure.savefig(temporary, dpi=100)


def _finite(values):
    return [v for v in values if v is not None]


def plot_steps(config, state, metric, path, noise=None):
    """Median steps to the target (seeds' range as bars) per optimizer and batch size, the
    pilot's fit and its B_crit, and the window's B_simple of ``noise`` (`noise_scale.read`)."""
    figure = Figure(figsize=(7, 5), layout="constrained")
    axes = figure.add_subplot()
    series = {}
    for cell in state.pilot + state.main:
        if cell.pending is not None:
            continue
        steps = analysis.seed_steps(cell, config, metric)
        if not _finite(steps):
            continue
        series.setdefault((cell.optimizer, cell.stage), []).append((cell.batch_size, steps))
    sizes = set()
    for (optimizer, stage), points in sorted(series.items()):
        xs = [size for size, _ in points]
        sizes.update(xs)
        medians = [np.median([math.inf if s is None else s for s in steps]) for _, steps in points]
        lows = [min(_finite(steps)) for _, steps in points]
        highs = [max(_finite(steps)) for _, steps in points]
        finite = [m if math.isfinite(m) else np.nan for m in medians]
        pilot = stage == "pilot"
        axes.errorbar(
            xs,
            finite,
            yerr=[
                np.maximum(np.array(finite) - lows, 0),
                np.maximum(np.array(highs) - np.array(finite), 0),
            ],
            marker="o",
            markerfacecolor="none" if pilot else None,
            linestyle=":" if pilot else "-",
            color=_COLOURS[optimizer],
            capsize=3,
            label=f"{OPTIMIZERS[optimizer].label}{' (pilot)' if pilot else ''}: median of seeds, "
            "bars their range",
        )
    fit = state.fit
    if fit is not None and sizes and math.isfinite(fit.critical_batch_size):
        grid = np.geomspace(min(sizes), max(sizes), 100)
        axes.plot(
            grid,
            fit.minimum_steps * (1 + fit.critical_batch_size / grid),
            color="grey",
            linestyle="--",
            label=f"pilot's fit, S_min (1 + B_crit / B), S_min {fit.minimum_steps:,.0f}",
        )
        interval = ""
        if math.isfinite(fit.low) and math.isfinite(fit.high):
            axes.axvspan(fit.low, fit.high, color="grey", alpha=0.15, linewidth=0)
            interval = f" [{fit.low:,.0f}, {fit.high:,.0f}], shaded"
        axes.axvline(
            fit.critical_batch_size,
            color="grey",
            linewidth=0.8,
            label=f"B_crit {fit.critical_batch_size:,.0f}{interval}",
        )
    window = (noise or {}).get("window")
    if window is not None and window["b_simple"] is not None and window["b_simple"] > 0:
        interval = (
            f" [{window['low']:,.0f}, {window['high']:,.0f}]" if window["low"] is not None else ""
        )
        axes.axvline(
            window["b_simple"],
            color="black",
            linestyle="-.",
            linewidth=0.8,
            label=f"B_simple {window['b_simple']:,.0f}{interval} (batch "
            f"{noise['batch_size']:,}, steps {window['first_step']:,}-{window['last_step']:,})",
        )
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("batch size")
    axes.set_ylabel(f"steps to validation {metric} {config.target:g}")
    axes.set_title(config.definition.label)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8)
    _save(figure, path)


def search_curves(config, state):
    """The cells of `plot_search`, by batch size: every pilot and main cell with trials, a
    pilot cell left out where a main cell continues it (its curve is the main cell's)."""
    continued = {
        cell.batch_size
        for cell in state.main
        if cell.trial_rows and config.continues_pilot(cell.optimizer, cell.batch_size)
    }
    by_size = {}
    for cell in state.pilot + state.main:
        if not cell.trial_rows or (cell.stage == "pilot" and cell.batch_size in continued):
            continue
        by_size.setdefault(cell.batch_size, []).append(cell)
    return dict(sorted(by_size.items()))


def plot_search(config, state, metric, path):
    """Each cell's best steps to the target after each trial (search, then refinement: the
    dotted line between them), a panel per batch size; pilot cells dotted."""
    by_size = search_curves(config, state)
    figure = Figure(figsize=(3 * max(len(by_size), 1), 3.2), layout="constrained")
    grid = figure.subplots(1, max(len(by_size), 1), squeeze=False)[0]
    for axes, (size, cells) in zip(grid, by_size.items()):
        for cell in cells:
            curve = analysis.best_so_far(cell, config, metric)
            pilot = cell.stage == "pilot"
            continues = not pilot and config.continues_pilot(cell.optimizer, size)
            axes.step(
                range(1, len(curve) + 1),
                [c if math.isfinite(c) else np.nan for c in curve],
                where="post",
                color=_COLOURS[cell.optimizer],
                linestyle=":" if pilot else "-",
                label=OPTIMIZERS[cell.optimizer].label
                + (" (pilot)" if pilot else " (the pilot's search)" if continues else ""),
            )
        axes.axvline(config.search_trials + 0.5, color="grey", linestyle=":", linewidth=0.8)
        axes.set_xlim(0.5, config.search_trials + config.refinement_trials + 0.5)
        axes.set_title(f"batch {size:,}")
        axes.set_xlabel("trial")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=7)
    grid[0].set_ylabel("best steps to the target so far")
    _save(figure, path)
