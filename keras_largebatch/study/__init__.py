"""How big can the batch be? A large-batch study on Fashion-MNIST.

Does LARS or LAMB let data parallelism go to larger batches than SGD with momentum or Adam?
One CNN is trained at batch sizes from 64 up with the four optimizers, each given the same
quasi-random search over the same ranges at every batch size and a step budget large enough
to reach the target; the study records the steps to validation-accuracy targets, reruns each
cell's best settings with more seeds, fits the critical batch size and measures the gradient
noise scale, and says which of the pre-stated criteria held.

- Shallue et al., "Measuring the Effects of Data Parallelism on Neural Network Training",
  JMLR 2019, arXiv:1811.03600: steps to a validation target against batch size, a search per
  batch size, perfect scaling and its end; the simple CNN on Fashion-MNIST.
- Nado et al., "A Large Batch Optimizer Reality Check: Traditional, Generic Optimizers
  Suffice Across Batch Sizes", arXiv:2102.06356: an equal tuning and step budget for every
  optimizer.
- McCandlish et al., "An Empirical Model of Large-Batch Training", arXiv:1812.06162: the
  critical batch size and the gradient noise scale ``B_simple``.

Modules: `config` (settings, presets, checks), `optimizers` (the four and their search
spaces), `search` (points to settings, range edges), `sobol` (the quasi-random points),
`model`, `data` (the stratified validation split), `measures` (evaluation points, steps to a
target, divergence, perfect scaling), `protocol` (one cell's trials as a function of the
ledger), `trial` (one training run), `noise` (``B_simple`` with an error bar), `ledger` (the
CSV and the settings beside it), `analysis` (seeds, fits, criteria), `report` (the Markdown and
the page's block), `plots`, `estimate` (the wall time here), `runner` (the whole study) and
`__main__` (the command).
"""
