"""``python -m keras_largebatch.vision`` (``keras-largebatch-train-images``): train an image
classifier with LARS; see `keras_largebatch.vision`."""

import sys

from keras_largebatch import _extras
from keras_largebatch.training import command
from keras_largebatch.vision import train


def build_parser():
    """The command line of ``keras-largebatch-train-images``."""
    return command.build_parser(
        "keras-largebatch-train-images",
        "Train an image classifier with LARS. With no arguments: the embedded default job "
        "(a small ResNet on Fashion-MNIST to 90% accuracy, sized for a CPU).",
        "model.architecture=resnet50 phases.0.global_batch_size=32768 "
        "data.dataset=imagenet data.train_files=['gs://bucket/train-*'] strategy.name=tpu",
    )


def main(argv=None):
    """Entry point of ``keras-largebatch-train-images``; returns the process exit status."""
    parser = build_parser()
    args = _extras.exit_unless_installed("keras-largebatch-train-images", "vision", parser, argv)
    from keras_largebatch.vision import config as config_lib

    return command.run_command(parser, args, config_lib.load_config, train)


if __name__ == "__main__":
    sys.exit(main())
