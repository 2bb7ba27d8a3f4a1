"""The package metadata promises only what exists: every console script declared in
pyproject.toml names a module and function that import (issue 20, defect 11), and the
client wheel holds the client and depends on what it imports."""

from __future__ import annotations

import importlib
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_declared_console_scripts_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for name, target in project.get("scripts", {}).items():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), f"script {name} -> {target}"


def test_the_client_wheel_holds_the_client_only(tmp_path):
    """The in-database package (plpy/mnemo_db) runs inside the server; the client only
    calls SQL functions, so its wheel ships mnemosyne and nothing else (issue 21)."""
    tree = tmp_path / "tree"  # a copy: a build writes build/ and *.egg-info beside the sources
    skip = shutil.ignore_patterns("*.egg-info", "__pycache__", "*.table")
    for part in ("src", "plpy"):
        shutil.copytree(ROOT / part, tree / part, ignore=skip)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, tree / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(tree)], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("mnemosyne-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"mnemosyne"}


def test_every_client_dependency_is_imported_by_the_client():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "mnemosyne").glob("*.py"))
    for dep in deps:
        module = re.match(r"[A-Za-z0-9_.-]+", dep).group(0).replace("-", "_")
        assert re.search(rf"^\s*(import|from) {module}\b", source, re.MULTILINE), f"{dep} is not imported by the client"
