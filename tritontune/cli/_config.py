"""``-f/--config tritontune.yaml``: the options of every command in one YAML file.

The file is read into click's ``default_map`` of the command being run, so a value from the
file is parsed and validated exactly as the same flag's value would be, and a flag on the command
line still wins (click consults the default map only for options the command line left out). A
key is the option's long flag without ``--``, with ``_`` for ``-``; top-level keys apply to every
command that has the option, a section named after a command to that command only. The layout:
``docs/reference/config-file.md``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from tritontune.errors import InputError
from tritontune.search.space import SpaceSource
from tritontune.yamlfile import read_yaml

#: Keys the file may hold one day but tritontune does not read yet; refused with this reason
#: rather than taken for a typo or silently ignored.
RESERVED_KEYS: dict[str, str] = {}
#: Options that take a YAML mapping in the file (the space, as a --space file holds it).
_MAPPING_OPTIONS = {"space"}


# Commands and parameters are click's objects, which typer vendors privately (typer._click): they
# are typed Any here, and used only through click's documented attributes.


def option_keys(command: Any) -> dict[str, Any]:
    """The config-file key of each of ``command``'s options and arguments."""
    keys: dict[str, Any] = {}
    for param in command.params:
        if not param.expose_value or param.name is None:
            continue  # --config itself, and eager flags such as --help
        is_option = param.param_type_name == "option"
        long = [opt for opt in param.opts if opt.startswith("--")] if is_option else []
        keys[long[0][2:].replace("-", "_") if long else param.name] = param
    return keys


@dataclass(frozen=True)
class FileDefaults:
    """What a config file gives one command."""

    values: dict[str, Any]
    """By parameter name: the command's default map."""
    sources: dict[str, tuple[str, str]]
    """By flag (``--slo-p99``): its parameter's name and where in the file its value is
    (``tritontune.yaml: search.slo_p99``), so an error a command raises later about that flag's
    value can name the file and key."""


def config_defaults(
    path: Path, commands: Mapping[str, Any], command: str, ctx: typer.Context
) -> FileDefaults:
    """``command``'s default map from the config file at ``path``: its top-level keys that are
    options of ``command``, then its ``command:`` section over them.

    Every key of the file is checked (an unknown one, in any section, is an error that names the
    file and the key and suggests the close match); the values used are cast by their option's
    own type, so a bad one is refused here, naming the file and key, before anything runs."""
    data = read_yaml(path, "config file")
    if data is None:
        return FileDefaults({}, {})
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a mapping of option names (and command sections such as search:) "
            "to values"
        )
    keys = {name: option_keys(cmd) for name, cmd in commands.items()}
    shared_keys = sorted({key for command_keys in keys.values() for key in command_keys})
    chosen: dict[str, tuple[str, Any]] = {}  # option name -> (where in the file, value)
    for key, value in data.items():
        key = str(key)
        if key in commands:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise InputError(f"{path}: {key}: expected a mapping of {key}'s options to values")
            for sub_key in value:
                _check_key(path, f"{key}.", str(sub_key), sorted(keys[key]))
            continue
        _check_key(path, "", key, [*shared_keys, *commands])
        if key in keys[command]:
            chosen[keys[command][key].name or key] = (key, value)
    for key, value in (data.get(command) or {}).items():
        chosen[keys[command][str(key)].name or str(key)] = (f"{command}.{key}", value)
    by_name = {param.name: param for param in keys[command].values()}
    return FileDefaults(
        values={
            name: _cast(path, where, by_name[name], value, ctx)
            for name, (where, value) in chosen.items()
        },
        sources={
            flag: (name, f"{path}: {where}")
            for name, (where, _) in chosen.items()
            for flag in by_name[name].opts
            if flag.startswith("--")
        },
    )


def _check_key(path: Path, section: str, key: str, known: list[str]) -> None:
    if key in RESERVED_KEYS:
        raise InputError(f"{path}: {section}{key}: {RESERVED_KEYS[key]}")
    if key in known:
        return
    if key.replace("-", "_") in known:
        hint = f"; write {key.replace('-', '_')} (keys are flag names with _ for -)"
    else:
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
    where = f"{section[:-1]} section" if section else "the top level (options shared by commands)"
    raise InputError(f"{path}: {section}{key}: unknown option for {where}{hint}")


def _cast(path: Path, where: str, param: Any, value: Any, ctx: typer.Context) -> Any:
    """``value`` as the option takes it, checked by the option's own type now."""
    if isinstance(value, dict):
        if param.name == "workload_file":
            raise InputError(
                f"{path}: {where}: expected the path of a workload file "
                "(e.g. examples/workloads/interactive-batch.yaml), not its classes"
            )
        if param.name not in _MAPPING_OPTIONS:
            raise InputError(f"{path}: {where}: expected a single value, not a mapping")
        value = SpaceSource(f"{path}: {where}", inline=value)
    elif param.multiple:
        value = [str(v) for v in (value if isinstance(value, list) else [value])]
    elif isinstance(value, list):
        value = ",".join(str(v) for v in value)
    try:
        param.process_value(ctx, value)
    except typer.BadParameter as err:
        raise InputError(f"{path}: {where}: {err.format_message()}") from None
    return value
