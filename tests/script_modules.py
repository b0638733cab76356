"""The bundle's scripts imported as modules, once per session. The entry scripts are files; what
they share is the package scripts/_scaling, importable once scripts/ is on sys.path (done here)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PACKAGE = SCRIPTS / "_scaling"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))


@functools.cache
def load(stem: str):
    """An entry script (scripts/<stem>.py) as a module."""
    spec = importlib.util.spec_from_file_location(stem, SCRIPTS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module  # dataclasses resolve their module at class creation
    spec.loader.exec_module(module)
    return module
