"""The package metadata promises only what exists: every console script declared in
pyproject.toml names a module and function that import (issue 20, defect 11)."""

from __future__ import annotations

import importlib
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_declared_console_scripts_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for name, target in project.get("scripts", {}).items():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), f"script {name} -> {target}"
