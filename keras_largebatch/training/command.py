"""The command line every recipe's command shares: ``[--config FILE.yaml] [--print_config]
[key=value ...]``, errors as one line and exit status 2, the summary as JSON on stdout."""

import argparse
import json
import sys

from keras_largebatch._logging import quiet_tensorflow_logs


def build_parser(prog, description, example_overrides):
    """The argument parser of a recipe's command."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"Overrides use dotted keys and YAML values, e.g. {example_overrides}",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="FILE.yaml",
        help="YAML file with any subset of the config's fields (default: the embedded defaults)",
    )
    parser.add_argument(
        "--print_config",
        action="store_true",
        help="print the resolved config as YAML and exit without training",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides applied after the file"
    )
    return parser


def run_command(parser, argv, load_config, run):
    """Parses ``argv``, loads the config with ``load_config(path, overrides)`` and runs
    ``run(config)``, printing its summary; returns the process exit status.

    A config loads and prints without TensorFlow; TensorFlow's start-up lines are quieted
    (`keras_largebatch._logging.quiet_tensorflow_logs`) just before the run imports it.
    """
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        if args.print_config:
            print(config.to_yaml(), end="")
            return 0
        quiet_tensorflow_logs()
        summary = run(config)
    except (TypeError, ValueError, OSError, RuntimeError) as error:
        # TypeError/ValueError: a bad config value or input; OSError: missing files, output
        # that would be overwritten, or no readable checkpoint; RuntimeError: get_strategy
        # cannot find or reach the TPU.
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0
