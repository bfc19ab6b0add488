"""bench/fast.py on the CPU: time-to-PSNR curves of recipes on a tiny Blender scene
and a tiny COLMAP capture made here; each curve's PSNR is the one splat.evaluate
gives the final model, and the first point reaching the target is the one reported."""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, SOURCE_ROOT, splat  # noqa: E402,F401
from test_bench_real import make_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
rng = np.random.default_rng()


def _fast():
    spec = importlib.util.spec_from_file_location("bench_fast", os.path.join(SOURCE_ROOT, "bench", "fast.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_curves_of_two_recipes_on_a_blender_scene_and_a_capture(tmp_path, capsys):
    from splat.data import synthetic
    train, test = synthetic.make_scene(n_gaussians=80, n_views=4, width=24, height=24, n_test_views=4)
    synthetic.write_blender(tmp_path / "lego_400", {"train": train, "test": test})
    make_scene(tmp_path / "captures" / "thermos")
    steps = int(rng.integers(6, 12))
    small = "train.init_points=200,train.densify_from=2,train.densify_every=2,train.sh_degree=1"
    fast = _fast()
    rc = fast.main(["--data", str(tmp_path), "--captures", str(tmp_path / "captures"), "--backend", "cpu",
                    "--json", str(tmp_path / "curves.json"),
                    "--recipes", "", "--evals", "3", "--variant", f"a:train.steps={steps},{small}",
                    "--variant", f"b:train.steps={steps + 3},train.preset=default,{small}"])
    assert rc == 0
    text = capsys.readouterr().out
    results = json.loads((tmp_path / "curves.json").read_text())["runs"]
    assert [(r["scene"], r["recipe"]) for r in results] == [("lego_400", "a"), ("lego_400", "b"),
                                                            ("thermos", "a"), ("thermos", "b")]
    for r in results:
        marks = [s for s, _, _, _ in r["points"]]
        last = steps if r["recipe"] == "a" else steps + 3
        assert marks == sorted({last * i // 3 for i in (1, 2, 3)}) and marks[-1] == last
        seconds = [t for _, t, _, _ in r["points"]]
        assert seconds == sorted(seconds) and seconds[0] > 0
        assert all(np.isfinite(p) and p > 5 for _, _, p, _ in r["points"])
    for word in ("time to PSNR", "reached at", "gsplat on thermos", "lego_400", "thermos"):
        assert word in text
    # The first point at or above a PSNR, in training seconds.
    pts = results[0]["points"]
    mid = sorted(p for _, _, p, _ in pts)[len(pts) // 2]
    hit = fast.first_reach(pts, mid)
    assert hit == next((s, t) for s, t, p, _ in pts if p >= mid)
    assert fast.first_reach(pts, max(p for _, _, p, _ in pts) + 1.0) is None


def test_seeds_run_each_recipe_and_are_summarised(tmp_path, capsys):
    from splat.data import synthetic
    train, test = synthetic.make_scene(n_gaussians=60, n_views=4, width=24, height=24, n_test_views=2)
    synthetic.write_blender(tmp_path / "lego_400", {"train": train, "test": test})
    small = "train.init_points=200,train.densify_from=2,train.densify_every=2,train.sh_degree=1,train.steps=6"
    fast = _fast()
    rc = fast.main(["--data", str(tmp_path), "--scenes", "lego_400", "--backend", "cpu", "--recipes", "",
                    "--evals", "2", "--seeds", "3", "--variant", f"a:{small}", "--json", str(tmp_path / "c.json"),
                    "--floaters"])
    assert rc == 0
    text = capsys.readouterr().out
    runs = json.loads((tmp_path / "c.json").read_text())["runs"]
    assert [(r["recipe"], r["seed"]) for r in runs] == [("a", 0), ("a", 1), ("a", 2)]
    final = [r["points"][-1][2] for r in runs]
    assert len(set(final)) > 1, "three seeds trained the same model"
    (g,) = fast.seed_summary(runs)
    assert g["seeds"] == [0, 1, 2] and g["worst"] == min(final)
    assert abs(g["mean"] - np.mean(final)) < 1e-9 and abs(g["std"] - np.std(final, ddof=1)) < 1e-9
    assert "over seeds" in text and f"{g['mean']:.2f}" in text
    # --floaters: each final model's worst test view (at or below the mean over the views), in a
    # table with a row per run
    names = set(splat.load_dataset(tmp_path / "lego_400", split="test", frames="0::2").names)
    for r in runs:
        fl = r["floaters"]
        assert fl["worst_psnr"] <= r["points"][-1][2] + 1e-9 and fl["worst_view"] in names
        assert fl["near_total"] >= fl["near_max"] >= 0 and fl["one_view"] >= 0
    table = text[text.index("floaters:"):].splitlines()
    assert sum(1 for line in table if line.startswith("lego_400   a ")) == 3


def test_bad_arguments_are_named(tmp_path, capsys):
    fast = _fast()
    for argv, words in ((["--recipes", "turbo"], "unknown recipe 'turbo'"),
                        (["--evals", "0"], "--evals"),
                        (["--seeds", "0"], "--seeds"),
                        (["--seeds", "2", "--recipes", "", "--variant", "s:train.seed=4"], "--seeds: a --variant"),
                        (["--backend-set", "nope=1"], "--backend-set nope=1"),
                        (["--recipes", "fast", "--variant", "fast:train.steps=5"], "--variant fast: the name"),
                        (["--scenes", "nosuch", "--captures", str(tmp_path)], "--scenes nosuch: no folder")):
        with pytest.raises(SystemExit) as exc:
            fast.main(["--data", str(tmp_path), "--backend", "cpu", *argv])
        assert exc.value.code == 2
        assert words in capsys.readouterr().err
