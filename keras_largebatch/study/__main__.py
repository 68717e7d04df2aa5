"""``python -m keras_largebatch.study`` (``keras-largebatch-study``): run the large-batch study.

Parses the options and calls `runner.run_study` (or, with ``--report-only``,
`runner.report_only`; with ``--estimate``, `runner.estimate`); see `keras_largebatch.study`.
"""

import sys

from keras_largebatch import _extras
from keras_largebatch._logging import quiet_tensorflow_logs
from keras_largebatch.training import command


def integer_list(text):
    return [int(item) for item in text.split(",") if item]


def name_list(text):
    return [item for item in text.split(",") if item]


def parse_arguments(argv=None):
    parser = command.ArgumentParser(
        prog="keras-largebatch-study",
        description="Train one CNN on Fashion-MNIST at batch sizes from small to large with "
        "SGD-momentum, AdamW, LARS and LAMB, each searched the same way at every batch size; "
        "measure the steps to validation targets, rerun the best settings with more seeds, "
        "and write a ledger of every trial, a report and plots. A stopped study resumes.",
    )
    parser.add_argument("--preset", default="default", help="tiny, default or full")
    parser.add_argument(
        "--output-dir", help="where the ledger and report go (default: runs/study-PRESET)"
    )
    parser.add_argument("--optimizers", type=name_list, help="e.g. sgd_momentum,adamw,lars,lamb")
    parser.add_argument("--batch-sizes", type=integer_list, help="ascending, e.g. 64,256,1024")
    parser.add_argument("--trials-per-cell", type=int, help="Sobol trials per cell, a power of 2")
    parser.add_argument("--seeds", type=int, help="runs of each cell's best settings")
    parser.add_argument("--data-dir", help="the Fashion-MNIST files (default: Keras cache)")
    parser.add_argument(
        "--page",
        help="a Markdown page whose block between the study-report markers gets the report",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write the report of the ledger in --output-dir as it stands; train nothing",
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="measure the CNN's speed here and print how long the preset would take; train "
        "nothing else",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an output directory holding a study with other settings",
    )
    arguments = parser.parse_args(argv)
    if arguments.output_dir is None:
        arguments.output_dir = f"runs/study-{arguments.preset}"
    return arguments


def main(argv=None):
    arguments = parse_arguments(argv)
    quiet_tensorflow_logs()
    from keras_largebatch.study import config as config_lib
    from keras_largebatch.study.ledger import LedgerError

    try:
        from keras_largebatch.study import runner
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "matplotlib":
            raise
        print(
            "error: the study draws its plots with matplotlib, which is not installed: "
            + _extras.install_command("study"),
            file=sys.stderr,
        )
        return 2

    try:
        if arguments.report_only:
            runner.report_only(arguments.output_dir, page=arguments.page)
            return 0
        config = config_lib.preset(
            arguments.preset,
            optimizers=arguments.optimizers,
            batch_sizes=arguments.batch_sizes,
            trials_per_cell=arguments.trials_per_cell,
            seeds=arguments.seeds,
            data_dir=arguments.data_dir,
        )
        if arguments.estimate:
            for line in runner.estimate(config):
                print(line)
            return 0
        runner.run_study(
            config, arguments.output_dir, overwrite=arguments.overwrite, page=arguments.page
        )
    except (ValueError, TypeError, FileNotFoundError, LedgerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
