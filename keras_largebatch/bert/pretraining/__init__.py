"""BERT pretraining with LAMB: the model (`model`), its config (`config`), input (`input_pipeline`),
the recipe on the harness (`recipe`), the ``keras-largebatch-pretrain`` command (``__main__``) and
its library function `pretrain`.

    python -m keras_largebatch.bert.pretraining [--config NAME|FILE.yaml] [key=value ...]

With no arguments this is the embedded default job: it writes the default corpus (English prose
shipped with Python), its vocabulary and TFRecords under ``runs/bert_tiny_lamb/data``, then
pretrains BERT-tiny with LAMB, printing a progress line per logging window and a JSON summary
at the end. `config.PretrainConfig` lists every setting.

The run directory (``output_dir``) holds ``run_config.json`` (the run's config), the data the
run created, ``checkpoints/`` (``state.json`` names the newest checkpoint, its phase and step),
``logs/`` (TensorBoard scalars at the global optimizer step) and ``summary.json``.

Preemption: a checkpoint (weights and optimizer state) is written every ``checkpoint_interval``
optimizer steps and at the end of each phase; running the same command again resumes from the
newest readable one, at the same phase and step, so at most ``checkpoint_interval`` steps are
trained again and none is skipped. The training order is a function of ``data.seed`` and the
epoch (`keras_largebatch.input_order`), located at the resumed step without reading the batches
before it, so the resumed run reads what an uninterrupted run reads and gives the same weights
(with dropout 0; dropout's random state is not checkpointed), as quickly at step 100,000 as at
step 10. Running the command after the run completed prints the stored summary and trains
nothing. A run directory holding a different config is refused unless ``overwrite=true``, which
deletes the run's checkpoints, logs and summary (and recreates the default data) and starts
over. Under MultiWorkerMirroredStrategy only the chief writes checkpoints, logs and the
summary; every worker resumes from the same state file. A newest checkpoint that cannot be read
(truncated by a preempted write or by the storage) is reported, kept as ``NAME.unreadable``,
and the run resumes from the newest older checkpoint it keeps.

The run directory, checkpoints, resume and logging are `keras_largebatch.training`'s; what is
BERT is `keras_largebatch.bert.pretraining.recipe` (`BertPretraining`, its model and optimizer).
"""


def pretrain(config, callbacks=(), log=None):
    """Runs (or resumes, or reports) the pretraining run that ``config`` describes.

    Args:
        config: a validated `config.PretrainConfig` (`config.load_config` returns one);
            never changed.
        callbacks: extra Keras callbacks added to every phase's `fit`, after the run's own.
        log: a function taking one progress line; default prints to stderr.

    Returns:
        The summary dict, also written to ``OUTPUT_DIR/summary.json``: ``global_steps``,
        ``examples_per_second`` (training throughput of this process, compilation excluded),
        ``initial`` and ``final`` (the first and last logging window's loss and accuracies),
        ``phases`` (per phase: steps, sequence length, batch, throughput), ``strategy``,
        ``model_size`` (null with a ``model.preset`` or ``model.init_checkpoint``),
        ``initialized_from`` (that start, or null), ``optimizer``, ``resumed_from_step``,
        ``wall_time_seconds``,
        ``checkpoint``.

    Raises:
        ValueError: a bad config value, output directory holding a different run, record file
            pattern matching nothing, record not matching the phase's lengths, or a batch that
            does not divide over the replicas. All are raised before any training. OSError: no
            checkpoint of the run can be read.
    """
    # Imported here, so that `main` quiets TensorFlow's start-up lines before they load and
    # --print-config prints without them.
    from keras_largebatch.bert.pretraining.recipe import BertPretraining
    from keras_largebatch.training.trainer import Trainer

    return Trainer(config, BertPretraining(config), callbacks, log).train()
