"""The interface between a task (language-model pretraining, image classification) and the
trainer.

A recipe says what to train; `keras_largebatch.training.trainer.Trainer` runs it: picks the
devices (`training.devices`: a tf.distribute strategy on TensorFlow, DataParallel on JAX, or
ModelParallel with the recipe's `Recipe.layout_map`),
resolves the config into a plan for their replicas (`training.plan`), claims the run
directory, builds the model in their scope, and for each phase builds the optimizer,
positions the data at the step it resumes from, trains logging windows, and writes
checkpoints, TensorBoard scalars and the summary. Each per-phase method receives the phase's
plan, a frozen `training.plan.PhasePlan`: its resolved batch split (``global_batch_size``,
``num_replicas``, ``micro_batch_size``, ``per_replica_batch_size``,
``gradient_accumulation_steps``), ``steps``, ``index`` and ``settings``, a copy of the
phase's config with the recipe's own fields. The trainer knows nothing of the task beyond these
methods; the recipe knows nothing of checkpoints, resume or logging.
"""

import abc


class Recipe(abc.ABC):
    """Base class of a task. A subclass implements the abstract methods (`build_model`,
    `build_optimizer`, `dataset`); one that returns an `evaluation_interval` also implements
    ``evaluate(model)``, returning a dict of metrics on the task's held-out data (every
    example counted once: `training.evaluation`, whose ``examples`` count the summary's
    evaluations record), and may name the `best_metric` whose best evaluation's weights the run
    keeps.

    Attributes:
        name: a short name, used in the log prefix of the task's command.
        reported_metrics: the metrics (of `model.fit`'s logs) that progress lines and the
            summary's ``initial`` and ``final`` report, in this order; ``loss`` first.
        progress_metrics: ``(label, metric)`` pairs shown in progress lines.
    """

    name = "train"
    reported_metrics = ("loss",)
    progress_metrics = (("loss", "loss"),)

    def prepare(self, plan, log, record_counts):
        """Checks (and, if the task creates them, creates) the inputs of every phase.

        Called once, with the run's `training.plan.RunPlan`, a progress ``log`` and the run's
        `keras_largebatch.input_order.RecordCounts` (the records of each input file, cached in
        the run directory: keep it for `dataset`), after the run directory is claimed, before
        the model is built. Raise ValueError for bad input here, before any training.
        """

    def layout_map(self, device_mesh):
        """The `keras.distribution.LayoutMap` of the model's variables on ``device_mesh`` (a
        `keras.distribution.DeviceMesh` of axes ``("batch", "model")``), for
        ``strategy.name=model_parallel`` on JAX: which kernels are split over the "model" axis
        and how (variables it names nothing for are replicated). Called once, when the devices
        are picked, before `prepare`; raise ValueError there for a model that does not split
        over the mesh.

        The default refuses: a recipe without a layout map trains with data_parallel only.
        """
        raise ValueError(
            f"strategy.name=model_parallel needs a layout map of the model's variables, and the "
            f"{self.name!r} recipe ({type(self).__name__}) has none; allowed for it: "
            "strategy.name=data_parallel (or auto)"
        )

    @abc.abstractmethod
    def build_model(self):
        """A new, built Keras model (called inside the devices' scope)."""

    def initialize(self, model):
        """Sets the weights a new run starts from, such as a pretrained model's; the default
        keeps ``model``'s own. Called once, right after `build_model`, only when the run starts
        from step 0: a resumed run restores its own checkpoint instead."""

    @abc.abstractmethod
    def build_optimizer(self, phase, model):
        """A fresh optimizer, with its learning-rate schedule, for ``phase`` (its plan),
        accumulating ``phase.gradient_accumulation_steps`` micro-batches per step.

        The trainer wraps it in `keras.optimizers.LossScaleOptimizer` under ``mixed_float16``
        and adds `keras_largebatch.TrustRatioMonitor` when it records trust ratios.
        """

    def compile_arguments(self, phase):
        """Extra keyword arguments of `model.compile` (loss, metrics) for a phase."""
        return {}

    @abc.abstractmethod
    def dataset(self, phase, batch_size, input_context, start_batch):
        """One input pipeline's endless training batches of ``batch_size`` examples for a
        phase, from its batch number ``start_batch``.

        The stream must be a function of the phase, the pipeline and the recipe's seed alone,
        and start at ``start_batch`` without reading the batches before it, so that a run
        resumed at any step reads what an uninterrupted run reads there, at once:
        `keras_largebatch.input_order` orders in-memory examples and record files so.

        Args:
            phase: the phase's plan.
            batch_size: examples per batch: this pipeline's share of one micro-batch.
            input_context: the `tf.distribute.InputContext` of this pipeline: read only its
                share of the data (``num_input_pipelines``, ``input_pipeline_id``).
            start_batch: batches of this pipeline already trained on in the phase.
        """

    def callbacks(self, phase):
        """Keras callbacks of the task for a phase, run before the trainer's own."""
        return []

    def evaluation_interval(self, phase):
        """Optimizer steps between calls of ``evaluate(model)`` in a phase (a multiple of the
        run's ``log_interval``), or None (the default) for no evaluation. A phase that
        evaluates is also evaluated at its end."""
        return None

    def best_metric(self):
        """The metric of ``evaluate``'s results, higher is better, by which the run keeps the
        weights of its best evaluation (`run_directory.RunDirectory.save_best`; the summary's
        ``best``), or None (the default): none kept. An evaluation replaces the kept one only
        when strictly better (a NaN never is); the kept one survives a resume."""
        return None

    def target_reached(self, evaluation):
        """True when an evaluation reaches the task's target, which ends the run there (the
        MLPerf rule: train until the target quality, report the time it took)."""
        return False

    def phase_summary(self, phase):
        """Fields of the task added to a phase's entry in the summary."""
        return {}

    def summary(self):
        """Fields of the task added to the run's summary."""
        return {}
