"""Image classification: ImageNet-format records (``imagenet_records``), their augmentation
(``preprocessing``) and the tf.data input (``input_pipeline``).

Nothing is imported here, so ``import keras_largebatch.vision`` stays cheap; import the modules.
"""
