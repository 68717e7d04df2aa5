"""The data's defaults that the pretraining config shares, in a module that imports nothing, so
that a config loads and prints without TensorFlow."""

# google-research/bert's defaults for --max_seq_length, --max_predictions_per_seq and
# --random_seed.
DEFAULT_MAX_SEQ_LENGTH = 128
DEFAULT_MAX_PREDICTIONS_PER_SEQ = 20
DEFAULT_SEED = 12345
# google-research/bert's --masked_lm_prob.
DEFAULT_MASKED_LM_PROB = 0.15
# Passes over the default corpus: enough instances for the default job to read each only a few
# times (the manifest of the records says how many there are).
DEFAULT_CORPUS_DUPE_FACTOR = 5
