"""BERT pretraining with LAMB: the ``keras-largebatch-pretrain`` command and its library function.

    python -m keras_largebatch.bert.pretrain [--config FILE.yaml] [key=value ...]

With no arguments this is the embedded default job: it writes the default corpus (English prose
shipped with Python), its vocabulary and TFRecords under ``runs/bert_tiny_lamb/data``, then
pretrains BERT-tiny with LAMB, printing a progress line per logging window and a JSON summary
at the end. `config.PretrainConfig` lists every setting.

The run directory (``output_dir``) holds ``run_config.json`` (the run's config), the data the
run created, ``checkpoints/`` (``state.json`` names the newest checkpoint, its phase and step),
``logs/`` (TensorBoard scalars at the global optimizer step) and ``summary.json``.

Preemption: a checkpoint (weights and optimizer state) is written every
``checkpoint_interval`` optimizer steps and at the end of each phase; running the same command
again resumes from the newest readable one, at the same phase and step, so at most
``checkpoint_interval`` steps are trained again and none is skipped. With
``data.deterministic`` (the default) the batches are read in a fixed order and the resumed run
skips exactly the batches already trained, so it gives the same weights as an uninterrupted
run (with dropout 0; dropout's random state is not checkpointed). With
``data.deterministic=false`` the input pipeline reads files in parallel and is reseeded from
the step it resumes at. Running the command after the run completed prints the stored summary
and trains nothing. A run directory holding a different config is refused unless
``overwrite=true``, which deletes the run's checkpoints, logs and summary (and recreates the
default data) and starts over. Under MultiWorkerMirroredStrategy only the chief writes
checkpoints, logs and the summary; every worker resumes from the same state file. A newest
checkpoint that cannot be read (truncated by a preempted write or by the storage) is reported,
kept as ``NAME.unreadable``, and the run resumes from the newest older checkpoint it keeps.

The run directory, checkpoints, resume and logging are `keras_largebatch.training`'s; what is
BERT is `keras_largebatch.bert.recipe.BertPretraining`.
"""

import argparse
import json
import sys

from keras_largebatch.bert import config as config_lib
from keras_largebatch.bert.recipe import (
    REPORTED_METRICS,
    BertPretraining,
    build_model,
    build_optimizer,
)
from keras_largebatch.training import trainer
from keras_largebatch.training.run_directory import SUMMARY_FILENAME

__all__ = ["REPORTED_METRICS", "SUMMARY_FILENAME", "build_model", "build_optimizer",
           "build_parser", "main", "pretrain"]


def pretrain(config, callbacks=(), log=None):
    """Runs (or resumes, or reports) the pretraining run that ``config`` describes.

    Args:
        config: a `config.PretrainConfig`; validated here.
        callbacks: extra Keras callbacks added to every phase's `fit`, after the run's own.
        log: a function taking one progress line; default prints to stderr.

    Returns:
        The summary dict, also written to ``OUTPUT_DIR/summary.json``: ``global_steps``,
        ``examples_per_second`` (training throughput of this process, compilation excluded),
        ``initial`` and ``final`` (the first and last logging window's loss and accuracies),
        ``phases`` (per phase: steps, sequence length, batch, throughput), ``strategy``,
        ``model_size``, ``optimizer``, ``resumed_from_step``, ``wall_time_seconds``,
        ``checkpoint``.

    Raises:
        ValueError: a bad config value, output directory holding a different run, record file
            pattern matching nothing, record not matching the phase's lengths, or a batch that
            does not divide over the replicas. All are raised before any training. OSError: no
            checkpoint of the run can be read.
    """
    return trainer.train(config.validate(), BertPretraining(config), callbacks, log)


def build_parser():
    """The command line of ``keras-largebatch-pretrain``."""
    parser = argparse.ArgumentParser(
        prog="keras-largebatch-pretrain",
        description="Pretrain BERT with LAMB. With no arguments: the embedded default job "
                    "(BERT-tiny on the default corpus, a few minutes on a CPU).",
        epilog="Overrides use dotted keys and YAML values, e.g. model.size=mini "
               "phases.0.steps=100 phases.0.peak_learning_rate=6.0e-3 "
               "optimizer.global_clipnorm=null strategy.name=tpu mixed_precision=mixed_bfloat16",
    )
    parser.add_argument("--config", default=None, metavar="FILE.yaml",
                        help="YAML file with any subset of the config's fields (default: the "
                             "embedded defaults)")
    parser.add_argument("--print_config", action="store_true",
                        help="print the resolved config as YAML and exit without training")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides applied after the file")
    return parser


def main(argv=None):
    """Entry point of ``keras-largebatch-pretrain``; returns the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        config = config_lib.load_config(args.config, args.overrides)
        if args.print_config:
            print(config.to_yaml(), end="")
            return 0
        summary = pretrain(config)
    except (TypeError, ValueError, OSError, RuntimeError) as error:
        # TypeError/ValueError: a bad config value; OSError: missing files, output that would
        # be overwritten, or no readable checkpoint; RuntimeError: get_strategy cannot find or
        # reach the TPU.
        print(f"keras-largebatch-pretrain: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
