"""pytest setup that travels with the tests folder: the markers, `--reseed` (_reseed.py), and, when the
installed wheel is under test (SPLAT_TEST_INSTALLED=1), a check that `splat`
is imported from site-packages and not from a source tree."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MARKERS = (
    "cuda: needs an NVIDIA GPU with a driver (skipped otherwise)",
    "metal: needs an Apple GPU with Metal (skipped otherwise)",
    "slow: longer tests (still run by default)",
)


def pytest_addoption(parser):
    group = parser.getgroup("splat")
    group.addoption("--reseed", type=int, default=0, metavar="N",
                    help="run each test that draws a random seed up to N times, each with a fresh seed")
    group.addoption("--reseed-seconds", type=float, default=30.0, metavar="S",
                    help="with --reseed: stop repeating a test after about S seconds (default 30)")


def pytest_configure(config):
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if config.getoption("reseed"):
        # Only then: this file also runs alone, copied into other folders by tests.
        import _reseed
        _reseed.configure(config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    if call.excinfo is not None:
        item.stash.setdefault(_FAILED_TRACEBACKS, []).append(call.excinfo.tb)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A failed test's traceback keeps its frames, and through them everything
    the test made, for the rest of the session: a GPU test's rasterizer and its
    device memory would then fail the tests after it. Once the failure has been
    reported (and --pdb has had it), the frames' locals are dropped."""
    yield
    for tb in item.stash.get(_FAILED_TRACEBACKS, []):
        while tb is not None:
            frame, tb = tb.tb_frame, tb.tb_next
            try:
                frame.clear()
            except RuntimeError:  # still running (a frame of pytest's own)
                continue
            frame.f_locals  # noqa: B018 -- re-syncs (empties) the dict a report took of the locals
    item.stash[_FAILED_TRACEBACKS] = []
    for name in ("last_traceback", "last_value", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)


_FAILED_TRACEBACKS = pytest.StashKey[list]()


def _installed_package_problem() -> str | None:
    import importlib.util
    spec = importlib.util.find_spec("splat")
    if spec is None or not spec.origin:
        return "no splat package is installed"
    where = os.path.realpath(spec.origin)
    for root in {os.environ.get("SPLAT_SOURCE_ROOT"), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}:
        if root and where.startswith(os.path.join(os.path.realpath(root), "python") + os.sep):
            return f"splat would be imported from the source tree ({where})"
    # The whole package must import: a stub stand-in (tests/_pkg.py) would
    # turn a native module missing from the wheel into skipped tests.
    try:
        import splat._core  # noqa: F401
        import splat  # noqa: F401
    except ImportError as exc:
        return f"the installed splat does not import ({exc})"
    return None


def pytest_sessionstart(session):
    if os.environ.get("SPLAT_TEST_INSTALLED") == "1":
        problem = _installed_package_problem()
        if problem:
            raise pytest.UsageError(f"SPLAT_TEST_INSTALLED=1: {problem}")


def pytest_report_header(config):
    import importlib.util
    spec = importlib.util.find_spec("splat")
    return f"splat from {spec.origin if spec else 'nowhere (not importable)'}"


@pytest.fixture(scope="session")
def compiler():
    """The C++ compiler the SIMT emulator's checks build with (tests/_simt.py)."""
    from _simt import find_compiler
    if sys.platform == "win32":
        pytest.skip("the SIMT emulator uses POSIX ucontext")
    cxx = find_compiler()
    if cxx is None:
        pytest.skip("no C++ compiler ($CXX, c++, g++ or clang++) on PATH")
    return cxx
