"""Image classification with LARS: ImageNet-format records (`imagenet_records`), Fashion-MNIST
read offline (`fashion_mnist`), augmentation (`preprocessing`), the tf.data input
(`input_pipeline`), the model (`model`), its config (`config`), the recipe on the harness
(`recipe`) and the ``keras-largebatch-train-images`` command (``__main__``), whose library
function is `train`.

    python -m keras_largebatch.vision [--config NAME|FILE.yaml] [key=value ...]

With no arguments this is the embedded default job: the small ResNet with LARS on
Fashion-MNIST, evaluated every epoch on the 10,000 test images, until 90% top-1 accuracy.
``--config resnet50_lars_32k`` (a bundled config, see ``--list-configs``) with
``data.train_files`` and ``data.eval_files`` is the MLPerf ResNet-50 recipe on ImageNet
records. `config.TrainConfig` lists every setting.

The run directory, checkpoints, resume, progress lines, TensorBoard scalars and
``summary.json`` are those of every recipe (`keras_largebatch.training.trainer`); the summary
adds the evaluations, ``target_reached_at_step`` and ``time_to_target_seconds`` (training time,
over resumes, evaluation included). Nothing heavy is imported here, so
``import keras_largebatch.vision`` stays cheap.
"""


def train(config, callbacks=(), log=None):
    """Runs (or resumes, or reports) the run that ``config`` (a validated `config.TrainConfig`,
    never changed) describes; returns its summary (`keras_largebatch.training.trainer.Trainer`).
    """
    # Imported here, so that `main` quiets TensorFlow's start-up lines before they load and
    # --print-config prints without them.
    from keras_largebatch.training.trainer import Trainer
    from keras_largebatch.vision.recipe import ImageClassification

    return Trainer(config, ImageClassification(config), callbacks, log).train()
