"""Import helper for the tests.

`import splat` needs the native module `splat._core`. When the package is not
installed (or not built yet) the pure-Python submodules are still testable:
put `python/` on the path and, if the package root cannot run, register an
empty package object for `splat` whose __path__ is the package folder, so
`import splat.data` etc. work without executing `splat/__init__.py`.

SPLAT_TEST_INSTALLED=1 (CI, cibuildwheel) tests the installed wheel only: the
source tree's python/ is never put on the path. SPLAT_SOURCE_ROOT names the
source tree for the checks that read it (tools/, shaders/) when the tests
folder was copied out of it.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_ROOT = os.environ.get("SPLAT_SOURCE_ROOT") or ROOT
INSTALLED = os.environ.get("SPLAT_TEST_INSTALLED") == "1"
PKG_DIR = os.path.join(ROOT, "python", "splat")


def _import_splat():
    """(the splat package, whether its root __init__ ran)."""
    try:
        return importlib.import_module("splat"), True
    except ImportError:
        pass
    sys.modules.pop("splat", None)
    pkg_dir = PKG_DIR
    if INSTALLED:
        spec = importlib.util.find_spec("splat")  # finds the installed package, runs nothing
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("[tests] SPLAT_TEST_INSTALLED=1 but no splat package is installed")
        pkg_dir = list(spec.submodule_search_locations)[0]
    else:
        src = os.path.join(ROOT, "python")
        if src not in sys.path:
            sys.path.insert(0, src)
        try:
            return importlib.import_module("splat"), True
        except ImportError:
            sys.modules.pop("splat", None)
    stub = types.ModuleType("splat")
    stub.__path__ = [pkg_dir]
    stub.__file__ = os.path.join(pkg_dir, "__init__.py")
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
