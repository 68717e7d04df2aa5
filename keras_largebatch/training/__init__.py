"""Running any recipe: run configs (`config`), the run directory (`run_directory`), the recipe
interface (`recipe`) and the trainer that runs a recipe's phases (`trainer`).

Nothing is imported here, so ``import keras_largebatch.training`` stays cheap; import the
modules.
"""
