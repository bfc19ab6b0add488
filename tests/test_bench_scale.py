"""bench/scale.py on the CPU at tiny sizes: one row per (count, size) cell, each
cell's Gaussian count held (no densification), clean argument errors."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, SOURCE_ROOT  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
SCRIPT = os.path.join(SOURCE_ROOT, "bench", "scale.py")


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=600)


def _compared_rows(proc):
    """The table of a run with variants: its lines, its header's index and its rows split."""
    lines = proc.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("variant"))
    return lines, head, [ln.split() for ln in lines[head + 2:] if ln.strip()]


def test_table_has_a_row_per_cell():
    rng = np.random.default_rng()
    counts = sorted(int(x) for x in rng.integers(300, 3000, size=2))
    proc = _run("--backend", "cpu", "--gaussians", ",".join(map(str, counts)), "--sizes", "40x32,24x48",
                "--steps", "2", "--warmup", "1", "--seed", str(int(rng.integers(0, 2**31))))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("#Gauss"))
    rows = [ln.split() for ln in lines[head + 2:] if ln.strip()]
    assert [(int(r[0].replace(",", "")), r[1]) for r in rows] == \
        [(n, s) for n in counts for s in ("40x32", "24x48")]
    for r in rows:
        ms, per_kg, per_mp, rss = (float(x) for x in r[2:6])
        n, (w, h) = int(r[0].replace(",", "")), (int(v) for v in r[1].split("x"))
        assert ms > 0 and rss > 0
        np.testing.assert_allclose(per_kg, 1e3 * ms / (n / 1e3), rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(per_mp, ms / (w * h / 1e6), rtol=2e-3, atol=2e-3)


def test_cell_keeps_its_count():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    n = int(np.random.default_rng().integers(500, 2000))
    row = mod.run_cell(n, 32, 24, "cpu", steps=3, warmup=1, seed=1)
    assert row["count"] == n and np.isfinite(row["loss"]) and row["loss"] > 0


def test_breakdown_is_gpu_only_and_leaves_the_cpu_table_as_it_is():
    # The ts_* labels are GPU event timings: on the cpu backend the flag adds nothing.
    n = int(np.random.default_rng().integers(300, 1500))
    proc = _run("--backend", "cpu", "--gaussians", str(n), "--sizes", "32x24", "--steps", "2", "--warmup", "1",
                "--breakdown")
    assert proc.returncode == 0, proc.stderr
    assert "ts_" not in proc.stdout and f"{n:,} 32x24:" in proc.stdout


def test_compare_runs_each_cell_again_and_prints_its_ratio():
    # Each cell once per variant (the default's first), the ratio of its ms to the default's;
    # a BackendConfig field and a recipe key alike.
    n = int(np.random.default_rng().integers(300, 1500))
    proc = _run("--backend", "cpu", "--gaussians", str(n), "--sizes", "32x24", "--steps", "2", "--warmup", "1",
                "--compare", "pair_sizing=readback", "--compare", "train.blend_stop=chunk")
    assert proc.returncode == 0, proc.stderr
    _, _, rows = _compared_rows(proc)
    assert [r[0] for r in rows] == ["default", "pair_sizing=readback", "train.blend_stop=chunk"]
    ms = [float(r[3]) for r in rows]
    np.testing.assert_allclose([float(r[-1]) for r in rows], [1.0, ms[1] / ms[0], ms[2] / ms[0]], rtol=2e-3,
                               atol=2e-3)


def test_a_compared_recipe_key_reaches_the_cell():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # batch_views = 4: a step's loss is the mean of four views' instead of one view's.
    row = mod.run_cell(1000, 32, 24, "cpu", steps=2, warmup=0, seed=1, train_keys={"batch_views": 4})
    plain = mod.run_cell(1000, 32, 24, "cpu", steps=2, warmup=0, seed=1)
    assert row["loss"] != plain["loss"] and row["count"] == plain["count"] == 1000


def test_rounds_repeat_the_variants_in_turn_each_against_its_own_default():
    n = int(np.random.default_rng().integers(300, 1500))
    proc = _run("--backend", "cpu", "--gaussians", str(n), "--sizes", "32x24", "--steps", "2", "--warmup", "1",
                "--compare", "pair_sizing=readback", "--rounds", "2")
    assert proc.returncode == 0, proc.stderr
    lines, head, rows = _compared_rows(proc)
    assert lines[head].split()[:2] == ["variant", "round"]
    assert [(r[0], int(r[1])) for r in rows] == [("default", 1), ("pair_sizing=readback", 1), ("default", 2),
                                                 ("pair_sizing=readback", 2)]
    ms = [float(r[4]) for r in rows]
    np.testing.assert_allclose([float(r[-1]) for r in rows], [1.0, ms[1] / ms[0], 1.0, ms[3] / ms[2]], rtol=2e-3,
                               atol=2e-3)


@pytest.mark.cuda
def test_compared_kernel_options_reach_the_kernels_compiler():
    # An option NVRTC rejects makes the variant's cells fail, and only theirs:
    # the options reached the kernels' compiler, in the variant's process alone.
    import splat
    ok, why = splat.backend_available("cuda")
    if not ok:
        pytest.skip(f"no cuda backend: {why}")
    proc = _run("--backend", "cuda", "--gaussians", "2000", "--sizes", "64x48", "--steps", "2", "--warmup", "1",
                "--compare-kernels=--no-such-nvrtc-option")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines, head, rows = _compared_rows(proc)
    assert rows[0][0] == "default" and float(rows[0][3]) > 0
    assert rows[1][0] == "--no-such-nvrtc-option" and "failed:" in lines[head + 3]


@pytest.mark.parametrize("args, says", [(["--sizes", "8x8"], "--sizes"), (["--sizes", "axb"], "--sizes"),
                                        (["--gaussians", "0"], "--gaussians"), (["--gaussians", "x"], "--gaussians"),
                                        (["--steps", "0"], "--steps"), (["--compare", "x=y"], "--compare"),
                                        (["--compare", "pair_sizing=sideways"], "--compare"),
                                        (["--compare", "train.blend_stop=pixel"], "--compare"),
                                        (["--compare-kernels=-DSPLAT_SORT_STAGED=0"], "cuda backend only"),
                                        (["--rounds", "0"], "--rounds")])
def test_usage_errors(args, says):
    proc = _run("--backend", "cpu", *args)
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr


def test_compared_kernel_options_must_be_options():
    proc = _run("--backend", "cuda", "--compare-kernels=-DSPLAT_SORT_STAGED=0 SPLAT_BWD_COMPACT=0")
    assert proc.returncode == 2 and "expected NVRTC options" in proc.stderr and "Traceback" not in proc.stderr
