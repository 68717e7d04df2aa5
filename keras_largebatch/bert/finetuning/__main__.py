"""``python -m keras_largebatch.bert.finetuning`` (``keras-largebatch-finetune``): fine-tune a
preset on a GLUE task; see `keras_largebatch.bert.finetuning`."""

import sys

from keras_largebatch import _extras
from keras_largebatch.bert.finetuning import finetune, run_embedded_default
from keras_largebatch.training import command


def run(config):
    """One fine-tuning run, or the embedded default when ``model.preset`` is null."""
    if config.is_embedded_default():
        return run_embedded_default(config)
    return finetune(config)


def build_parser():
    """The command line of ``keras-largebatch-finetune``."""
    return command.build_parser(
        "keras-largebatch-finetune",
        "Fine-tune a BERT preset on a GLUE task. With no arguments: the embedded default "
        "(the default tiny pretraining run exported and fine-tuned on a small offline task, "
        "next to a random initialization of the same model, sized for a CPU).",
        "model.preset=presets/bert_base_en_uncased data.task=sst2 data.glue_dir=glue_data/SST-2 "
        "phases.0.peak_learning_rate=2.0e-5 optimizer.name=lamb",
    )


def main(argv=None):
    """Entry point of ``keras-largebatch-finetune``; returns the process exit status."""
    parser = build_parser()
    args = _extras.exit_unless_installed("keras-largebatch-finetune", "bert", parser, argv)
    from keras_largebatch.bert.finetuning import config as finetune_config

    return command.run_command(parser, args, finetune_config.load_config, run)


if __name__ == "__main__":
    sys.exit(main())
