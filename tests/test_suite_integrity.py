"""Checks of the test suite itself, for the tests CI only collects: the GPU
tests skip on a machine without a device, so a name they never define or a
helper they call with the wrong arguments would first fail on a GPU.

- ruff (pyflakes' rules, pyproject.toml) over python/, tests/, bench/, tools/;
- every test module imports in full, its module-level device skips disabled;
- every call from a test module to a function of another test module or
  helper (`from test_x import f`, `from _scenes import f`) binds to that
  function's signature.
"""
from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import textwrap

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SPLAT_SOURCE_ROOT") or os.path.dirname(TESTS)
LINTED = ("python", "tests", "bench", "tools")


def _modules():
    return sorted(f[:-3] for f in os.listdir(TESTS) if f.endswith(".py") and f != "conftest.py")


def test_ruff_finds_nothing():
    try:
        import ruff  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise AssertionError("ruff is part of the [test] extra and must be installed in CI")
        pytest.skip("ruff is not installed (pip install '.[test]')")
    paths = [os.path.join(SOURCE, p) for p in LINTED if os.path.isdir(os.path.join(SOURCE, p))]
    if os.path.join(SOURCE, "tests") not in paths:
        paths.append(TESTS)
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                        "--config", os.path.join(SOURCE, "pyproject.toml"), *paths],
                       capture_output=True, text=True, timeout=300, cwd=SOURCE)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


_IMPORT_ALL = textwrap.dedent("""
    import importlib, sys, traceback
    import pytest
    from _pytest.outcomes import Skipped

    def no_device_skip(msg="", *, allow_module_level=False, **kw):
        if not allow_module_level:
            raise Skipped(msg)   # a skip inside a function is not ours to bypass

    pytest.skip = no_device_skip
    failed = []
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except Skipped as e:      # pytest.importorskip: an optional package is missing here
            print(f"{name}: skipped ({e})")
        except BaseException:
            failed.append(name)
            print(f"{name}: FAILED\\n{traceback.format_exc()}")
    sys.exit(1 if failed else 0)
""")


def test_every_test_module_imports_in_full():
    """Each module's body runs to its end even where its device is missing
    (module-level `pytest.skip(..., allow_module_level=True)` is a no-op here),
    so an import of a name a helper does not define fails on every machine."""
    p = subprocess.run([sys.executable, "-c", _IMPORT_ALL, *_modules()], capture_output=True, text=True,
                       timeout=600, cwd=TESTS, env=dict(os.environ, PYTHONPATH=TESTS + os.pathsep +
                                                        os.environ.get("PYTHONPATH", "")))
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]


def _local_imports(tree):
    """{name bound in the module: (module, attribute)} for `from <test module> import x [as y]`."""
    local = set(_modules())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in local:
            for alias in node.names:
                out[alias.asname or alias.name] = (node.module, alias.name)
    return out


def _call_problems(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    imports = _local_imports(tree)
    problems = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imports):
            continue
        module, attr = imports[node.func.id]
        try:
            target = getattr(__import__(module), attr)
        except pytest.skip.Exception:  # a device module: checked where its device is
            continue
        except Exception as exc:  # reported by the import test
            problems.append(f"{os.path.basename(path)}:{node.lineno}: {module}.{attr}: {exc!r}")
            continue
        if not callable(target) or inspect.isclass(target):
            continue
        try:
            sig = inspect.signature(target)
        except (TypeError, ValueError):
            continue
        star_args = any(isinstance(a, ast.Starred) for a in node.args)
        star_kwargs = any(k.arg is None for k in node.keywords)
        params = sig.parameters.values()
        n_pos = len([a for a in node.args if not isinstance(a, ast.Starred)])
        kws = {k.arg: None for k in node.keywords if k.arg is not None}
        if star_args or star_kwargs:
            # Only what the call spells out can be checked: its keywords.
            takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
            unknown = [k for k in kws if not takes_any and k not in sig.parameters]
            if unknown:
                problems.append(f"{os.path.basename(path)}:{node.lineno}: {attr}{sig} has no {', '.join(unknown)}")
            continue
        try:
            sig.bind(*([None] * n_pos), **kws)
        except TypeError as exc:
            problems.append(f"{os.path.basename(path)}:{node.lineno}: {attr}{sig}: {exc}")
    return problems


def test_calls_into_other_test_modules_match_their_signatures():
    sys.path.insert(0, TESTS)
    problems = []
    for name in _modules():
        problems += _call_problems(os.path.join(TESTS, name + ".py"))
    assert not problems, "\n".join(problems)


def test_the_signature_check_catches_a_wrong_keyword(tmp_path):
    """The check above on a module written here: a keyword the helper does not take."""
    sys.path.insert(0, TESTS)
    bad = tmp_path / "test_bad_call.py"
    bad.write_text("from test_absgrad import state_of\n\n\ndef test_x():\n    state_of(1, exposure=2)\n")
    problems = _call_problems(str(bad))
    assert len(problems) == 1 and "exposure" in problems[0], problems


def test_a_failed_test_lets_go_of_what_it_made(tmp_path):
    """conftest.py drops a failed test's locals once it is reported: a GPU
    test that fails must not keep its device memory for the tests after it."""
    import shutil
    shutil.copy(os.path.join(TESTS, "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(textwrap.dedent("""
        import weakref
        class Big:
            pass
        REFS = []
        def test_fails_holding_an_object():
            held = Big()
            REFS.append(weakref.ref(held))
            assert held is None
        def test_the_object_is_gone_without_a_collection():
            assert REFS[0]() is None
    """))
    env = {k: v for k, v in os.environ.items() if k != "SPLAT_TEST_INSTALLED"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert "1 failed, 1 passed" in p.stdout, p.stdout[-3000:]
