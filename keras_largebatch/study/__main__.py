"""``python -m keras_largebatch.study`` (``keras-largebatch-study``): run the large-batch study.

Parses the options and calls `runner.run_study`; see `keras_largebatch.study`.
"""

import argparse
import sys

from keras_largebatch._logging import quiet_tensorflow_logs
from keras_largebatch.training import command


def integer_list(text):
    return [int(item) for item in text.split(",") if item]


def name_list(text):
    return [item for item in text.split(",") if item]


def rule_mapping(text):
    """``lars=sqrt,sgd_nesterov=sqrt`` as a dict; the values are checked with the config."""
    pairs = [item.partition("=") for item in text.split(",") if item]
    if any(not name or not separator or not rule for name, separator, rule in pairs):
        raise argparse.ArgumentTypeError(f"expected OPTIMIZER=RULE,..., got {text!r}")
    return {name: rule for name, _, rule in pairs}


def parse_arguments(argv=None):
    parser = command.ArgumentParser(
        prog="keras-largebatch-study",
        description="Train one CNN on Fashion-MNIST at batch sizes from small to large with "
        "SGD-Nesterov, AdamW, LARS and LAMB, each with the same learning-rate search; write "
        "a CSV of every trial, a summary table and plots. A stopped study resumes.",
    )
    parser.add_argument("--preset", default="default", help="default, large or tiny")
    parser.add_argument(
        "--output-dir", help="where the ledger and plots go (default: runs/study-PRESET)"
    )
    parser.add_argument("--optimizers", type=name_list, help="e.g. sgd_nesterov,adamw,lars,lamb")
    parser.add_argument("--batch-sizes", type=integer_list, help="ascending, e.g. 64,256,1024")
    parser.add_argument(
        "--scaling-rules",
        type=rule_mapping,
        help="replace the rule centring an optimizer's grid, e.g. lars=sqrt",
    )
    parser.add_argument("--epochs", type=int, help="epoch budget of every trial")
    parser.add_argument("--learning-rates-per-cell", type=int, help="k rates per cell")
    parser.add_argument("--target-accuracy", type=float, help="test accuracy to reach")
    parser.add_argument("--data-dir", help="the Fashion-MNIST files (default: Keras cache)")
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
        from keras_largebatch.study.runner import run_study
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "matplotlib":
            raise
        print(
            "error: the study draws its plots with matplotlib, which is not installed: "
            "pip install 'keras-largebatch[study]'",
            file=sys.stderr,
        )
        return 2

    try:
        config = config_lib.preset(
            arguments.preset,
            optimizers=arguments.optimizers,
            batch_sizes=arguments.batch_sizes,
            scaling_rules=arguments.scaling_rules,
            epochs=arguments.epochs,
            learning_rates_per_cell=arguments.learning_rates_per_cell,
            target_accuracy=arguments.target_accuracy,
            data_dir=arguments.data_dir,
        )
        run_study(config, arguments.output_dir, overwrite=arguments.overwrite)
    except (ValueError, TypeError, FileNotFoundError, LedgerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
