"""The command `keras-largebatch-plot-schedule`: a learning-rate schedule to a PNG.

    keras-largebatch-plot-schedule lr.png --config phases.yaml
    keras-largebatch-plot-schedule lr.png --config bert_large_lamb_64k_32k
    keras-largebatch-plot-schedule lr.png --peak-learning-rate 6e-3 \\
        --total-steps 7038 --warmup-steps 2000 --power 0.5

`--config` reads a YAML or JSON file holding a pretraining config (`keras-largebatch-pretrain
--config`, or just its `phases:` list; omitted phase fields take the pretraining defaults) or a
serialized schedule (the output of `keras.optimizers.schedules.serialize`), or names a bundled
BERT recipe as `keras-largebatch-pretrain --config` does.

The command is ``__main__``; `schedule_from_config` reads the config and the plotting lives with
the schedules, in `keras_largebatch.schedules.plot`. Both are imported inside the functions
(importing the schedules imports Keras), so that the command quiets TensorFlow's start-up lines
before TensorFlow is first imported.
"""


def plot_schedule(schedule, output_path, *args, **kwargs):
    """`keras_largebatch.schedules.plot.plot_schedule` (same arguments and result)."""
    from keras_largebatch.schedules import plot

    return plot.plot_schedule(schedule, output_path, *args, **kwargs)


def schedule_from_config(config):
    """The schedule described by a loaded YAML/JSON config (see the module docstring).

    A serialized schedule is deserialized. Anything else is read as the pretraining command
    reads its config (`keras_largebatch.bert.pretraining.config`; a bare ``phases:`` list is
    one), so phase defaults and data keys such as ``seq_length`` give exactly the curve a
    pretraining run follows: one warmup and decay per phase.
    """
    import keras

    from keras_largebatch.bert.pretraining.config import config_from_dict
    from keras_largebatch.schedules.multi_phase import (
        PHASE_DEFAULTS,
        PHASE_REQUIRED,
        MultiPhaseSchedule,
    )

    if isinstance(config, dict) and "class_name" in config:
        return keras.optimizers.schedules.deserialize(config)
    if not isinstance(config, dict):
        raise ValueError(
            "the config must hold a 'phases' list, a pretraining config or a serialized "
            f"schedule (a dict with 'class_name'), got {type(config).__name__}"
        )
    schedule_keys = PHASE_REQUIRED + tuple(PHASE_DEFAULTS)
    phases = config_from_dict(config).phases
    return MultiPhaseSchedule(
        [{key: getattr(phase, key) for key in schedule_keys} for phase in phases]
    )
