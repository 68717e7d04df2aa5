"""BERT pretraining: the record schema (``records``), data creation (``corpus``, ``vocab``,
``instances``, ``masking``, ``instance_tasks``, ``pretraining_data``, the ``create_data``
command) and input (``input_pipeline``).

Nothing is imported here, so ``import keras_largebatch.bert`` stays cheap; import the modules.
"""
