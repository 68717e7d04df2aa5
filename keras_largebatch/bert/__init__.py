"""BERT pretraining: data creation (``create_data``, ``vocab``, ``corpus``) and input (``input_pipeline``).

Nothing is imported here, so ``import keras_largebatch.bert`` stays cheap; import the modules.
"""
