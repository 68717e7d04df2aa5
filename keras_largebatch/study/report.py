"""The study's report, written from the ledger: a Markdown fragment (the criteria and which
held, the tables) and the three plots of `keras_largebatch.study.plots`.

`update_page` copies the fragment into a page between `BEGIN` and `END`, so that the page's
results are the report's, never typed by hand.
"""

import math
import os

from keras_largebatch import _files
from keras_largebatch.study import analysis, plots
from keras_largebatch.study.optimizers import OPTIMIZERS

SUMMARY = "summary.md"
STEPS_PLOT = "steps_to_target.png"
ACCURACY_PLOT = "accuracy_at_budget.png"
NOISE_PLOT = "noise_scale.png"
FILES = (SUMMARY, STEPS_PLOT, ACCURACY_PLOT, NOISE_PLOT)
BEGIN = "<!-- study-report: begin -->"
END = "<!-- study-report: end -->"


# === Text ===


def _steps(value):
    return "—" if value is None or value == math.inf else f"{value:.0f}"


def _spread_steps(spread):
    if spread is None or spread.median == math.inf:
        return "—"
    high = "—" if spread.high == math.inf else f"{spread.high:.0f}"
    return f"{spread.median:.0f} [{spread.low:.0f}–{high}]"


def _spread_accuracy(spread):
    if spread is None:
        return "—"
    return f"{spread.median:.4f} [{spread.low:.4f}–{spread.high:.4f}]"


def _interval(value, low, high):
    def number(x):
        return "∞" if x == math.inf else ("—" if math.isnan(x) else f"{x:.3g}")

    return f"{number(value)} [{number(low)}, {number(high)}]"


def _settings(optimizer, settings):
    text = []
    for name, value in settings.items():
        if name == "one_minus_momentum":
            first = "momentum" if optimizer in ("sgd_momentum", "lars") else "beta_1"
            text.append(f"{first} {1 - value:.4g}")
        elif isinstance(value, float):
            text.append(f"{name} {value:.3g}")
        else:
            text.append(f"{name} {value}")
    return ", ".join(text)


def _flags(result):
    progress = result.progress
    flags = []
    if progress.budget_doubled:
        flags.append("budget doubled")
    flags += [f"edge: {name} {side}" for name, side in progress.edges]
    if progress.best_beyond_range:
        flags.append("best beyond the range")
    if result.diverged_seeds:
        flags.append(f"{result.diverged_seeds} of {len(progress.confirmations)} seeds diverged")
    return "; ".join(flags)


def _verdict_line(item, fits, config, decided=True):
    """One pair's line: its state, then each part of both criteria and whether it held."""
    label, baseline = OPTIMIZERS[item.layerwise].label, OPTIMIZERS[item.baseline].label
    state = "confirmed" if item.confirmed else "refuted" if item.refuted else "neither"
    if not decided:
        state = "not decided yet"

    def sizes(values):
        return ", ".join(str(size) for size in values) or "none"

    def critical(name):
        fit = fits.get(name)
        return "no fit" if fit is None else _interval(fit.critical_batch_size, fit.low, fit.high)

    above = {True: "above", False: "not above", None: "not compared"}[item.critical_above]
    confirm = (
        f"To confirm: batch sizes >= {config.criteria_min_batch_size} where {label} needs <= "
        f"{analysis.CONFIRM_RATIO:g}x the steps with the seed ranges apart: "
        f"{sizes(item.confirming_batch_sizes)} (two needed); {label} B_crit "
        f"{critical(item.layerwise)} against {baseline} B_crit {critical(item.baseline)}: "
        f"{above}."
    )
    refute = (
        f"To refute, at no batch size {label} more than {analysis.REFUTE_RATIO:g}x faster "
        f"(it was at {sizes(item.faster_batch_sizes)}) and at none its median test accuracy "
        f"above {baseline}'s highest seed (it was at {sizes(item.more_accurate_batch_sizes)})."
    )
    parts = [confirm, refute]
    if item.unequal_budgets:
        parts.append(
            "Compared under different budgets (one cell's doubled) at "
            f"{sizes(item.unequal_budgets)}."
        )
    return f"- **{label} against {baseline}: {state}.** " + " ".join(parts)


def markdown(config, cells, incomplete, fits, noise, verdicts, link_prefix=""):
    """The report's Markdown: the criteria, the steps and accuracy tables, the fits against
    ``B_simple``, and every cell; plots linked under ``link_prefix``."""
    target = config.primary_target
    labels = {name: OPTIMIZERS[name].label for name in config.optimizers}
    lines = [
        "<!-- Written by keras_largebatch.study.report from the ledger; do not edit. -->",
        "",
        "#### Which criteria held",
        "",
    ]
    lines += [_verdict_line(item, fits, config, decided=not incomplete) for item in verdicts] or [
        "- No pair was studied."
    ]
    if verdicts and incomplete:
        # The criteria are stated over every batch size: a verdict on part of them would be
        # one the finished study may overturn.
        total = len(cells) + len(incomplete)
        lines += [
            "",
            f"**The claim is not decided yet**: {len(cells)} of {total} cells are complete, and "
            "the criteria are judged when all are.",
        ]
    elif verdicts:
        if any(item.confirmed for item in verdicts):
            overall = "confirmed"
        elif all(item.refuted for item in verdicts):
            overall = "refuted"
        else:
            overall = "neither confirmed nor refuted"
        lines += ["", f"**The claim is {overall}** by this study."]
    if incomplete:
        missing = ", ".join(f"{labels[name]} at {size}" for name, size in incomplete)
        lines += ["", f"Not complete yet (left out above and below): {missing}."]
    lines += [
        "",
        f"#### Steps to validation accuracy {target:g}",
        "",
        f"![Steps to {target:g} against batch size]({link_prefix}{STEPS_PLOT})",
        "",
        "Median of the seeds [fastest–slowest], steps to the first evaluation at or above "
        "the target; — not reached.",
        "",
        "| batch | budget | " + " | ".join(labels.values()) + " |",
        "|---:|---:|" + "---:|" * len(labels),
    ]
    for batch_size in config.batch_sizes:
        cells_here = [cells.get((name, batch_size)) for name in config.optimizers]
        budgets = sorted({c.progress.step_budget for c in cells_here if c is not None})
        row = [str(batch_size), ", ".join(str(b) for b in budgets) or "—"]
        row += [_spread_steps(c and c.steps[target]) for c in cells_here]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "#### The fits against the noise scale",
        "",
        "`S(B) = S_min (1 + B_crit / B)` fitted to the medians (95% bootstrap interval over "
        "the seeds); `B_simple` measured along the best run at the smallest batch, at the "
        "first evaluation at the target (95% bootstrap interval over the micro-batches).",
        "",
        "| optimizer | S_min | B_crit [interval] | fitted on | B_simple at the target | "
        "its training loss |",
        "|---|---:|---:|---|---:|---:|",
    ]
    noise_by_optimizer = {item.optimizer: item for item in noise}
    for name in config.optimizers:
        fit = fits.get(name)
        measured = noise_by_optimizer.get(name)
        at_target = measured and measured.at_target
        lines.append(
            "| "
            + " | ".join(
                [
                    labels[name],
                    "—" if fit is None else f"{fit.minimum_steps:.0f}",
                    "—" if fit is None else _interval(fit.critical_batch_size, fit.low, fit.high),
                    "—" if fit is None else ", ".join(str(b) for b in fit.batch_sizes),
                    "—" if not at_target else _interval(*at_target[3:6]),
                    "—" if not at_target else f"{at_target[1]:.3f}",
                ]
            )
            + " |"
        )
    lines += [
        "",
        f"![B_simple along the runs at batch {config.batch_sizes[0]}]({link_prefix}{NOISE_PLOT})",
        "",
        "#### Accuracy at the end of the budget",
        "",
        f"![Test accuracy at the end of the budget]({link_prefix}{ACCURACY_PLOT})",
        "",
        "Test accuracy of each cell's selected settings at the end of its budget (the test "
        "set's only use), median [lowest–highest] of the seeds; a seed that diverged counts as "
        f"{analysis.CHANCE_ACCURACY:g}, a constant prediction's accuracy (its cell is flagged "
        "below).",
        "",
        "| batch | " + " | ".join(labels.values()) + " |",
        "|---:|" + "---:|" * len(labels),
    ]
    for batch_size in config.batch_sizes:
        row = [str(batch_size)]
        row += [
            _spread_accuracy(cells[(name, batch_size)].test_accuracy)
            if (name, batch_size) in cells
            else "—"
            for name in config.optimizers
        ]
        lines.append("| " + " | ".join(row) + " |")
    targets = " / ".join(f"{t:g}" for t in config.targets)
    lines += [
        "",
        "#### Every cell",
        "",
        f"Steps to {targets}: the selected search trial's, then the seeds' medians; "
        "validation accuracy at the end of the budget (median of the seeds); trials of the "
        "selected round (diverged); the selected settings; flags.",
        "",
        f"| optimizer | batch | budget | selected trial to {targets} | seeds to {targets} | "
        "validation accuracy | trials (diverged) | settings | flags |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for (name, batch_size), result in sorted(cells.items(), key=lambda item: item[0]):
        best = " / ".join(_steps(result.search_steps[t]) for t in config.targets)
        seeds = " / ".join(_steps(result.steps[t].median) for t in config.targets)
        accuracy = result.validation_accuracy
        lines.append(
            f"| {labels[name]} | {batch_size} | {result.progress.step_budget} | {best} | "
            f"{seeds} | {'—' if accuracy is None else f'{accuracy.median:.4f}'} | "
            f"{result.trials} ({result.diverged}) | "
            f"{_settings(name, result.progress.best['settings'])} | {_flags(result)} |"
        )
    return "\n".join(lines) + "\n"


# === Files ===


def write_report(config, rows, output_dir):
    """Writes `FILES` into ``output_dir`` from the ledger's ``rows`` under ``config``;
    returns their paths and the Markdown."""
    cells, incomplete = analysis.results(config, rows)
    fits = {}
    for name in config.optimizers:
        fit = analysis.fit_optimizer(cells, name, config.primary_target, config.bootstrap_samples)
        if fit is not None:
            fits[name] = fit
    noise = analysis.noise_scales(cells, config)
    verdicts = analysis.verdicts(cells, fits, config)
    text = markdown(config, cells, incomplete, fits, noise, verdicts)
    paths = [os.path.join(output_dir, name) for name in FILES]
    _files.write_text(paths[0], text)
    plots.plot_steps(config, cells, fits, noise, paths[1])
    plots.plot_accuracy(config, cells, paths[2])
    plots.plot_noise(config, noise, fits, paths[3])
    return paths, (cells, incomplete, fits, noise, verdicts)


def _marker_lines(lines):
    return [i for i, line in enumerate(lines) if line.strip() == BEGIN], [
        i for i, line in enumerate(lines) if line.strip() == END
    ]


def check_page(page):
    """Raises unless the Markdown file ``page`` holds a line `BEGIN` once and, after it, a
    line `END` once (FileNotFoundError when there is no such file, ValueError naming it
    otherwise); returns its lines."""
    with open(page) as stream:
        lines = stream.read().splitlines(keepends=True)
    begins, ends = _marker_lines(lines)
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError(
            f"{page} must hold the line {BEGIN!r} once and, after it, the line {END!r} once; "
            "the report goes between them"
        )
    return lines


def update_page(page, config, analysed, output_dir):
    """Replaces the lines between `BEGIN` and `END` in the Markdown file ``page`` (see
    `check_page`) by the report (``analysed``: what `write_report` returned second), its plots
    linked relative to the page; nothing else of the page changes."""
    lines = check_page(page)
    (begin,), (end,) = _marker_lines(lines)
    prefix = os.path.relpath(output_dir, os.path.dirname(os.path.abspath(page)))
    prefix = prefix.replace(os.sep, "/") + "/"
    text = markdown(config, *analysed, link_prefix=prefix)
    _files.write_text(page, "".join(lines[: begin + 1]) + text + "".join(lines[end:]))
