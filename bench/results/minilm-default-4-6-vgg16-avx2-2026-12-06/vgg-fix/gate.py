"""The precision gate alone on VGG16: `python gate.py int8_static CACHE_DIR` from the repository
root (the candidates tried, in order, and what each scored)."""

import sys
import time
from pathlib import Path

from tritontune.config.repository import load_model_source
from tritontune.precision.prepare import prepare_precisions

VGG16 = Path("examples/vgg16")

source = load_model_source(VGG16 / "model_repository", "vgg16")
start = time.monotonic()
checks = prepare_precisions(
    source.model_file,
    source.base_config,
    sys.argv[1].split(","),
    input_data=VGG16 / "inputs.json",
    cache=Path(sys.argv[2]),
)
for name, check in checks.items():
    print(name, check.accepted, check.summary() if check.accepted else check.reason)
    for tried in check.tried:
        print("   tried:", tried)
print(f"{time.monotonic() - start:.0f} s")
