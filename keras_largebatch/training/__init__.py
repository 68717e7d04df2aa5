"""Running any recipe. The run config goes one way through these modules:

* `config`: run configs (dataclasses of the settings and their checks), validated at load;
  `config_loading` reads them from YAML and ``key=value`` overrides.
* `plan`: the config resolved once, for the replicas present, into a frozen plan.
* `recipe`: the interface a task implements; its per-phase methods receive the phase's plan.
* `trainer`: the `Trainer`, which runs a recipe's phases on the devices (`devices`), in its run
  directory (`run_directory`), and gathers the summary (`summary`).
* `divergence`: the divergence guard; `evaluation`: evaluation that counts every example once;
  `input_release`: a `fit` stopped early drops its input at once.
* `optimizer_factory`: our optimizers or Keras's baselines, with the same exclusions.
* `command`: the command line every recipe's command shares.

Nothing is imported here, so ``import keras_largebatch.training`` stays cheap; import the
modules.
"""
