"""Layer-wise adaptive optimizers: the math of the project."""

from keras_largebatch.optimizers.lamb import LAMB
from keras_largebatch.optimizers.lars import LARS
from keras_largebatch.optimizers.trust_ratio import ExclusionRule, biases_and_norms, trust_ratio

__all__ = ["LAMB", "LARS", "ExclusionRule", "biases_and_norms", "trust_ratio"]
