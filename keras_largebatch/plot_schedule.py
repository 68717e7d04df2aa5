"""The command `keras-largebatch-plot-schedule`: a learning-rate schedule to a PNG.

    keras-largebatch-plot-schedule lr.png --config phases.yaml
    keras-largebatch-plot-schedule lr.png --config bert_large_lamb_64k_32k
    keras-largebatch-plot-schedule lr.png --peak-learning-rate 6e-3 \\
        --total-steps 7038 --warmup-steps 2000 --power 0.5

`--config` reads a YAML or JSON file holding a pretraining config (`keras-largebatch-pretrain
--config`, or just its `phases:` list; omitted phase fields take the pretraining defaults) or a
serialized schedule (the output of `keras.optimizers.schedules.serialize`), or names a bundled
BERT recipe as `keras-largebatch-pretrain --config` does.

The plotting lives with the schedules, in `keras_largebatch.schedules.plot`. It is imported
inside the functions (importing the schedules imports Keras), so that `main` quiets
TensorFlow's start-up lines before TensorFlow is first imported.
"""

from keras_largebatch import _extras
from keras_largebatch._logging import quiet_tensorflow_logs
from keras_largebatch.training import command


def plot_schedule(schedule, output_path, *args, **kwargs):
    """`keras_largebatch.schedules.plot.plot_schedule` (same arguments and result)."""
    from keras_largebatch.schedules import plot

    return plot.plot_schedule(schedule, output_path, *args, **kwargs)


def schedule_from_config(config):
    """The schedule described by a loaded YAML/JSON config (see the module docstring).

    A serialized schedule is deserialized. Anything else is read as the pretraining command
    reads its config (`keras_largebatch.bert.config`; a bare ``phases:`` list is one), so phase
    defaults and data keys such as ``seq_length`` give exactly the curve a pretraining run
    follows: one warmup and decay per phase.
    """
    import keras

    from keras_largebatch.bert.config import config_from_dict
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
    schedule_keys = PHASE_REQUIRED + tuple(PHASE_DEFAULTS)
    phases = config_from_dict(config).phases
    return MultiPhaseSchedule(
        [{key: getattr(phase, key) for key in schedule_keys} for phase in phases]
    )


def _parser():
    parser = command.ArgumentParser(
        prog="keras-largebatch-plot-schedule",
        description="Plot a learning-rate schedule to a PNG file.",
    )
    parser.add_argument("output", help="the PNG file to write")
    parser.add_argument(
        "--config",
        metavar="NAME|FILE",
        help="a bundled BERT recipe (keras-largebatch-pretrain --list-configs), or a YAML or "
        "JSON file with a 'phases' list or a serialized schedule; a file of that name wins",
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
    parser = _parser()
    _extras.exit_unless_installed("keras-largebatch-plot-schedule", "plot", parser, argv)
    quiet_tensorflow_logs()
    import yaml

    from keras_largebatch.bert import config as bert_config
    from keras_largebatch.schedules import WarmupPolynomialDecay

    args = parser.parse_args(argv)
    direct = (args.peak_learning_rate, args.warmup_steps)
    try:
        if args.config is not None:
            if any(value is not None for value in direct):
                parser.error(
                    "--peak-learning-rate and --warmup-steps describe a schedule; "
                    "give them or --config, not both"
                )
            with open(command.config_path(args.config, bert_config.load_config)) as file:
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
