"""Image classification with LARS: the ``keras-largebatch-train-images`` command.

    python -m keras_largebatch.vision.train [--config NAME|FILE.yaml] [key=value ...]

With no arguments this is the embedded default job: the small ResNet with LARS on
Fashion-MNIST (read offline, see `keras_largebatch.vision.fashion_mnist`), evaluated every
epoch on the 10,000 test images, until 90% top-1 accuracy. ``--config resnet50_lars_32k``
(a bundled recipe, see ``--list-configs``) with ``data.train_files`` and ``data.eval_files`` is
the MLPerf ResNet-50 recipe on ImageNet records. `config.TrainConfig` lists every setting.

The run directory, checkpoints, resume, progress lines, TensorBoard scalars and
``summary.json`` are those of every recipe (`keras_largebatch.training.trainer`); the summary
adds the evaluations, ``target_reached_at_step`` and ``time_to_target_seconds`` (training time,
over resumes, evaluation included).
"""

import sys

from keras_largebatch import _extras
from keras_largebatch.training import command


def train(config, callbacks=(), log=None):
    """Runs (or resumes, or reports) the run that ``config`` (a validated `config.TrainConfig`,
    never changed) describes; returns its summary (`keras_largebatch.training.trainer.Trainer`).
    """
    # Imported here, so that `main` quiets TensorFlow's start-up lines before they load and
    # --print-config prints without them.
    from keras_largebatch.training.trainer import Trainer
    from keras_largebatch.vision.recipe import ImageClassification

    return Trainer(config, ImageClassification(config), callbacks, log).train()


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
    _extras.exit_unless_installed("keras-largebatch-train-images", "vision", parser, argv)
    from keras_largebatch.vision import config as config_lib

    return command.run_command(parser, argv, config_lib.load_config, train)


if __name__ == "__main__":
    sys.exit(main())
