"""The command line every recipe's command shares: ``[--config NAME|FILE.yaml] [--print-config]
[--list-configs] [key=value ...]``, errors as one line and exit status 2, the summary as JSON on
stdout.

The recipes of the repository's ``tpu_configs/`` ship in the package (the wheel installs them as
``keras_largebatch/tpu_configs/*.yaml``), so ``--config bert_large_lamb_32k`` names one wherever
the command runs. A command's bundled configs are those its own config class loads.
"""

import argparse
import json
import sys
from pathlib import Path

from keras_largebatch._logging import quiet_tensorflow_logs


class ArgumentParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` that also accepts ``--output_dir`` for ``--output-dir``.

    Every command's options are spelled with dashes, and that spelling is the only one its help
    and errors show; the underscore spelling of earlier versions still parses. Only the option's
    name is respelled (``--output_dir=a_b`` is ``--output-dir=a_b``), and nothing after ``--``.
    """

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        end = args.index("--") if "--" in args else len(args)
        return super().parse_known_args(
            [_dashed(argument) for argument in args[:end]] + args[end:], namespace
        )


def _dashed(argument):
    if not argument.startswith("--"):
        return argument
    name, separator, value = argument.partition("=")
    return name.replace("_", "-") + separator + value


def bundled_config_directory():
    """The directory of the bundled configs: ``keras_largebatch/tpu_configs`` in an installed
    wheel, else (running from a checkout of the repository) its top-level ``tpu_configs/``."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "tpu_configs"
    return installed if installed.is_dir() else package.parent / "tpu_configs"


def bundled_configs(load_config):
    """The bundled configs that ``load_config(path)`` loads, as ``{name: path}`` sorted by name
    (the name is the file's stem): a BERT command's loader takes the BERT recipes, an image
    command's the image recipes."""
    configs = {}
    for path in sorted(bundled_config_directory().glob("*.yaml")):
        try:
            load_config(str(path))
        except (TypeError, ValueError):
            continue
        configs[path.stem] = str(path)
    return configs


def config_path(config, load_config):
    """The file that ``--config CONFIG`` names; None stays None (the embedded defaults).

    CONFIG is a path if it is a file or reads as one, with a directory or a suffix
    (``tpu_configs/bert_tiny_default.yaml``, ``my.yaml``: opening a missing one is the error).
    A bare name is a bundled config that ``load_config`` loads, unless a file of that name
    exists: the file wins.

    Raises:
        ValueError: a bare name that is neither a file nor one of those recipes; the message
            lists their names.
    """
    if config is None or _is_path(config):
        return config
    configs = bundled_configs(load_config)
    if config in configs:
        return configs[config]
    another = (bundled_config_directory() / f"{config}.yaml").is_file()
    raise ValueError(
        f"--config {config!r} is neither a file nor one of this command's bundled configs"
        f"{' (it is one of another command)' if another else ''}: {', '.join(configs)}"
    )


def _is_path(config):
    path = Path(config)
    return path.is_file() or bool(path.suffix) or path.name != config


def build_parser(prog, description, example_overrides):
    """The argument parser of a recipe's command."""
    parser = ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"Overrides use dotted keys and YAML values, e.g. {example_overrides}",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="NAME|FILE.yaml",
        help="a bundled config (see --list-configs) or a YAML file with any subset of the "
        "config's fields; a file of that name wins (default: the embedded defaults)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as YAML and exit without training",
    )
    parser.add_argument(
        "--list-configs",
        action="store_true",
        help="print the names of the bundled configs this command runs and exit",
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides applied after the file"
    )
    return parser


def run_command(parser, args, load_config, run):
    """Given the parsed command line ``args`` (``parser.parse_args``), loads the config with
    ``load_config(path, overrides)`` and runs ``run(config)``, printing its summary; returns the
    process exit status.

    A config loads and prints without TensorFlow; TensorFlow's start-up lines are quieted
    (`keras_largebatch._logging.quiet_tensorflow_logs`) just before the run imports it.
    """
    if args.list_configs:
        print("\n".join(bundled_configs(load_config)))
        return 0
    try:
        config = load_config(config_path(args.config, load_config), args.overrides)
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
