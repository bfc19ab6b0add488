"""Every script under bench/ (each file with a __main__ block) parses and answers --help (from the source tree:
SPLAT_SOURCE_ROOT when the tests run against the installed wheel), so a
benchmark nobody ran lately still starts."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, SOURCE_ROOT  # noqa: E402

# The bench modules others import (gsplat_side.py) have no __main__ block.
SCRIPTS = sorted(p for p in glob.glob(os.path.join(SOURCE_ROOT, "bench", "*.py"))
                 if '__name__ == "__main__"' in open(p).read())


def test_there_are_benchmarks():
    assert len(SCRIPTS) >= 5, SCRIPTS


@pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_script_answers_help(script):
    proc = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(script))
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout and "Traceback" not in proc.stderr
