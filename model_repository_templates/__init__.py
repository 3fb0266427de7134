"""Jinja2 templates for the model kinds tritontune prepares (see tritontune.config.templates)."""
