"""The large-batch study's second edition: each claim tested where it was made.

- **Arm A** (``resnet_lars``): LARS with the MLPerf ResNet-50 reference's choices against
  Nesterov momentum on a batch-normalized keras-hub ResNet, Fashion-MNIST, target a
  validation accuracy (You, Gitman, Ginsburg, arXiv:1708.03888; Nado et al.,
  arXiv:2102.06356).
- **Arm B** (``bert_lamb``): LAMB against AdamW on masked-LM pretraining of a small
  post-LayerNorm keras-hub BERT on English documentation that Debian ships, target a
  validation masked-LM loss (You et al., arXiv:1904.00962).

Per arm a pilot measures the baseline's critical batch size (McCandlish et al.,
arXiv:1812.06162), and the main cells run both optimizers at multiples of it; each cell is
searched over ranges centred by the optimizer's scaling rule, refined around its best, and
rerun with fresh seeds; the rate is constant after its warmup, so the steps to the target do
not depend on a budget's end. The verdict is `keras_largebatch.study.criteria`'s, the same
both ways, written before the run.

Modules: `spaces` (the optimizers and their search spaces), `config` (the arms, settings and
presets), `resnet` and `bert_mlm` (the workloads; `bert_mlm_data` the masked-LM corpus,
prepared and cached, `debian_text` the text it reads), `measures` (evaluation steps, steps to a
target), `protocol` (a cell's trials as a function of the ledger), `trial` (one training run),
`analysis` (seeds, the pilot's fit, the batch sizes, the verdict), `report` and `plots`,
`estimate` (the cost here), `runner` and `__main__` (the command).
"""
