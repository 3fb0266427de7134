"""tritontune/precision/runtime.py: onnxruntime, imported when a job needs it."""

import importlib

import pytest

from tritontune.errors import InputError
from tritontune.precision import runtime


def test_an_installed_onnxruntime_whose_import_fails_is_not_called_missing(monkeypatch):
    """A Ctrl-C in the middle of onnxruntime's import comes out of its extension as this
    ImportError; a missing system library as another. Neither is fixed by installing it."""

    def failing(name: str):
        raise ImportError("import numpy failed")

    monkeypatch.setattr(importlib, "import_module", failing)
    with pytest.raises(InputError) as raised:
        runtime.onnxruntime_module("precision variants")
    assert str(raised.value) == "onnxruntime is installed but its import failed: import numpy failed"
