"""ImageNet augmentation: a random resized crop and a flip for training, a central crop for
evaluation, and per-channel normalization; every output is ``[image_size, image_size, 3]``.

Training takes the crop of the Inception networks (Szegedy et al. 2015, "Going Deeper with
Convolutions", arXiv:1409.4842, section 6): a window of 8% to 100% of the image's area with an
aspect ratio (width / height) in [3/4, 4/3]. As the Cloud TPU reference does
(``tensorflow/tpu`` ``models/official/resnet/resnet_preprocessing.py``), the window is drawn by
`tf.image.stateless_sample_distorted_bounding_box` (up to 10 attempts, the window covering at
least 10% of the image, so in effect 10% to 100%), and when every attempt fails (the sampler
then returns the whole image) the evaluation crop is taken instead. Only the window is decoded
(`tf.image.decode_and_crop_jpeg`), then it is resized to ``image_size`` squared (bilinear, as in
TF Model Garden's ``official/vision/dataloaders/classification_input.py``; the TPU reference uses
bicubic) and flipped left-right with probability 1/2.

Evaluation takes the central square whose side is ``image_size / (image_size + 32)`` of the
shorter side (224 of 256 for ``image_size=224``), decoded alone and resized to ``image_size``.

Both then compute ``(pixel - mean) / stddev`` per channel, in the 0-255 range of the decoded
pixels, with the ImageNet statistics by default, and cast to the requested dtype.

The random draws are stateless: the same ``seed`` gives the same crop and flip in any run.
"""

import tensorflow as tf

from keras_largebatch import _checks

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CROP_PADDING = 32
AREA_RANGE = (0.08, 1.0)
ASPECT_RATIO_RANGE = (3 / 4, 4 / 3)
MIN_OBJECT_COVERED = 0.1
MAX_ATTEMPTS = 10
_WHOLE_IMAGE = ((0.0, 0.0, 1.0, 1.0),)  # [ymin, xmin, ymax, xmax] of the one "object"


def check_preprocessing_arguments(image_size, mean, stddev, dtype):
    """Raises TypeError or ValueError for a bad argument; returns ``dtype`` as a `tf.DType`."""
    _checks.check_integer("image_size", image_size, low=1)
    for argument, values, low_open in (("mean", mean, False), ("stddev", stddev, True)):
        if isinstance(values, str) or not isinstance(values, (list, tuple)):
            raise TypeError(
                f"{argument} must be a list or tuple of 3 numbers (red, green, "
                f"blue), got {values!r}"
            )
        if len(values) != 3:
            raise ValueError(f"{argument} must be 3 numbers (red, green, blue), got {values!r}")
        for channel, value in zip("RGB", values):
            _checks.check_number(f"{argument}[{channel}]", value, low=0, low_open=low_open)
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError as error:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype!r}") from error
    if not dtype.is_floating:
        raise ValueError(
            f"dtype must be a floating-point dtype such as float32 or bfloat16, got {dtype.name}"
        )
    return dtype


def central_crop_window(image_shape, image_size, crop_padding=CROP_PADDING):
    """The evaluation crop of an image of shape ``[height, width, channels]``.

    Returns:
        int32 ``[offset_height, offset_width, side, side]``: the central square of side
        ``floor(image_size / (image_size + crop_padding) * min(height, width))``.
    """
    height, width = image_shape[0], image_shape[1]
    fraction = image_size / (image_size + crop_padding)
    side = tf.cast(fraction * tf.cast(tf.minimum(height, width), tf.float32), tf.int32)
    return tf.stack([(height - side + 1) // 2, (width - side + 1) // 2, side, side])


def random_crop_window(
    image_shape,
    seed,
    image_size,
    area_range=AREA_RANGE,
    aspect_ratio_range=ASPECT_RATIO_RANGE,
    max_attempts=MAX_ATTEMPTS,
):
    """The training crop of an image of shape ``[height, width, channels]``.

    Args:
        image_shape: int32 ``[height, width, channels]``, e.g. `tf.image.extract_jpeg_shape`.
        seed: int ``[2]``, the seed of the stateless draw.
        image_size: the output size, which sets the fallback (evaluation) crop.
        area_range: the window's fraction of the image's area.
        aspect_ratio_range: the window's width / height.
        max_attempts: draws before falling back to `central_crop_window`.

    Returns:
        int32 ``[offset_height, offset_width, height, width]``.
    """
    image_shape = tf.convert_to_tensor(image_shape, tf.int32)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_shape,
        bounding_boxes=tf.constant([_WHOLE_IMAGE], tf.float32),
        seed=seed,
        min_object_covered=MIN_OBJECT_COVERED,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=max_attempts,
        use_image_if_no_bounding_boxes=True,
    )
    is_whole_image = tf.reduce_all(size[:2] == image_shape[:2])
    return tf.where(
        is_whole_image,
        central_crop_window(image_shape, image_size),
        tf.concat([begin[:2], size[:2]], axis=0),
    )


def preprocess_for_train(
    image_bytes, image_size, seed, mean=MEAN_RGB, stddev=STDDEV_RGB, dtype=tf.float32
):
    """Random resized crop, flip and normalization of one JPEG image (module docstring).

    Args:
        image_bytes: scalar `tf.string`, the JPEG file.
        image_size: side of the square output.
        seed: int ``[2]``; it determines the crop and the flip.
        mean: per-channel means, 0-255 range.
        stddev: per-channel standard deviations, 0-255 range.
        dtype: of the output.

    Returns:
        ``dtype`` ``[image_size, image_size, 3]``.
    """
    # Split as int64 whatever the seed's dtype: an int32 seed would split into other seeds.
    seed = tf.cast(seed, tf.int64)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    window = random_crop_window(tf.image.extract_jpeg_shape(image_bytes), crop_seed, image_size)
    image = _decode_window(image_bytes, window, image_size)
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return normalize(image, mean, stddev, dtype)


def preprocess_for_eval(
    image_bytes, image_size, mean=MEAN_RGB, stddev=STDDEV_RGB, dtype=tf.float32
):
    """Central crop, resize and normalization of one JPEG image (arguments as
    `preprocess_for_train`); returns ``dtype`` ``[image_size, image_size, 3]``."""
    window = central_crop_window(tf.image.extract_jpeg_shape(image_bytes), image_size)
    return normalize(_decode_window(image_bytes, window, image_size), mean, stddev, dtype)


def normalize(image, mean=MEAN_RGB, stddev=STDDEV_RGB, dtype=tf.float32):
    """``(image - mean) / stddev`` per channel (last axis), computed in float32, cast to
    ``dtype``."""
    image = tf.cast(image, tf.float32)
    mean = tf.constant(mean, tf.float32)
    stddev = tf.constant(stddev, tf.float32)
    return tf.cast((image - mean) / stddev, dtype)


def _decode_window(image_bytes, window, image_size):
    image = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
    return tf.image.resize(image, [image_size, image_size], method="bilinear")
