"""``python -m keras_largebatch.bert.pretraining`` (``keras-largebatch-pretrain``): pretrain
BERT with LAMB; see `keras_largebatch.bert.pretraining`."""

import sys

from keras_largebatch import _extras
from keras_largebatch.bert.pretraining import pretrain
from keras_largebatch.training import command


def build_parser():
    """The command line of ``keras-largebatch-pretrain``."""
    return command.build_parser(
        "keras-largebatch-pretrain",
        "Pretrain BERT with LAMB. With no arguments: the embedded default job (BERT-tiny on the "
        "default corpus, sized for a CPU).",
        "model.size=mini phases.0.steps=100 phases.0.peak_learning_rate=6.0e-3 "
        "optimizer.global_clipnorm=null strategy.name=tpu mixed_precision=mixed_bfloat16",
    )


def main(argv=None):
    """Entry point of ``keras-largebatch-pretrain``; returns the process exit status."""
    parser = build_parser()
    args = _extras.exit_unless_installed("keras-largebatch-pretrain", "bert", parser, argv)
    from keras_largebatch.bert.pretraining import config as config_lib

    return command.run_command(parser, args, config_lib.load_config, pretrain)


if __name__ == "__main__":
    sys.exit(main())
