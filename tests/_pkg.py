"""Import helper for the tests.

`import splat` needs the native module `splat._core`. When the package is not
installed (or not built yet) the pure-Python submodules are still testable:
put `python/` on the path and, if the package root cannot run, register an
empty package object for `splat` whose __path__ is python/splat, so
`import splat.data` etc. work without executing `splat/__init__.py`.
"""
from __future__ import annotations

import importlib
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG_DIR = os.path.join(ROOT, "python", "splat")


def _import_splat():
    """(the splat package, whether its root __init__ ran)."""
    try:
        return importlib.import_module("splat"), True
    except ImportError:
        pass
    sys.modules.pop("splat", None)
    src = os.path.join(ROOT, "python")
    if src not in sys.path:
        sys.path.insert(0, src)
    try:
        return importlib.import_module("splat"), True
    except ImportError:
        sys.modules.pop("splat", None)
    stub = types.ModuleType("splat")
    stub.__path__ = [PKG_DIR]
    stub.__file__ = os.path.join(PKG_DIR, "__init__.py")
    stub.__package__ = "splat"
    sys.modules["splat"] = stub
    return stub, False


def _has_native() -> bool:
    try:
        importlib.import_module("splat._core")
        return True
    except ImportError:
        return False


splat, _ = _import_splat()
NATIVE = _has_native()
