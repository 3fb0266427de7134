"""MkDocs hook: the pages that describe code are rendered from that code at build time.

A page says ``<!-- cli: search -->`` where ``tritontune search``'s reference belongs, and the hook
puts there what the command's ``--help`` says (usage, description, every option with its default
and range), read from the Typer app's own click command, with the key each option takes in a
``-f`` config file and the environment variable it reads. ``<!-- cli-commands -->`` is the list of
commands, ``<!-- cli-config-keys -->`` the config-file keys several commands share, and
``<!-- schema: record -->`` and ``<!-- schema: workload-record -->`` the JSON schemas that
``tritontune check`` validates a ``tritontune.lock.yaml`` with.

Nothing generated is committed, so these pages cannot drift from the code; and every command must
have its page (``cli/NAME.md``, holding its marker), so a new command without one fails the build.
The code documented is the checkout this file lives in, whichever tritontune is installed.
"""

from __future__ import annotations

import html
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import typer.main  # noqa: E402

from tritontune import tuning_record as record  # noqa: E402
from tritontune.cli import app  # noqa: E402
from tritontune.cli._config import option_keys  # noqa: E402
from tritontune.cli._option_groups import PRECISION_OPTIONS, SERVER_OPTIONS  # noqa: E402

#: The click group behind ``tritontune``: the object the console script runs.
GROUP = typer.main.get_command(app)
#: The schemas :func:`tritontune.tuning_record.read_record` validates records with.
SCHEMAS = {"record": record._SCHEMA, "workload-record": record._WORKLOAD_SCHEMA}
#: Options shared by several commands, each group in a table of its own after a command's own.
OPTION_GROUPS = {
    "Server and client options": {p.name for p in SERVER_OPTIONS},
    "Precision options": {p.name for p in PRECISION_OPTIONS},
}
MARKER = re.compile(r"<!-- (cli|cli-commands|cli-config-keys|schema)(?:: ([\w-]+))? -->")


def command_page(name: str) -> str:
    """Where ``tritontune NAME`` is documented (relative to docs/)."""
    return f"cli/{name}.md"


def on_files(files: Any, config: Any) -> Any:
    """Refuse to build when a command has no page: the reference would silently miss it."""
    missing = [n for n in GROUP.commands if files.get_file_from_path(command_page(n)) is None]
    if missing:
        names = ", ".join(f"tritontune {n}" for n in missing)
        raise PluginError(f"no page for: {names} (add cli/NAME.md with its <!-- cli: NAME -->)")
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each marker with what it names, rendered from the code."""
    where = page.file.src_uri
    for name in GROUP.commands:
        if where == command_page(name) and f"<!-- cli: {name} -->" not in markdown:
            raise PluginError(f"{where}: has no <!-- cli: {name} --> marker")
    return MARKER.sub(lambda m: _render(m.group(1), m.group(2), where), markdown)


def _render(kind: str, name: str | None, where: str) -> str:
    up = "../" * where.count("/")  # from this page to docs/
    if kind == "cli-commands":
        return _commands_table(up)
    if kind == "cli-config-keys":
        return _shared_keys_table(up)
    if kind == "cli" and name in GROUP.commands:
        return command_reference(name)
    if kind == "schema" and name in SCHEMAS:
        return schema_reference(SCHEMAS[name])
    raise PluginError(f"{where}: <!-- {kind}: {name} --> names nothing tritontune has")


def _commands_table(up: str) -> str:
    rows = [
        f"| [`tritontune {name}`]({up}{command_page(name)}) | {_cell(cmd.get_short_help_str(200))} |"
        for name, cmd in GROUP.commands.items()
    ]
    return "\n".join(["| command | what it does |", "|---|---|", *rows])


def _shared_keys_table(up: str) -> str:
    """The keys more than one command reads (those worth setting at the top level of a config
    file), and which commands read them; each command's own keys are on its page."""
    readers: dict[str, list[str]] = {}
    for name, command in GROUP.commands.items():
        for key in option_keys(command):
            readers.setdefault(key, []).append(f"[`{name}`]({up}{command_page(name)})")
    rows = [
        f"| `{key}` | {', '.join(names)} |" for key, names in sorted(readers.items()) if len(names) > 1
    ]
    return "\n".join(["| key | read by |", "|---|---|", *rows])


def command_reference(name: str) -> str:
    """``tritontune NAME --help`` as Markdown: usage, description, a table per group of options.

    Each option is shown as click's plain help formatter shows it (flags, metavar, help text with
    its default and range), plus its config-file key and its environment variable, which the app's
    group moves off the options (see ``_ConfigGroup``) to rank it under the config file."""
    command = GROUP.commands[name]
    root = GROUP.context_class(GROUP, info_name="tritontune")
    ctx = command.context_class(command, info_name=name, parent=root)
    keys = {param.name: key for key, param in option_keys(command).items()}
    envvars = GROUP.envvars.get(name, {})
    tables: dict[str, list[str]] = {}
    for param in command.get_params(ctx):
        shown = param.get_help_record(ctx)
        if shown is None or param.name == "help":
            continue
        flags, text = shown
        if param.name in envvars:
            text += f"  [env var: {envvars[param.name]}]"
        title = "Arguments" if param.param_type_name == "argument" else "Options"
        title = next((t for t, names in OPTION_GROUPS.items() if param.name in names), title)
        anchor = max(param.opts, key=len).lstrip("-")  # #opt-slo-p99 links to --slo-p99
        cells = [_code(flags), _code(keys[param.name]) if param.name in keys else "", html.escape(text)]
        row = "".join(f"<td>{cell}</td>" for cell in cells)
        tables.setdefault(title, []).append(f'<tr id="opt-{anchor}">{row}</tr>')
    paragraphs = inspect.cleandoc(command.help or "").split("\n\n")
    out = ["```text", command.get_usage(ctx), "```", ""]
    out += [" ".join(paragraph.split()) + "\n" for paragraph in paragraphs]
    for title, rows in tables.items():
        out += [f"### {title}", "", "<table>"]
        out += ["<tr><th>option</th><th>config key</th><th>what it does</th></tr>", *rows]
        out += ["</table>", ""]
    return "\n".join(out)


def schema_reference(schema: dict[str, Any]) -> str:
    """A JSON schema as a table of its fields (dotted paths), then the schema itself, folded."""
    rows = [
        f"| `{path}` | {_cell(kind)} | {'yes' if required else ''} |"
        for path, kind, required in _fields(schema, "")
    ]
    text = json.dumps(schema, indent=2).splitlines()
    out = ["| field | type | required |", "|---|---|---|", *rows, ""]
    out += ['??? note "The JSON schema"', "", "    ```json", *(f"    {line}" for line in text)]
    return "\n".join([*out, "    ```", ""])


def _fields(schema: dict[str, Any], prefix: str) -> Any:
    """(path, type, required) of every property, nested ones after their parent."""
    required = set(schema.get("required", ()))
    for name, sub in schema.get("properties", {}).items():
        yield f"{prefix}{name}", _type_text(sub), name in required
        yield from _nested(sub, f"{prefix}{name}")


def _nested(schema: dict[str, Any], path: str) -> Any:
    yield from _fields(schema, f"{path}.")
    if isinstance(schema.get("items"), dict):
        yield from _nested(schema["items"], f"{path}[]")
    for alternative in schema.get("oneOf", ()):
        yield from _nested(alternative, path)


#: JSON Schema's bounds, as the type column says them.
_LIMITS = {
    "minimum": ">=",
    "exclusiveMinimum": ">",
    "minLength": "length >=",
    "minItems": "items >=",
    "minProperties": "entries >=",
}


def _type_text(schema: dict[str, Any]) -> str:
    """``number >= 0``, ``one of `concurrency`, `rate```, ``string, or array of object``."""
    if "oneOf" in schema:
        return ", or ".join(_type_text(alternative) for alternative in schema["oneOf"])
    if "const" in schema:
        return f"always {json.dumps(schema['const'])}"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    kinds = schema.get("type", "any")
    text = " or ".join(kinds) if isinstance(kinds, list) else kinds
    if isinstance(schema.get("items"), dict):
        text += f" of {_type_text(schema['items'])}"
    if isinstance(schema.get("additionalProperties"), dict):
        text += f" (values: {_type_text(schema['additionalProperties'])})"
    return " ".join([text, *(f"{sign} {schema[k]}" for k, sign in _LIMITS.items() if k in schema)])


def _code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def _cell(text: str) -> str:
    """Plain text, safe in a Markdown table cell."""
    return html.escape(text, quote=False).replace("|", "\\|")
