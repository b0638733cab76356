"""The bundle's scripts imported as modules, once per session: they are files, not a package."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@functools.cache
def load(stem: str):
    spec = importlib.util.spec_from_file_location(stem, SCRIPTS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module  # dataclasses resolve their module at class creation
    spec.loader.exec_module(module)
    return module
