"""BERT pretraining: data (``corpus``, ``vocab``, ``create_data``) and input (``input_pipeline``).

Nothing is imported here, so ``import keras_largebatch.bert`` stays cheap; import the modules.
"""
