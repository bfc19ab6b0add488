"""bench/gate.py on the CPU at a tiny size: one scene of the two trains alone, and
the scenes it cannot find or read are named in a usage error, not a traceback
(lego_800, scored on lego_400's test views, needs lego_400 beside it)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, SOURCE_ROOT  # noqa: E402
from _scenes import make_rng, write_blender_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
SCRIPT = os.path.join(SOURCE_ROOT, "bench", "gate.py")


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, "--backend", "cpu", *map(str, args)], capture_output=True,
                          text=True, timeout=600)


def test_one_scene_trains_alone(tmp_path):
    rng, seed = make_rng()
    write_blender_scene(tmp_path / "lego_400", 24, 2, n_gaussians=60, n_views=4, seed=seed)
    proc = _run("--data", tmp_path, "--scenes", "lego_400", "--steps", 2)
    assert proc.returncode == 0, (proc.stderr[-3000:], seed)
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("lego_400 ")]
    assert [r[2] for r in rows] == ["2"], proc.stdout   # one row: its step
    assert 0 < float(rows[0][4]) < 100, rows   # a PSNR was measured


def test_missing_and_unreadable_scenes_are_named(tmp_path):
    (tmp_path / "lego_800").mkdir()   # a folder that holds no dataset
    proc = _run("--data", tmp_path, "--scenes", "lego_400,lego_800", "--steps", 1)
    assert proc.returncode == 2 and "--scenes: no lego_400 under" in proc.stderr, proc.stderr
    proc = _run("--data", tmp_path, "--scenes", "lego_800", "--steps", 1)
    assert proc.returncode == 2 and "scored on lego_400's test views: no lego_400 under" in proc.stderr, proc.stderr
    (tmp_path / "lego_400").mkdir()
    proc = _run("--data", tmp_path, "--scenes", "lego_800", "--steps", 1)
    assert proc.returncode == 2 and "--scenes lego_800:" in proc.stderr and "not a recognised dataset" in proc.stderr, \
        proc.stderr
    assert "Traceback" not in proc.stderr
