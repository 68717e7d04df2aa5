"""An arm's report, written from its ledger: a Markdown fragment (the pilot's fit and the
batch sizes it set, the criteria's verdict per batch size, every cell) and two plots (the
seeds' steps to the target against batch size; each cell's best steps after each trial of
its search)."""

import math
import os

from keras_largebatch import _files
from keras_largebatch.study import criteria
from keras_largebatch.study.arms import analysis, measures, noise_scale
from keras_largebatch.study.arms.spaces import OPTIMIZERS

SUMMARY = "summary.md"
STEPS_PLOT = "steps_to_target.png"
SEARCH_PLOT = "search_progress.png"
FILES = (SUMMARY, STEPS_PLOT, SEARCH_PLOT)


def _steps(value):
    return "not reached" if value is None or value == math.inf else f"{value:,.0f}"


def _settings(settings):
    return ", ".join(
        f"{name} {value:.3g}" if isinstance(value, float) else f"{name} {value}"
        for name, value in settings.items()
    )


def _cell_line(cell, config, metric):
    label = OPTIMIZERS[cell.optimizer].label + (" (pilot)" if cell.stage == "pilot" else "")
    if cell.trial_rows and cell.stage == "main" and cell.trial_rows[0]["key"].startswith("pilot/"):
        label += " (the pilot's search)"
    if cell.pending is not None:
        return f"| {label} | {cell.batch_size:,} | not finished | | | |"
    steps = analysis.seed_steps(cell, config, metric)
    finite = sorted(s for s in steps if s is not None)
    median = _median(steps)
    if not finite:
        spread = "none reached"
    elif finite[0] == finite[-1]:
        spread = f"{finite[0]:,}"
    else:
        spread = f"{finite[0]:,}-{finite[-1]:,}"
    tests = [row[f"test_{metric}"] for row in cell.seed_rows if row[f"test_{metric}"] is not None]
    test = f"{_median(tests):.4f}" if tests else ""
    budget = (
        cell.seed_rows[0]["step_budget"] if cell.seed_rows else config.step_budget(cell.batch_size)
    )
    # A seed that missed the target either diverged or ran out its budget.
    diverged_seeds = sum(
        s is None and row["stop"] == "diverged" for s, row in zip(steps, cell.seed_rows)
    )
    misses = sum(s is None for s in steps) - diverged_seeds
    notes = []
    if misses:
        notes.append(f"{misses} of {len(steps)} seeds not within the {budget:,}-step budget")
    if diverged_seeds:
        notes.append(f"{diverged_seeds} of {len(steps)} seeds diverged")
    note = "".join(f"; {text}" for text in notes)
    pruned = sum(row["stop"] == "pruned" for row in cell.trial_rows)
    diverged = sum(row["stop"] == "diverged" for row in cell.trial_rows)
    return (
        f"| {label} | {cell.batch_size:,} | {_steps(median)} | {spread}{note} | {test} | "
        f"{_settings(cell.best['settings'])} ({len(cell.trial_rows)} trials, {pruned} stopped "
        f"once behind, {diverged} diverged) |"
    )


def _sizes(sizes):
    return ", ".join(f"{size:,}" for size in sizes)


def _median(steps):
    numbers = sorted(math.inf if s is None else s for s in steps)
    if not numbers:
        return None
    middle = len(numbers) // 2
    if len(numbers) % 2:
        return numbers[middle]
    return (numbers[middle - 1] + numbers[middle]) / 2


def _noise_line(baseline, noise):
    """The sentence of the noise scale's window (`noise_scale.read`)."""
    window = noise["window"]
    run = f"{baseline}'s noise scale at batch {noise['batch_size']:,} (seed {noise['seed']})"
    if window is None and noise["steps_to_target"] is None:
        return (
            f"{run}: its run did not reach the target ({noise['stop']} after "
            f"{noise['steps_trained']:,} steps), so there is no window."
        )
    if window is None:
        return (
            f"{run}: no measurement fell in the second half of its way to the target at step "
            f"{noise['steps_to_target']:,}."
        )
    spread = ""
    if window["points_min"] is not None:
        spread = (
            f"; {window['positive_points']} of the single measurements gave a positive "
            f"|G|^2, and B_simple {window['points_min']:,.0f} to {window['points_max']:,.0f}"
        )
    if window["b_simple"] is None:
        value = "not estimated (the window's |G|^2 estimate was not positive)"
    else:
        interval = (
            f" [{window['low']:,.0f}, {window['high']:,.0f}]" if window["low"] is not None else ""
        )
        value = f"B_simple = {window['b_simple']:,.0f}{interval}, the ratio of the averages"
    return (
        f"{run}: {value} over its {window['points']} measurements from step "
        f"{window['first_step']:,} to {window['last_step']:,} (the second half of its way to "
        f"the target at step {noise['steps_to_target']:,}; the interval resamples the "
        f"measurements and their micro-batches{spread})."
    )


def markdown(config, state, metric, noise=None):
    """The report of an arm's ``state`` (`analysis.ArmState`) and ``noise`` (its noise scale,
    `noise_scale.read`)."""
    arm = config.definition
    layerwise, baseline = (OPTIMIZERS[arm.layerwise].label, OPTIMIZERS[arm.baseline].label)
    quantity = "accuracy" if metric == measures.ACCURACY else "masked-LM loss"
    target = f"validation {quantity} {config.target:g}"
    lines = [f"**{arm.label}**: steps to {target}.", ""]
    fit = state.fit
    if fit is not None:
        lines.append(
            f"The pilot ({baseline} alone at batch {_sizes(config.pilot_batch_sizes)}) "
            f"fits B_crit = {fit.critical_batch_size:,.0f} [{fit.low:,.0f}, {fit.high:,.0f}] "
            f"(S_min {fit.minimum_steps:,.0f} steps; the interval resamples seeds and batch "
            "sizes)."
        )
    if noise is not None:
        lines.append(_noise_line(baseline, noise))
    if state.batch_sizes is not None:
        times = ""
        if state.batch_note.startswith("fitted") and state.batch_sizes:
            ratios = [f"{size / fit.critical_batch_size:.2g}" for size in state.batch_sizes]
            times = f"; B / B_crit {', '.join(ratios)}"
        lines.append(f"Main batch sizes: {_sizes(state.batch_sizes)} ({state.batch_note}{times}).")
        reused = [size for size in state.batch_sizes if config.continues_pilot(arm.baseline, size)]
        if reused:
            lines.append(
                f"{baseline}'s main cells at {_sizes(reused)} continue its pilot cells there: "
                f"their search and refinement are the pilot's trials; their {config.seeds} "
                f"seeds are fresh ({config.pilot_seeds + 1} to "
                f"{config.pilot_seeds + config.seeds})."
            )
    lines.append("")
    ratios, by_outcome, steps = analysis.verdict(config, state, metric)
    if ratios:
        lines += [
            f"| batch | R = {layerwise} / {baseline} | 95% interval | outcome |",
            "|---:|---:|---|---|",
        ]
        for size, ratio in ratios.items():
            lines.append(
                f"| {size:,} | {ratio.ratio:.2f} | [{ratio.low:.2f}, {ratio.high:.2f}] | "
                f"{ratio.outcome} |"
            )
        lines += [
            "",
            "**Verdict**: "
            + "; ".join(
                f"{name}: {_sizes(by_outcome[name]) or 'none'}" for name in criteria.OUTCOMES
            )
            + ".",
            "",
        ]
    lines += [
        f"| optimizer | batch | median steps | seeds' range | median test {metric} | "
        "selected settings |",
        "|---|---:|---:|---|---:|---|",
    ]
    for cell in state.pilot + state.main:
        lines.append(_cell_line(cell, config, metric))
    lines += ["", _cost(state), ""]
    return "\n".join(lines)


def _cost(state):
    """The line of the ledger's trials and their wall time, pilot and main cells apart (a
    continued cell's search counted once, in the pilot)."""
    rows = {
        row["key"]: row
        for cell in state.pilot + state.main
        for row in cell.trial_rows + cell.seed_rows
    }
    hours = {
        stage: sum(row["seconds"] for key, row in rows.items() if key.startswith(f"{stage}/"))
        / 3600
        for stage in ("pilot", "main")
    }
    return (
        f"Cost: {len(rows)} trials, {hours['pilot'] + hours['main']:.1f} h of trials' wall time "
        f"(the pilot {hours['pilot']:.1f} h, the main cells {hours['main']:.1f} h)."
    )


def plot_links(config, output_dir, page_dir):
    """Markdown showing the arm's two plots, linked relative to ``page_dir``."""
    steps, search = (
        os.path.relpath(os.path.join(os.path.abspath(output_dir), name), page_dir).replace(
            os.sep, "/"
        )
        for name in (STEPS_PLOT, SEARCH_PLOT)
    )
    layerwise, baseline = (
        OPTIMIZERS[name].label for name in (config.definition.layerwise, config.definition.baseline)
    )
    return (
        f"![Steps to the target against batch size, {layerwise} and {baseline}]({steps})\n\n"
        f"![Best steps to the target after each trial of each cell's search]({search})\n\n"
    )


def write_report(config, state, metric, output_dir):
    """Writes `FILES` into ``output_dir``; returns their paths."""
    from keras_largebatch.study.arms import plots

    noise = noise_scale.read(output_dir)
    paths = [os.path.join(output_dir, name) for name in FILES]
    _files.write_text(paths[0], markdown(config, state, metric, noise))
    plots.plot_steps(config, state, metric, paths[1], noise)
    plots.plot_search(config, state, metric, paths[2])
    return paths
