"""Rendering of the Jinja2 templates in ``model_repository_templates/``.

Config templates are rendered and immediately parsed into a ``ModelConfig``, so a template can only
ever contribute valid protobuf; ``model.py`` templates are written as they render.
"""

from __future__ import annotations

from importlib import resources

import jinja2

from tritontune.config.model_config import ModelConfig, parse_config_text

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(resources.files("tritontune.model_repository_templates"))),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,  # protobuf text and Python source, not HTML
)


def render(template: str, **values: object) -> str:
    """Render ``kind/file.j2`` (e.g. ``python_onnx/model.py.j2``)."""
    return _ENV.get_template(template).render(**values)


def render_config(template: str, **values: object) -> ModelConfig:
    """Render a ``config.pbtxt.j2`` template and parse it into a ``ModelConfig``."""
    return parse_config_text(render(template, **values), source=template)
