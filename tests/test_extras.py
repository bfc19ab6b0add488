"""The install extras of pyproject.toml: `[all]` is every user-facing extra in one, so one
`pip install ".[all]"` (one build of the native core) gives everything, and it cannot
fall behind when an extra changes."""
from __future__ import annotations

import os
import sys

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = os.environ.get("SPLAT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPROJECT = os.path.join(ROOT, "pyproject.toml")
# Not in [all]: the test suite's tools, CUDA 13's NVRTC (an alternative to [cuda]'s:
# with both installed, [cuda]'s is used), and NCCL (~350 MB, for multi-GPU hosts).
NOT_IN_ALL = {"all", "test", "cuda13", "multigpu"}


def extras() -> dict:
    if not os.path.isfile(PYPROJECT):
        pytest.skip(f"no pyproject.toml at {PYPROJECT} (SPLAT_SOURCE_ROOT names the checkout)")
    with open(PYPROJECT, "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def test_all_holds_every_user_facing_extra():
    ex = extras()
    assert "all" in ex, sorted(ex)
    everything = set(ex["all"])
    for name, reqs in ex.items():
        if name in NOT_IN_ALL:
            continue
        missing = [r for r in reqs if r not in everything]
        assert not missing, f"[all] lacks [{name}]'s {missing}"
    # and nothing else: each requirement of [all] comes from one of the extras it gathers
    gathered = {r for name, reqs in ex.items() if name not in NOT_IN_ALL for r in reqs}
    assert everything <= gathered, sorted(everything - gathered)
    for r in ex["cuda13"]:
        assert r not in everything


def test_readme_installs_everything_in_one_line_from_a_clone():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    install = readme[readme.index("## Install"):readme.index("## First run")]
    assert 'pip install ".[all]"' in install
    assert "until a release" in install.lower() and "clone" in install.lower()
