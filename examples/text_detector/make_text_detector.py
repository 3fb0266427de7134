"""Build a real pretrained convolutional network for tritontune to tune: PP-OCRv4's text detector.

The model is PaddleOCR's PP-OCRv4 mobile text detector (a DBNet: a PP-LCNetV3 convolutional
backbone, a feature pyramid and a segmentation head; Apache-2.0), exported to ONNX by the
RapidOCR project and shipped as a plain file, ``models/ch_PP-OCRv4_det_infer.onnx``, in the PyPI
package ``rapidocr-onnxruntime``. Nothing is downloaded from a model hub, and the graph is served
as shipped: one image in (``x``, 3 x H x W, normalized as RapidOCR does: ``(pixel / 255 - 0.5) /
0.5``), the per-pixel probability of text out (``sigmoid_0.tmp_0``, 1 x H x W).

Triton batches requests of one shape, so the example serves one size, :data:`SIDE` x
:data:`SIDE` (a multiple of 32, as the network needs), and the inputs are real photographs: the
sample images scikit-image ships as plain files (a page of text, a sign, a rocket, a cat, coins,
...), each resized so that its short side is :data:`SIDE`, centre-cropped, and written in
perf_analyzer's ``--input-data`` format (the pixels as base64 float32).

    pip install --no-deps rapidocr-onnxruntime==1.4.4 scikit-image==0.26.0 && pip install pillow
    python examples/text_detector/make_text_detector.py [--out examples/text_detector/model_repository]

Outputs (rebuilt only when missing; ``--force`` rebuilds):
    <out>/text_detector/config.pbtxt, <out>/text_detector/1/model.onnx   the model repository
    examples/text_detector/inputs.json                                   the images, preprocessed
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from plain_files import build_example, package_file, skimage_photos  # noqa: E402

#: The side of the served images: a multiple of 32. At 384 one image takes 34 ms on one thread
#: of a 2-core AMD EPYC, 19 ms on two (onnxruntime, FP32): compute, not the RPC path, sets the
#: throughput.
SIDE = 384
MODEL_PACKAGE = "rapidocr_onnxruntime"
MODEL_FILE = "models/ch_PP-OCRv4_det_infer.onnx"
INSTALL = "pip install --no-deps rapidocr-onnxruntime==1.4.4 scikit-image==0.26.0"
#: scikit-image's bundled photographs (``skimage/data/``), in this order.
IMAGES = (
    "text.png", "page.png", "rocket.jpg", "chelsea.png", "coffee.png", "astronaut.png",
    "coins.png", "camera.png", "motorcycle_left.png", "hubble_deep_field.jpg", "retina.jpg",
    "logo.png", "brick.png", "gravel.png", "ihc.png", "moon.png",
)  # fmt: skip

CONFIG = f"""\
name: "text_detector"
backend: "onnxruntime"
max_batch_size: 8
input [
  {{ name: "x" data_type: TYPE_FP32 dims: [ 3, {SIDE}, {SIDE} ] }}
]
output [
  {{ name: "sigmoid_0.tmp_0" data_type: TYPE_FP32 dims: [ 1, {SIDE}, {SIDE} ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def preprocess(path: Path) -> np.ndarray:
    """RapidOCR's detector input for one photograph: RGB, short side resized to :data:`SIDE`,
    centre-cropped to a square, scaled to [-1, 1], channels first."""
    from PIL import Image

    with Image.open(path) as opened:
        image = opened.convert("RGB")
    scale = SIDE / min(image.size)
    size = (max(SIDE, round(image.width * scale)), max(SIDE, round(image.height * scale)))
    image = image.resize(size, Image.Resampling.BILINEAR)
    left, top = (image.width - SIDE) // 2, (image.height - SIDE) // 2
    image = image.crop((left, top, left + SIDE, top + SIDE))
    pixels = np.asarray(image, dtype=np.float32) / 255.0
    return ((pixels - 0.5) / 0.5).transpose(2, 0, 1).copy()


def main() -> None:
    build_example(
        HERE,
        "text_detector",
        description=__doc__.split("\n\n")[0],
        model=lambda: package_file(MODEL_PACKAGE, MODEL_FILE, install=INSTALL),
        config=CONFIG,
        input_name="x",
        inputs=lambda: skimage_photos(IMAGES, preprocess),
        side=SIDE,
    )


if __name__ == "__main__":
    main()
