"""Plot a learning-rate schedule to a PNG, to check warmup and decay before a run.

Command line (`keras-largebatch-plot-schedule`):

    keras-largebatch-plot-schedule lr.png --config phases.yaml
    keras-largebatch-plot-schedule lr.png --peak-learning-rate 6e-3 \\
        --total-steps 7038 --warmup-steps 2000 --power 0.5

`--config` reads a YAML or JSON file holding a pretraining config (`keras-largebatch-pretrain
--config`, or just its `phases:` list; omitted phase fields take the pretraining defaults) or a
serialized schedule (the output of `keras.optimizers.schedules.serialize`).

Keras and the schedules are imported inside the functions, so that the command can quiet
TensorFlow's start-up lines before TensorFlow is first imported.
"""

import argparse

import numpy as np
import yaml

from keras_largebatch._checks import check_integer, check_number
from keras_largebatch._logging import quiet_tensorflow_logs


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
    import keras

    from keras_largebatch.schedules import MultiPhaseSchedule

    steps = np.linspace(0, total_steps, num_points).round()
    steps = np.unique(np.concatenate([steps, _corner_steps(schedule)]))
    steps = steps[steps <= total_steps].astype(np.int64)
    learning_rates = np.array(
        [float(keras.ops.convert_to_numpy(schedule(int(step)))) for step in steps]
    )

    # Imported here so that importing the package does not need matplotlib,
    # and with the Agg backend so that it works without a display.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    figure.savefig(output_path, format="png", dpi=100)
    plt.close(figure)
    return steps, learning_rates


def _corner_steps(schedule):
    """Steps where the schedule peaks or restarts, which sampling could miss."""
    from keras_largebatch.schedules import MultiPhaseSchedule

    if isinstance(schedule, MultiPhaseSchedule):
        return [
            start + offset
            for phase, start in zip(schedule.phases, schedule.phase_starts)
            for offset in (0, phase["warmup_steps"], phase["steps"] - 1)
        ]
    warmup_steps = getattr(schedule, "warmup_steps", None)
    return [] if warmup_steps is None else [warmup_steps]


def schedule_from_config(config):
    """The schedule described by a loaded YAML/JSON config (see module doc).

    A serialized schedule is deserialized. Anything else is read as the pretraining command
    reads its config (a bare ``phases:`` list is one), so phase defaults and data keys such as
    ``seq_length`` give exactly the curve a pretraining run follows: one warmup and decay per
    phase.
    """
    import keras

    from keras_largebatch.schedules.multi_phase import (
        PHASE_DEFAULTS,
        PHASE_REQUIRED,
        MultiPhaseSchedule,
    )

    if isinstance(config, dict) and "class_name" in config:
        return keras.optimizers.schedules.deserialize(config)
    if not isinstance(config, dict):
        raise ValueError(
            "the config must hold a 'phases' list, a pretraining config or a serialized "
            f"schedule (a dict with 'class_name'), got {type(config).__name__}"
        )
    # Imported here: the BERT recipe builds on the schedules, not the other way round.
    from keras_largebatch.bert.config import config_from_dict

    schedule_keys = PHASE_REQUIRED + tuple(PHASE_DEFAULTS)
    phases = config_from_dict(config).phases
    return MultiPhaseSchedule(
        [{key: getattr(phase, key) for key in schedule_keys} for phase in phases]
    )


def _parser():
    parser = argparse.ArgumentParser(
        prog="keras-largebatch-plot-schedule",
        description="Plot a learning-rate schedule to a PNG file.",
    )
    parser.add_argument("output", help="the PNG file to write")
    parser.add_argument(
        "--config",
        help="YAML or JSON file with a 'phases' list or a serialized schedule",
    )
    parser.add_argument(
        "--peak-learning-rate",
        type=float,
        help="without --config: plot WarmupPolynomialDecay with this peak",
    )
    parser.add_argument(
        "--total-steps",
        type=int,
        help="the schedule's total steps; with --config, the last step plotted",
    )
    parser.add_argument("--warmup-steps", type=int, help="without --config: warmup steps")
    parser.add_argument(
        "--end-learning-rate", type=float, default=0.0, help="without --config (default 0)"
    )
    parser.add_argument("--power", type=float, default=1.0, help="without --config (default 1)")
    parser.add_argument(
        "--num-points", type=int, default=1000, help="steps evaluated (default 1000)"
    )
    parser.add_argument("--title", help="plot title (default: the schedule's class)")
    return parser


def main(argv=None):
    """Entry point of `keras-largebatch-plot-schedule`; returns the exit status."""
    quiet_tensorflow_logs()
    from keras_largebatch.schedules import WarmupPolynomialDecay

    parser = _parser()
    args = parser.parse_args(argv)
    direct = (args.peak_learning_rate, args.warmup_steps)
    try:
        if args.config is not None:
            if any(value is not None for value in direct):
                parser.error(
                    "--peak-learning-rate and --warmup-steps describe a schedule; "
                    "give them or --config, not both"
                )
            with open(args.config) as file:
                schedule = schedule_from_config(yaml.safe_load(file))
        else:
            if args.total_steps is None or any(value is None for value in direct):
                parser.error(
                    "give --config, or all of --peak-learning-rate, --total-steps and "
                    "--warmup-steps"
                )
            schedule = WarmupPolynomialDecay(
                peak_learning_rate=args.peak_learning_rate,
                total_steps=args.total_steps,
                warmup_steps=args.warmup_steps,
                end_learning_rate=args.end_learning_rate,
                power=args.power,
            )
        plot_schedule(
            schedule,
            args.output,
            total_steps=args.total_steps,
            num_points=args.num_points,
            title=args.title,
        )
    except (OSError, TypeError, ValueError) as error:
        parser.error(str(error))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
