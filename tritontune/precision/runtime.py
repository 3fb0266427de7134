"""onnxruntime, imported when a job needs it, not when tritontune starts.

onnxruntime comes in two builds that install the same module and break each other when both are
installed (``onnxruntime`` for any host, ``onnxruntime-gpu`` for a CUDA host), so it is not a base
dependency: the user picks one with an extra. Without either, ``tritontune --version`` and
``--help`` still answer, and only what needs onnxruntime says so, when it needs it: building or
judging a precision variant here, or serving an ONNX model through the bundled server's Python
backend (whose ``model.py`` runs it in this Python).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from tritontune.errors import InputError

INSTALL_HINT = (
    "pip install 'tritontune[cpu]' (any host) or 'tritontune[gpu]' (onnxruntime-gpu, on a CUDA "
    "host); never both"
)


def onnxruntime_module(needed_for: str = "this") -> ModuleType:
    """The ``onnxruntime`` module, or an :class:`InputError` saying how to install it."""
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as err:
        if importlib.util.find_spec("onnxruntime") is None:
            raise InputError(f"tritontune needs onnxruntime for {needed_for}: {INSTALL_HINT}") from None
        # Installed, but its import failed (a missing system library, or a Ctrl-C in the middle
        # of it, which its extension reports as "import numpy failed"): say that, not "install".
        raise InputError(f"onnxruntime is installed but its import failed: {err}") from None
