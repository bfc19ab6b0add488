"""`splat bench`: fixed-checkpoint replay timing, A/B comparison and parity, on the CPU backend."""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _scenes import write_blender_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat import bench, cli  # noqa: E402

SIZE = 32
TOML = """\
[data]
path = "../scene"
{data}
[train]
steps = 24
sh_degree = 1
sh_degree_interval = 10
densify_from = 4
densify_until = 30
densify_every = 4
densify_grad_threshold = 0.002
opacity_reset_every = 1000
init_points = 300
init_extent = 1.0
{train}
[backend]
backend = "cpu"
{backend}
[output]
dir = {out}
eval_steps = [24]
checkpoint_steps = [12]
render_views = 0
save_ply = false
"""
FAST = ["--iters", "4", "--repeats", "2", "--warmup", "1"]


def write_config(root, name, *, data="", train="", backend="", out=None):
    path = root / "configs" / name
    path.write_text(TOML.format(data=data, train=train, backend=backend,
                                out=json.dumps(str(out if out is not None else root / "run"))))
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A tiny Blender scene and a 24-step training run (checkpoints at 12 and 24)."""
    root = tmp_path_factory.mktemp("bench")
    write_blender_scene(root / "scene", SIZE, n_test_views=2)
    (root / "configs").mkdir()
    cfg = write_config(root, "a.toml")
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 0
    assert (root / "run" / "checkpoint_12.npz").is_file() and (root / "run" / "checkpoint.npz").is_file()
    return root


def run_bench(capsys, *argv):
    rc = cli.main(["bench", *[str(a) for a in argv]])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_summary(res, repeats, iters):
    for key in ("median_ms", "mean_ms", "min_ms", "sigma_pct", "step_sigma_pct"):
        assert finite(res[key]) and res[key] >= 0, key
    assert res["median_ms"] > 0
    assert len(res["runs"]) == repeats
    for r in res["runs"]:
        assert r["steps"] == iters
        assert all(finite(r[k]) for k in ("median_ms", "mean_ms", "min_ms", "max_ms", "sigma_pct"))
        assert r["min_ms"] <= r["median_ms"] <= r["max_ms"]


# --------------------------------------------------------------------------- timing


def test_bench_writes_json(root, capsys):
    cfg = root / "configs" / "a.toml"
    rc, out, err = run_bench(capsys, "--config", cfg, *FAST)
    assert rc == 0, err
    assert "median ms/step" in out and "sigma" in out
    res = json.loads((root / "run" / "bench.json").read_text())
    assert res["mode"] == "bench" and (res["iters"], res["repeats"], res["warmup"]) == (4, 2, 1)
    check_summary(res, 2, 4)
    assert res["checkpoint"] == str((root / "run" / "checkpoint.npz").resolve())   # the newest
    # A step of the run's recipe: a Blender scene's batch of four views (the random start's default).
    assert res["views_per_step"] == 4 and "(4 views a step)" in out
    assert res["start_step"] == 24 and res["end_step"] == 24 + (1 + 2 * 4) * 4
    assert res["backend"] == "cpu" and res["backend_config"]["backend"] == "cpu"
    assert res["image_size"] == [SIZE, SIZE] and res["views"] == 8
    # the replay neither densifies nor resets opacities
    assert res["num_gaussians"] == res["num_gaussians_end"] > 0
    assert res["densify_stats"] is True          # step 24 lies inside the densification phase (until 30)
    assert isinstance(res["allocations"], int) and res["allocations"] >= 0   # buffer growth while measured
    assert res["timings"] is None and "per_kernel" in res["timings_note"]
    assert not list((root / "run").glob("*.tmp"))


def test_bench_checkpoint_and_out(root, tmp_path, capsys):
    rc, out, err = run_bench(capsys, "--config", root / "configs" / "a.toml", "--checkpoint",
                             root / "run" / "checkpoint_12.npz", "--out", tmp_path / "b", "--iters", 3,
                             "--repeats", 1, "--warmup", 0)
    assert rc == 0, err
    res = json.loads((tmp_path / "b" / "bench.json").read_text())
    # Three batches of the run's 4 views from step 12.
    assert res["start_step"] == 12 and res["end_step"] == 12 + 3 * 4
    check_summary(res, 1, 3)


def test_a_runs_own_config_finds_its_run_folder(root, tmp_path, capsys):
    """A run trained with --out records that folder as output.dir in its config.toml,
    and `splat bench --config RUN/config.toml` replays that run's checkpoint, also after
    the folder has been moved."""
    import shutil
    out = tmp_path / "elsewhere"
    assert cli.main(["train", "--config", str(root / "configs" / "a.toml"), "--out", str(out), "--quiet",
                     "--steps", "12"]) == 0
    capsys.readouterr()
    assert tomllib.loads((out / "config.toml").read_text())["output"]["dir"] == str(out.resolve())
    moved = tmp_path / "moved"
    shutil.move(out, moved)
    rc, printed, err = run_bench(capsys, "--config", moved / "config.toml", "--iters", 2, "--repeats", 1,
                                 "--warmup", 0)
    assert rc == 0, err
    res = json.loads((moved / "bench.json").read_text())
    assert res["checkpoint"] == str((moved / "checkpoint.npz").resolve()) and res["start_step"] == 12


def test_replay_config_never_densifies(root):
    setup = bench.load_setup(root / "configs" / "a.toml")
    ckpt = bench.read_checkpoint(root / "run" / "checkpoint_12.npz")
    trainer = bench.make_trainer(ckpt, setup)
    assert trainer.step_count == 12
    n = trainer.num_gaussians
    for _ in range(8):                          # steps 16 and 20 would densify in training
        st = trainer.step()
        assert not st.densified
    assert trainer.num_gaussians == n
    assert trainer.config.opacity_reset_every > 10**9
    # the camera sequence is the trainer's own: a reloaded checkpoint continues identically
    ref = splat.Trainer.load_checkpoint(root / "run" / "checkpoint_12.npz", setup.dataset)
    assert [ref._native.view_for_step(s) for s in range(13, 30)] == \
           [trainer._native.view_for_step(s) for s in range(13, 30)]


def test_timing_table(root, capsys):
    cfg = write_config(root, "timed.toml", backend='timing = "per_kernel"')
    setup = bench.load_setup(cfg)
    probe = bench.make_trainer(bench.read_checkpoint(root / "run" / "checkpoint.npz"), setup)
    if not hasattr(probe._native, "timings"):
        pytest.skip("splat._core.Trainer has no timings() in this build")
    rc, out, err = run_bench(capsys, "--config", cfg, *FAST)
    assert rc == 0, err
    res = json.loads((root / "run" / "bench.json").read_text())
    table = res["timings"]
    assert table, res.get("timings_note")
    assert all(label.startswith("ts_") for label in table)
    # 2 x 4 steps, each of the run's 4 views one after another on the CPU and one update.
    views = res["views_per_step"]
    for label, calls in (("ts_fwd_rasterize", views), ("ts_backward_raster", views), ("ts_adam", 1)):
        assert label in table, sorted(table)
        row = table[label]
        assert row["calls"] == 8 * calls and row["calls_per_step"] == pytest.approx(calls), (label, row)
        for key in ("mean_us", "total_ms", "upload_ms", "alloc_ms", "gpu_ms", "readback_ms", "gpu_ms_per_step"):
            assert finite(row[key]) and row[key] >= 0, (label, key)
    assert finite(res["gpu_busy_ms_per_step"]) and res["gpu_busy_ms_per_step"] > 0
    assert "ts_fwd_rasterize" in out and "readback" in out


def test_compare(root, capsys):
    a = root / "configs" / "a.toml"
    b = write_config(root, "b.toml", backend='raster_backward = "tg"')
    rc, out, err = run_bench(capsys, "--config", a, "--compare", b, "--iters", 4, "--repeats", 3, "--warmup", 1)
    assert rc == 0, err
    assert "verdict" in out and "delta (B vs A)" in out
    assert any(v in out for v in ("B is faster", "B is slower", "within noise"))
    assert "raster_backward=tg" in err                     # the CPU's fallback is announced
    # A and B alternate repeat by repeat
    lines = [ln.strip() for ln in err.splitlines() if "repeat" in ln]
    assert [ln[:12] for ln in lines] == ["A repeat 1/3", "B repeat 1/3", "A repeat 2/3", "B repeat 2/3",
                                          "A repeat 3/3", "B repeat 3/3"]
    res = json.loads((root / "run" / "bench_compare.json").read_text())
    assert res["mode"] == "compare"
    check_summary(res["a"], 3, 4)
    check_summary(res["b"], 3, 4)
    assert res["a"]["start_step"] == res["b"]["start_step"] == 24
    assert res["a"]["end_step"] == res["b"]["end_step"]
    c = res["comparison"]
    assert c["verdict"] in ("faster", "slower", "within noise")
    assert c["threshold_pct"] >= 1.0 and c["threshold_pct"] >= 2 * max(res["a"]["sigma_pct"], res["b"]["sigma_pct"])
    assert c["delta_pct"] == pytest.approx(100 * (res["b"]["median_ms"] / res["a"]["median_ms"] - 1))


def test_verdict_and_summary():
    s = bench.summarize([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]])
    assert s["median_ms"] == 2.0 and s["min_ms"] == 1.0
    assert s["runs"][0]["sigma_pct"] == pytest.approx(50.0) and s["runs"][1]["sigma_pct"] == 0.0
    assert s["sigma_pct"] == 0.0                  # the repeat medians agree
    one = bench.summarize([[1.0, 3.0]])
    assert one["sigma_pct"] == one["step_sigma_pct"] > 0
    a = {"median_ms": 10.0, "sigma_pct": 0.2}
    assert bench.compare_verdict(a, {"median_ms": 9.0, "sigma_pct": 0.1})["verdict"] == "faster"
    assert bench.compare_verdict(a, {"median_ms": 11.0, "sigma_pct": 0.1})["verdict"] == "slower"
    v = bench.compare_verdict(a, {"median_ms": 10.05, "sigma_pct": 0.1})
    assert v["verdict"] == "within noise" and v["threshold_pct"] == 1.0            # the 1% floor
    v = bench.compare_verdict(a, {"median_ms": 9.0, "sigma_pct": 6.0})
    assert v["verdict"] == "within noise" and v["threshold_pct"] == 12.0           # 2 sigma


def test_find_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError):
        bench.find_checkpoint(tmp_path)
    for i, name in enumerate(("checkpoint_5.npz", "checkpoint_20.npz", "checkpoint.npz", "checkpoint_x.npz")):
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (1000 + i, 1000 + i))
    os.utime(tmp_path / "checkpoint_x.npz", (5000, 5000))   # not a checkpoint name
    assert bench.find_checkpoint(tmp_path).name == "checkpoint.npz"
    os.utime(tmp_path / "checkpoint.npz", (1001, 1001))     # same time as checkpoint_20: higher step wins
    assert bench.find_checkpoint(tmp_path).name == "checkpoint_20.npz"


# --------------------------------------------------------------------------- parity


def parity_json(root):
    return json.loads((root / "run" / "parity.json").read_text())


def test_parity_self(root, capsys):
    a = root / "configs" / "a.toml"
    rc, out, err = run_bench(capsys, "--parity", a, a, "--self")
    assert rc == 0, out + err
    assert "parity: PASS" in out
    res = parity_json(root)
    assert res["passed"] and res["self"] and res["step"] == 25
    for k in bench.GRAD_KEYS:
        row = res["buffers"][f"grad.{k}"]
        assert row["passed"] and row["max_abs"] == 0.0, k          # the CPU backend is bitwise deterministic
    if res["source"] == "debug_snapshot":
        assert res["buffers"]["tile_ranges"]["passed"]
        assert res["buffers"]["sorted_gauss"]["differing_positions"] == 0
    rc, out, err = run_bench(capsys, "--parity", a, "--self")      # one config is enough
    assert rc == 0, out + err


def test_parity_ignored_switches_pass(root, capsys):
    a = root / "configs" / "a.toml"
    b = write_config(root, "switches.toml", backend='raster_backward = "tg"\nraster_backward_sparse = "off"\n'
                                                   'radix_sort = "native"\nbinning = "per_iter_alloc"\n'
                                                   'timing = "per_kernel"')
    rc, out, err = run_bench(capsys, "--parity", a, b)
    assert rc == 0, out + err
    assert parity_json(root)["passed"]


@pytest.mark.parametrize("change", [dict(train="ssim_weight = 0.8"),
                                    dict(data="background = [0.0, 0.0, 0.0]")])
def test_parity_detects_different_gradients(root, capsys, change):
    a = root / "configs" / "a.toml"
    b = write_config(root, "different.toml", **change)
    rc, out, err = run_bench(capsys, "--parity", a, b)
    assert rc == 1, out + err
    assert "parity: FAIL" in out and "FAIL" in out.split("parity: FAIL")[0]
    res = parity_json(root)
    assert not res["passed"]
    assert any(not r["passed"] for name, r in res["buffers"].items() if name.startswith("grad."))
    assert res["loss_a"] != res["loss_b"]


def test_parity_perturbed_checkpoint_fails(root):
    ckpt = bench.read_checkpoint(root / "run" / "checkpoint.npz")
    rows_same = bench.compare_buffers({"grad.means": np.ones((3, 3), np.float32)},
                                      {"grad.means": np.ones((3, 3), np.float32) + 5e-5})
    assert rows_same["grad.means"]["passed"]                       # within 1e-4 + 1e-4 |b|
    # B's state differs from A's: the same step yields different gradients
    setup = bench.load_setup(root / "configs" / "a.toml")
    a = bench._parity_step(ckpt, setup)
    ckpt.arrays["means"] = ckpt.arrays["means"] + np.float32(0.01)
    b = bench._parity_step(ckpt, setup)
    if a["snapshot"] is None:
        pytest.skip(f"no debug snapshot: {a['why']}")
    rows = bench.compare_buffers(a["snapshot"], b["snapshot"])
    assert not rows["grad.means"]["passed"] and rows["grad.means"]["violations"] > 0


def test_parity_without_snapshot(root, capsys, monkeypatch):
    """Builds without a debug snapshot: gradients are recovered from the Adam moments."""
    monkeypatch.setattr(bench.parity, "_snapshot", lambda native: (None, "not in this build"))
    a = root / "configs" / "a.toml"
    rc, out, err = run_bench(capsys, "--parity", a, "--self")
    assert rc == 0, out + err
    res = parity_json(root)
    assert res["source"] == "adam_moments" and "not in this build" in res["note"]
    assert set(res["buffers"]) == {f"grad.{k}" for k in bench.GRAD_KEYS}
    b = write_config(root, "different.toml", train="ssim_weight = 0.8")
    rc, out, err = run_bench(capsys, "--parity", a, b)
    assert rc == 1, out + err


def test_adam_recovery_matches_snapshot(root):
    setup = bench.load_setup(root / "configs" / "a.toml")
    setup = bench.float32_moments(setup)   # as the parity step trains
    ckpt = bench.read_checkpoint(root / "run" / "checkpoint.npz")
    trainer = bench.make_trainer(ckpt, setup, densify_stats=True, one_view=True)
    trainer.step()
    if not hasattr(trainer._native, "debug_snapshot"):
        pytest.skip("splat._core.Trainer has no debug_snapshot() in this build")
    snap = trainer._native.debug_snapshot()
    derived = bench._derived_gradients(ckpt.arrays, trainer.state(), trainer.config.adam_beta1)
    for k in bench.PARAM_KEYS:
        g = snap[f"grad.{k}"].astype(np.float64)
        np.testing.assert_allclose(derived[f"grad.{k}"], g, atol=1e-7 + 1e-5 * np.abs(g).max(), err_msg=k)


# --------------------------------------------------------------------------- usage and user errors


def test_usage_errors(root, capsys):
    a = root / "configs" / "a.toml"
    for argv in ([], ["--parity", a], ["--parity", a, a, a], ["--self", "--config", a],
                 ["--config", a, "--compare", a, "--parity", a, a], ["--config", a, "--iters", "0"]):
        rc, out, err = run_bench(capsys, *argv)
        assert rc == 2, argv
        assert "usage: splat bench" in err
    rc, out, err = run_bench(capsys, "--help")
    assert rc == 0 and "--parity" in out and "--compare" in out


def test_user_errors(root, tmp_path, capsys):
    empty = write_config(root, "empty.toml", out=tmp_path / "no_run")
    rc, out, err = run_bench(capsys, "--config", empty, *FAST)
    assert rc == 1 and err.startswith("splat: error: ") and "no checkpoint" in err
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"nope")
    rc, out, err = run_bench(capsys, "--config", root / "configs" / "a.toml", "--checkpoint", bad, *FAST)
    assert rc == 1 and "bad.npz" in err and "Traceback" not in err
    other = tmp_path / "other"
    write_blender_scene(other, 24, n_test_views=1, n_gaussians=50, n_views=2, seed=1)
    small = write_config(root, "small.toml")
    small.write_text(small.read_text().replace('"../scene"', json.dumps(str(other))))
    rc, out, err = run_bench(capsys, "--config", small, "--checkpoint", root / "run" / "checkpoint.npz", *FAST)
    assert rc == 1 and "24x24" in err and "32x32" in err
    rc, out, err = run_bench(capsys, "--config", tmp_path / "missing.toml")
    assert rc == 1 and "missing.toml" in err
