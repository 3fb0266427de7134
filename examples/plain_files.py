"""What the image examples share: files shipped inside installed PyPI packages, found without
importing them, and images written in perf_analyzer's ``--input-data`` format.

The image examples (``text_detector/``, ``vgg16/``) serve models that PyPI packages ship as plain
ONNX files, and feed them the sample photographs scikit-image ships as plain files. Nothing is
downloaded from a model hub. A script imports this module from its parent folder.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np


def package_file(package: str, relative: str, *, install: str) -> Path:
    """A file shipped inside an installed package, found without importing the package (neither
    needs its own dependencies here). ``install`` is the command that installs it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"the package {package!r} is not installed: run {install}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise SystemExit(f"{path}: not in the installed {package!r} package")
    return path


def write_image_inputs(
    path: Path,
    input_name: str,
    tensors: Iterable[np.ndarray],
) -> int:
    """Write one ``--input-data`` entry per tensor (float32, base64); returns how many."""
    entries = [
        {
            input_name: {
                "b64": base64.b64encode(tensor.astype(np.float32).tobytes()).decode("ascii"),
                "shape": list(tensor.shape),
            }
        }
        for tensor in tensors
    ]
    path.write_text(json.dumps({"data": entries}), encoding="utf-8")
    return len(entries)


def skimage_photos(names: Iterable[str], preprocess: Callable[[Path], np.ndarray]) -> list[np.ndarray]:
    """scikit-image's bundled photographs (``skimage/data/NAME``), each preprocessed."""
    install = "pip install --no-deps scikit-image==0.26.0"
    return [preprocess(package_file("skimage", f"data/{name}", install=install)) for name in names]


def build_example(
    here: Path,
    name: str,
    *,
    description: str,
    model: Callable[[], Path],
    config: str,
    input_name: str,
    inputs: Callable[[], list[np.ndarray]],
    side: int,
) -> None:
    """An image example's command line: ``<out>/<name>/1/model.onnx`` (a copy of ``model()``) and
    its ``config.pbtxt``, then ``inputs()`` written in ``here/inputs.json``; each rebuilt only when
    missing, or with ``--force``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=here / "model_repository")
    parser.add_argument("--inputs", type=Path, default=here / "inputs.json")
    parser.add_argument("--force", action="store_true", help="rebuild what exists")
    args = parser.parse_args()
    onnx_file = args.out / name / "1" / "model.onnx"
    if args.force or not onnx_file.is_file():
        onnx_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model(), onnx_file)
        (args.out / name / "config.pbtxt").write_text(config, encoding="utf-8")
        print(f"wrote {onnx_file.parent.parent}")
    if args.force or not args.inputs.is_file():
        count = write_image_inputs(args.inputs, input_name, inputs())
        print(f"wrote {args.inputs} ({count} images, {side} x {side})")
