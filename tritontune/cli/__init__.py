"""The ``tritontune`` command: parses options, calls the library, prints. No logic lives here.

Each command is a private module that registers itself on :data:`app`; ``_common`` holds what
they share (consoles, the one-line error boundary, options).
"""

import importlib.util
import sys

if importlib.util.find_spec("onnxruntime") is None:  # not a base dependency: one build or the other
    sys.exit(
        "error: tritontune needs onnxruntime: pip install 'tritontune[cpu]' (any host) or "
        "'tritontune[gpu]' (onnxruntime-gpu, on a CUDA host); never both"
    )

from tritontune.cli import (  # noqa: E402, F401 - registers the commands
    _check,
    _export,
    _import_ma,
    _profile,
    _report,
    _search,
    _status,
)
from tritontune.cli._common import app, run  # noqa: E402, F401 - the console entry points
