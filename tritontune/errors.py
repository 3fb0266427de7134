"""Errors that reach the user as one clear line.

Every failure a user can cause or meet (bad input, a server that won't start, a model Triton refuses)
is raised as a :class:`TritonTuneError`. The CLI prints its message and exits non-zero; anything else
is a bug in tritontune and keeps its traceback.
"""

from __future__ import annotations


class TritonTuneError(Exception):
    """A failure the user can understand and act on; ``str(err)`` is the one-line message."""


class InputError(TritonTuneError):
    """Bad user input: a file, an option or a value that is not what was expected."""


class ConfigError(InputError):
    """A model config that can't be parsed, or a variant Triton would refuse to load."""


class ServerError(TritonTuneError):
    """The Triton server could not be found, started, reached, or asked to do something."""


class ServerDiedError(ServerError):
    """The server process exited while tritontune was using it.

    This is a normal event (the Python backend has been seen to crash under CPU contention), so the
    caller may restart the launcher and go on. ``log_tail`` holds Triton's last log lines.
    """

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


class ModelLoadError(ServerError):
    """Triton refused to load a model; the message carries Triton's own reason."""
