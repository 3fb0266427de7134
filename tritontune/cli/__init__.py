"""The ``tritontune`` command: parses options, calls the library, prints. No logic lives here.

Each command is a private module that registers itself on :data:`app`; ``_common`` holds what
they share (consoles, the one-line error boundary, options).
"""

from tritontune.cli import (  # noqa: F401 - registers the commands
    _check,
    _export,
    _import_ma,
    _predict,
    _profile,
    _report,
    _search,
    _status,
)
from tritontune.cli._common import app, run  # noqa: F401 - the console entry points
