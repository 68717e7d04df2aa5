"""ImageNet augmentation, read back from the pixels of position-encoding JPEG images."""

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.vision import preprocessing
from tests.support.imagenet_records import (
    COLUMN_STEP,
    LABEL_STEP,
    ROW_STEP,
    encode_jpeg,
    position_image,
)

RAW = {"mean": (0.0, 0.0, 0.0), "stddev": (1.0, 1.0, 1.0)}  # outputs in pixel values
JPEG_TOLERANCE = 6  # levels a pixel of these images is off by after a quality-100 JPEG
# An edge's mean pixel is off by less than half a row or column step: it tells which it is.
POSITION_TOLERANCE = 2.5


@pytest.mark.parametrize(
    "shape, image_size, window",
    [
        ((256, 320, 3), 224, [16, 48, 224, 224]),  # side 224/256 * 256
        ((32, 40, 3), 24, [10, 14, 13, 13]),  # side floor(24/56 * 32) = 13
        ((41, 30, 1), 24, [15, 9, 12, 12]),  # side 12; odd margins 29, 19: the extra one before
    ],
)
def test_central_crop_window(shape, image_size, window):
    assert preprocessing.central_crop_window(shape, image_size).numpy().tolist() == window


def test_eval_crop_keeps_the_center_and_drops_a_border():
    image = np.full((32, 40, 3), 250, np.uint8)
    image[6:26, 8:32] = 60  # the central crop, rows 10..22 and columns 14..26, lies inside
    output = preprocessing.preprocess_for_eval(encode_jpeg(image), 24, **RAW).numpy()
    assert output.shape == (24, 24, 3)
    np.testing.assert_allclose(output, 60, atol=JPEG_TOLERANCE)


def test_eval_crop_reads_the_right_rows_and_columns():
    output = preprocessing.preprocess_for_eval(
        encode_jpeg(position_image(32, 40, label=5)), 24, **RAW
    ).numpy()
    # Window rows 10..22 and columns 14..26 (above), upsampled 13 -> 24: the edges are exact.
    edges = [
        output[0, :, 0].mean(),
        output[-1, :, 0].mean(),
        output[:, 0, 1].mean(),
        output[:, -1, 1].mean(),
    ]
    np.testing.assert_allclose(
        edges,
        [ROW_STEP * 10, ROW_STEP * 22, COLUMN_STEP * 14, COLUMN_STEP * 26],
        atol=POSITION_TOLERANCE,
    )
    np.testing.assert_allclose(output[..., 2], LABEL_STEP * 5, atol=JPEG_TOLERANCE)


def test_normalization_uses_the_imagenet_statistics_and_the_dtype():
    pixels = np.array([[[255.0, 0.0, 128.0]]], np.float32)
    # (255 - 0.485 * 255) / (0.229 * 255), (0 - 0.456 * 255) / (0.224 * 255), ...
    expected = [0.515 / 0.229, -0.456 / 0.224, (128 / 255 - 0.406) / 0.225]
    np.testing.assert_allclose(preprocessing.normalize(pixels).numpy()[0, 0], expected, rtol=1e-5)
    image_bytes = encode_jpeg(position_image(32, 40, label=2))
    raw = preprocessing.preprocess_for_eval(image_bytes, 24, **RAW).numpy()
    normalized = preprocessing.preprocess_for_eval(image_bytes, 24, dtype=tf.bfloat16)
    assert normalized.dtype == tf.bfloat16 and normalized.shape == (24, 24, 3)
    np.testing.assert_allclose(
        tf.cast(normalized, tf.float32).numpy(),
        (raw - np.array([0.485, 0.456, 0.406]) * 255) / (np.array([0.229, 0.224, 0.225]) * 255),
        atol=0.02,
    )  # bfloat16 keeps 8 significant bits


def _windows(shape, num_seeds, image_size=224):
    return np.array(
        [
            preprocessing.random_crop_window(shape, [seed, 7], image_size).numpy()
            for seed in range(num_seeds)
        ]
    )


def test_random_crop_windows_stay_in_the_area_and_aspect_ranges():
    height, width = 320, 400
    windows = _windows((height, width, 3), 300)
    top, left, crop_height, crop_width = windows.T
    assert (top >= 0).all() and (left >= 0).all()
    assert (top + crop_height <= height).all() and (left + crop_width <= width).all()
    area = crop_height * crop_width / (height * width)
    # At least 10% (the sampler's min_object_covered), inside area_range [0.08, 1].
    assert area.min() >= 0.1 and area.max() <= 1.0
    aspect = crop_width / crop_height  # sizes are whole pixels: allow a pixel of rounding
    assert (aspect >= 3 / 4 * (1 - 1 / crop_width)).all()
    assert (aspect <= 4 / 3 * (1 + 1 / crop_height)).all()
    # They spread over the ranges, and over the image.
    assert area.min() < 0.15 and area.max() > 0.85
    assert aspect.min() < 0.8 and aspect.max() > 1.25
    assert len({tuple(window) for window in windows}) > 290
    assert top.max() > height / 2 and left.max() > width / 2


def test_random_crop_window_is_a_function_of_the_seed():
    shape = (320, 400, 3)
    np.testing.assert_array_equal(_windows(shape, 5), _windows(shape, 5))
    assert not np.array_equal(
        preprocessing.random_crop_window(shape, [1, 2], 224),
        preprocessing.random_crop_window(shape, [2, 1], 224),
    )


def test_random_crop_falls_back_to_the_central_crop():
    # No window of aspect 3/4..4/3 covering 10% of a 10 x 400 strip fits in it.
    windows = _windows((10, 400, 3), 5)
    np.testing.assert_array_equal(windows, [[1, 196, 8, 8]] * 5)  # side floor(224/256 * 10)


def test_train_crops_and_flips_read_back_from_the_pixels():
    height, width, image_size, num_seeds = 32, 40, 24, 400
    image_bytes = encode_jpeg(position_image(height, width, label=9))
    images = (
        tf.data.Dataset.range(num_seeds)
        .map(
            lambda seed: preprocessing.preprocess_for_train(
                image_bytes, image_size, tf.stack([seed, seed + 1]), **RAW
            )
        )
        .batch(num_seeds)
        .get_single_element()
        .numpy()
    )
    assert images.shape == (num_seeds, image_size, image_size, 3)
    np.testing.assert_allclose(images[..., 2], LABEL_STEP * 9, atol=JPEG_TOLERANCE)
    # Rows keep their order; columns run backwards in flipped images.
    top = images[:, 0, :, 0].mean(axis=1) / ROW_STEP
    bottom = images[:, -1, :, 0].mean(axis=1) / ROW_STEP
    assert (bottom > top).all()
    first_column = images[:, :, 0, 1].mean(axis=1) / COLUMN_STEP
    last_column = images[:, :, -1, 1].mean(axis=1) / COLUMN_STEP
    flipped = first_column > last_column
    assert 0.4 < flipped.mean() < 0.6
    # The windows recovered from the edge pixels (to within a pixel, from resizing and JPEG).
    crop_height = bottom - top + 1
    crop_width = np.abs(last_column - first_column) + 1
    area = crop_height * crop_width / (height * width)
    aspect = crop_width / crop_height
    assert area.min() > 0.08 and area.max() <= 1.0
    assert area.min() < 0.2 and area.max() > 0.7
    assert aspect.min() > 3 / 4 * 0.85 and aspect.max() < 4 / 3 / 0.85
    # The same seed gives the same image.
    again = preprocessing.preprocess_for_train(image_bytes, image_size, [3, 4], **RAW)
    np.testing.assert_array_equal(again.numpy(), images[3])


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"image_size": 0}, ValueError, r"image_size must be in \[1, inf\], got 0"),
        ({"image_size": 24.0}, TypeError, "image_size must be an integer, got 24.0"),
        ({"mean": (1.0, 2.0)}, ValueError, r"mean must be 3 numbers \(red, green, blue\)"),
        ({"mean": 0.5}, TypeError, "mean must be a list or tuple of 3 numbers .*got 0.5"),
        ({"stddev": (1.0, 0.0, 1.0)}, ValueError, r"stddev\[G\] must be in \(0, inf\], got 0.0"),
        ({"dtype": tf.int32}, ValueError, "dtype must be a floating-point dtype .*got int32"),
        ({"dtype": "float33"}, TypeError, "dtype must be a floating-point dtype, got 'float33'"),
    ],
)
def test_argument_checks(arguments, error, message):
    valid = {
        "image_size": 24,
        "mean": preprocessing.MEAN_RGB,
        "stddev": preprocessing.STDDEV_RGB,
        "dtype": "float32",
    }
    with pytest.raises(error, match=message):
        preprocessing.check_preprocessing_arguments(**{**valid, **arguments})
