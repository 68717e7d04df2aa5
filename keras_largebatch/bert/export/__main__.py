"""``python -m keras_largebatch.bert.export`` (``keras-largebatch-export``): a pretraining run's
checkpoint as a keras-hub preset; see `keras_largebatch.bert.export`."""

import json
import sys

from keras_largebatch import _extras
from keras_largebatch._logging import quiet_tensorflow_logs
from keras_largebatch.bert.export.preset import export_preset
from keras_largebatch.training import command


def build_parser():
    """The command line of ``keras-largebatch-export``."""
    parser = command.ArgumentParser(
        prog="keras-largebatch-export",
        description="Write a checkpoint of a BERT pretraining run (keras-largebatch-pretrain) "
        "as a keras-hub preset: its BertBackbone, a BertTokenizer that tokenizes as pretraining "
        "did, and a BertTextClassifierPreprocessor. A JSON summary is printed on stdout.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the pretraining run's output_dir")
    parser.add_argument(
        "preset_dir", metavar="PRESET_DIR", help="a new or empty local directory for the preset"
    )
    parser.add_argument(
        "--step",
        type=int,
        default=None,
        metavar="N",
        help="the global step of the checkpoint to export (default: the newest readable one)",
    )
    parser.add_argument(
        "--sequence-length",
        type=int,
        default=None,
        metavar="L",
        help="the preprocessor's sequence length (default: the run's longest phase "
        "seq_length; at most the model's position embeddings)",
    )
    return parser


def main(argv=None):
    """Entry point of ``keras-largebatch-export``; returns the process exit status."""
    parser = build_parser()
    args = _extras.exit_unless_installed(parser.prog, "bert", parser, argv)
    quiet_tensorflow_logs()
    try:
        exported = export_preset(
            args.run_dir, args.preset_dir, step=args.step, sequence_length=args.sequence_length
        )
    except (TypeError, ValueError, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(exported, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
