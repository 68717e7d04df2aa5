"""``python -m keras_largebatch.plot_schedule`` (``keras-largebatch-plot-schedule``): a
learning-rate schedule to a PNG; see `keras_largebatch.plot_schedule`."""

from keras_largebatch import _extras
from keras_largebatch._logging import quiet_tensorflow_logs
from keras_largebatch.plot_schedule import plot_schedule, schedule_from_config
from keras_largebatch.training import command


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
    args = _extras.exit_unless_installed("keras-largebatch-plot-schedule", "plot", parser, argv)
    quiet_tensorflow_logs()
    import yaml

    from keras_largebatch.bert.pretraining import config as bert_config
    from keras_largebatch.schedules import WarmupPolynomialDecay

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
