"""How big can the batch be? A large-batch study on Fashion-MNIST.

One model trained at batch sizes from small to the largest the data allows, with SGD with
Nesterov momentum, AdamW, LARS and LAMB, each given the same learning-rate search and the same
epoch budget at every batch size; the study records for every trial the test accuracy at the
end of the budget, the steps to reach a target test accuracy, and whether it diverged, and
marks the gradient noise scale measured at the smallest batch.

- Shallue et al., "Measuring the Effects of Data Parallelism on Neural Network Training",
  JMLR 2019, arXiv:1811.03600: steps to a target against batch size, a search per batch
  size, perfect scaling and its end; the simple CNN on Fashion-MNIST.
- Nado et al., "A Large Batch Optimizer Reality Check: Traditional, Generic Optimizers
  Suffice Across Batch Sizes", arXiv:2102.06356: an equal tuning budget for every optimizer.
- McCandlish et al., "An Empirical Model of Large-Batch Training", arXiv:1812.06162: the
  gradient noise scale ``B_simple``.

Modules: `config` (settings and presets), `grid` (the trials and their learning rates),
`optimizers` (the four optimizers and their starting points), `model`, `data`, `measures`
(steps to target, divergence, perfect scaling), `trial` (one training run), `noise`
(the noise-scale measurement), `ledger` (the CSV and the settings beside it), `report` (the
table and the plots), `runner` (the whole study) and `__main__` (the command).
"""
