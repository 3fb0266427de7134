"""Reading the YAML files users write (space files, tuning records) with errors that say where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tritontune.errors import InputError


def read_yaml(path: Path, what: str) -> Any:
    """Parse ``path``; unreadable files and YAML syntax errors name the file (and the line)."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} ({err.strerror})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(f"{where}: not valid YAML ({getattr(err, 'problem', err)})") from None
