"""Plot a learning-rate schedule to a PNG, to check warmup and decay before a run.

`plot_schedule` draws any schedule; its command, which also reads a run's config, is
`keras-largebatch-plot-schedule` (`keras_largebatch.plot_schedule`). Plotting needs the
``plot`` extra (matplotlib).
"""

import keras
import numpy as np

from keras_largebatch import _extras, _files
from keras_largebatch._checks import check_integer, check_number
from keras_largebatch.schedules.multi_phase import MultiPhaseSchedule


def plot_schedule(schedule, output_path, total_steps=None, num_points=1000, title=None):
    """Evaluates `schedule` on steps `0..total_steps` and writes a PNG plot.

    Args:
        schedule: a `LearningRateSchedule` (or any callable `step -> rate`).
        output_path: the PNG file to write.
        total_steps: the last step plotted. Defaults to the schedule's
            `total_steps` attribute (the schedules of
            `keras_largebatch.schedules` that have an end).
        num_points: `>= 2`, how many steps are evaluated, evenly spaced; the
            ends of warmup and phase boundaries are always included so that
            peaks are drawn at their true height. Defaults to `1000`.
        title: the plot's title. Defaults to the schedule's class name.

    Returns:
        `(steps, learning_rates)`, the plotted values as NumPy arrays.
    """
    if total_steps is None:
        total_steps = getattr(schedule, "total_steps", None)
        if total_steps is None:
            raise ValueError(
                f"total_steps is needed to plot a {type(schedule).__name__}, "
                "which has no total_steps of its own"
            )
    check_number("total_steps", total_steps, low=0, low_open=True)
    check_integer("num_points", num_points, low=2)
    # Imported here so that importing the package does not need matplotlib, and with the Agg
    # backend so that it works without a display.
    try:
        import matplotlib
    except ModuleNotFoundError as error:
        raise _extras.missing_extra("plotting a schedule", "plot", error) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.linspace(0, total_steps, num_points).round()
    steps = np.unique(np.concatenate([steps, _corner_steps(schedule)]))
    steps = steps[steps <= total_steps].astype(np.int64)
    learning_rates = np.array(
        [float(keras.ops.convert_to_numpy(schedule(int(step)))) for step in steps]
    )

    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.plot(steps, learning_rates)
    if isinstance(schedule, MultiPhaseSchedule):
        for start in schedule.phase_starts[1:]:
            axes.axvline(start, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("step")
    axes.set_ylabel("learning rate")
    axes.set_title(title or type(schedule).__name__)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    with _files.replacing(output_path) as temporary:
        figure.savefig(temporary, format="png", dpi=100)
    plt.close(figure)
    return steps, learning_rates


def _corner_steps(schedule):
    """Steps where the schedule peaks or restarts, which sampling could miss."""
    if isinstance(schedule, MultiPhaseSchedule):
        return [
            start + offset
            for phase, start in zip(schedule.phases, schedule.phase_starts)
            for offset in (0, phase["warmup_steps"], phase["steps"] - 1)
        ]
    warmup_steps = getattr(schedule, "warmup_steps", None)
    return [] if warmup_steps is None else [warmup_steps]
