"""bench/real.py on the CPU: a tiny step count on small COLMAP captures made here
(the gsplat side only where gsplat and CUDA are present)."""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, SOURCE_ROOT, splat  # noqa: E402,F401
import _captures as cap  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
rng = np.random.default_rng()
TINY = ["--set", "train.densify_from=2", "--set", "train.densify_until=6", "--set", "train.densify_every=2",
        "--set", "train.sh_degree=1", "--set", "train.sh_degree_interval=4"]


def _real():
    spec = importlib.util.spec_from_file_location("bench_real", os.path.join(SOURCE_ROOT, "bench", "real.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_scene(root, n=9, w=32, h=24):
    images = []
    for k in range(n):     # landscape and portrait views alternate
        name = f"{k:04d}.jpg"
        shape = (h, w, 3) if k % 2 == 0 else (w, h, 3)
        cap.save_image(root / "images" / name, rng.integers(20, 230, shape, dtype=np.uint8))
        images.append((name, 1 + k % 2, cap.random_w2c(rng)))
    cams = {1: ("SIMPLE_RADIAL", w, h, [27.0, w / 2, h / 2, 0.05]), 2: ("PINHOLE", h, w, [27.0, 27.0, h / 2, w / 2])}
    cap.write_colmap_text(root, cams, images, rng.normal(size=(400, 3)) * 0.4)
    return root


def test_real_bench_cpu(tmp_path, capsys):
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    make_scene(root / "beta", n=10)
    out = tmp_path / "real.json"
    rc = _real().main(["--root", str(root), "--steps", "4,8", "--backend", "cpu", "--json", str(out), *TINY])
    assert rc == 0
    text = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [(r["scene"], r["steps"]) for r in rows] == [("alpha", 4), ("alpha", 8), ("beta", 4), ("beta", 8)]
    for r in rows:
        assert r["trainer"] == "splat" and np.isfinite(r["psnr"]) and 0 < r["ssim"] < 1 and r["gaussians"] > 0
        assert r["seconds"] > 0 and not r["stopped"]
    assert rows[1]["seconds"] >= rows[0]["seconds"]
    for word in ("PSNR", "SSIM", "#Gaussians", "train s", "peak GiB", "alpha", "beta"):
        assert word in text


def test_real_bench_pieces_and_budget(tmp_path, capsys):
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    make_scene(root / "beta")
    mod = _real()
    out = tmp_path / "r.json"
    assert mod.main(["--root", str(root), "--scenes", "beta", "--steps", "3", "--backend", "cpu",
                     "--json", str(out), *TINY]) == 0
    assert [r["scene"] for r in json.loads(out.read_text())["rows"]] == ["beta"]
    # a spent budget: nothing starts, every scene is listed as skipped
    assert mod.main(["--root", str(root), "--steps", "3", "--backend", "cpu", "--max-seconds", "0",
                     "--json", str(out), *TINY]) == 0
    data = json.loads(out.read_text())
    assert data["rows"] == [] and len(data["skipped"]) == 2
    with pytest.raises(SystemExit, match="unknown scene"):
        mod.main(["--root", str(root), "--scenes", "gamma"])
    with pytest.raises(SystemExit, match="--set"):
        mod.main(["--root", str(root), "--set", "output.dir=x"])


def test_real_bench_backend_set_reaches_every_run(tmp_path, capsys, monkeypatch):
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    mod = _real()
    seen = []
    original = splat.Trainer.from_dataset.__func__

    def recording(cls, dataset, train_config=None, backend_config=None, **kw):
        seen.append(backend_config)
        return original(cls, dataset, train_config, backend_config, **kw)

    monkeypatch.setattr(splat.Trainer, "from_dataset", classmethod(recording))
    assert mod.main(["--root", str(root), "--steps", "3", "--backend", "cpu", "--seeds", "2",
                     "--backend-set", "deterministic=true", "--backend-set", "raster_backward_atomic=lane_zero",
                     *TINY]) == 0
    assert len(seen) == 2
    for cfg in seen:
        assert cfg.deterministic is True and str(cfg.raster_backward_atomic).endswith("lane_zero")
    capsys.readouterr()
    for bad in ("nosuchfield=1", "deterministic", "backend=cpu", "deterministic=perhaps"):
        with pytest.raises(SystemExit):
            mod.main(["--root", str(root), "--backend", "cpu", "--backend-set", bad])
        assert f"--backend-set {bad}" in capsys.readouterr().err, bad


def test_real_bench_gsplat_side_by_side(tmp_path, capsys):
    pytest.importorskip("gsplat")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("gsplat needs a CUDA device")
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    out = tmp_path / "g.json"
    assert _real().main(["--root", str(root), "--steps", "20", "--gsplat", "--json", str(out), *TINY]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["trainer"] for r in rows} == {"splat", "gsplat"}
    for r in rows:
        assert np.isfinite(r["psnr"]) and r["gaussians"] > 0 and r["peak_bytes"]
    assert "splat against gsplat" in capsys.readouterr().out


def test_real_bench_seeds_summarise_each_seed(tmp_path, capsys):
    """--seeds 3: each scene trained with train.seed S, S+1, S+2 (S from --set), each run
    as the same command with that seed alone would give, and a summary whose mean, std
    (n - 1), worst and best are those of the rows."""
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    out = tmp_path / "seeds.json"
    rc = _real().main(["--root", str(root), "--steps", "6", "--backend", "cpu", "--seeds", "3", "--set",
                       "train.seed=5", "--per-view", "--json", str(out), *TINY])
    assert rc == 0
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    rows = data["rows"]
    # --per-view: each test view's PSNR per seed (their mean is the run's PSNR) and its
    # spread over the seeds (statistics.stdev as the independent oracle).
    names = list(rows[0]["view_psnr"])
    assert names == ["0000.jpg", "0008.jpg"] and all(list(r["view_psnr"]) == names for r in rows)  # every 8th
    for r in rows:
        assert np.mean(list(r["view_psnr"].values())) == pytest.approx(r["psnr"], abs=1e-6)
    table = text[text.index("per test view, alpha splat at 6 steps"):].splitlines()
    for name in names:
        line = next(x for x in table if x.startswith(name)).split()
        per_seed = [r["view_psnr"][name] for r in rows]
        assert [float(x) for x in line[1:4]] == pytest.approx(per_seed, abs=0.006)
        assert float(line[4]) == pytest.approx(statistics.stdev(per_seed), abs=0.006)
        assert float(line[5]) == pytest.approx(max(per_seed) - min(per_seed), abs=0.006)
    assert [r["seed"] for r in rows] == [5, 6, 7]
    psnr = np.array([r["psnr"] for r in rows])
    assert len(set(np.round(psnr, 6))) > 1    # the seeds train differently
    (g,) = data["seeds"]
    assert g["seeds"] == [5, 6, 7] and g["trainer"] == "splat" and g["target"] == 6
    assert g["mean"] == pytest.approx(psnr.mean()) and g["std"] == pytest.approx(psnr.std(ddof=1))
    assert g["worst"] == pytest.approx(psnr.min()) and g["best"] == pytest.approx(psnr.max())
    assert "over seeds" in text and "mean PSNR" in text
    single = tmp_path / "one.json"
    assert _real().main(["--root", str(root), "--steps", "6", "--backend", "cpu", "--set", "train.seed=6",
                         "--json", str(single), *TINY]) == 0
    assert json.loads(single.read_text())["rows"][0]["psnr"] == pytest.approx(rows[1]["psnr"], abs=1e-4)
    with pytest.raises(SystemExit, match="--seeds"):
        _real().main(["--root", str(root), "--seeds", "0", "--backend", "cpu"])


def test_near_camera_gaussians_counts_what_floats_in_front_of_a_view():
    """A constructed scene: most Gaussians at depth ~10 in front of the camera,
    a few at depth 0.3-0.8 inside its image (the floaters), some as near but
    behind it or outside the image (not in its view), one far camera that sees
    none of the near ones nearer than a tenth of its median."""
    real = _real()
    w2c = np.eye(4, dtype=np.float32)
    cam = splat.Camera(w2c, 50.0, 50.0, 32.0, 24.0, 64, 48)
    n_bulk, n_near = int(rng.integers(200, 400)), int(rng.integers(3, 12))
    bulk = np.column_stack([rng.uniform(-4, 4, n_bulk), rng.uniform(-3, 3, n_bulk), rng.uniform(9, 11, n_bulk)])
    near_z = rng.uniform(0.3, 0.8, n_near)
    near = np.column_stack([rng.uniform(-0.1, 0.1, n_near) * near_z, rng.uniform(-0.1, 0.1, n_near) * near_z, near_z])
    behind = np.column_stack([np.zeros(4), np.zeros(4), -rng.uniform(0.3, 0.8, 4)])
    outside = np.column_stack([np.full(4, 5.0), np.zeros(4), rng.uniform(0.3, 0.8, 4)])  # x = 50 f/z px off
    means = np.vstack([bulk, near, behind, outside]).astype(np.float32)
    logits = rng.normal(0, 1, len(means)).astype(np.float32)
    ((count, opacity),) = real.near_camera_gaussians(means, logits, [cam])
    assert count == n_near
    sig = 1 / (1 + np.exp(-logits.astype(np.float64)))
    assert opacity == pytest.approx(sig[n_bulk:n_bulk + n_near].sum())
    # From 100 units back the near ones sit among the bulk: nothing is a tenth as near.
    far = np.eye(4, dtype=np.float32)
    far[2, 3] = 100.0
    assert real.near_camera_gaussians(means, logits, [splat.Camera(far, 50.0, 50.0, 32.0, 24.0, 64, 48)]) == [(0, 0.0)]


def test_enclosing_gaussians_counts_the_ellipsoids_that_hold_a_camera():
    """Gaussians with random axis scales, turned (a quarter turn about z, then one about
    x: (w, x, y, z) = (1, 1, -1, 1) / 2, given unnormalised; local x, y, z run along world
    z, -x, -y) or not at all, each at a random offset from the camera's centre: the
    Mahalanobis distance is written by hand from where the turn takes the axes,
    independently of any rotation code (a turn about one axis alone would not tell R from
    its transpose)."""
    real = _real()
    w2c = np.eye(4, dtype=np.float32)
    w2c[:3, 3] = rng.uniform(-2, 2, 3)
    cam = splat.Camera(w2c, 50.0, 50.0, 32.0, 24.0, 64, 48)
    centre = np.asarray(cam.center, np.float64)
    n = int(rng.integers(300, 600))
    scales = rng.uniform(0.05, 2.0, (n, 3))
    offset = rng.uniform(-4, 4, (n, 3))             # camera centre minus mean, in world axes
    turned = rng.random(n) < 0.5
    quats = np.where(turned[:, None], [0.5, 0.5, -0.5, 0.5], [1.0, 0.0, 0.0, 0.0]) * rng.uniform(0.5, 2.0, (n, 1))
    local = np.where(turned[:, None], np.column_stack([offset[:, 2], -offset[:, 0], -offset[:, 1]]), offset)
    dist2 = ((local / scales) ** 2).sum(1)
    keep = np.abs(dist2 - 9.0) > 1e-3                  # none on the boundary
    means = (centre - offset)[keep]
    (got,) = real.enclosing_gaussians(means, np.log(scales[keep]), quats[keep], [cam])
    assert got == int((dist2[keep] < 9.0).sum())
    assert 0 < got < keep.sum()
    (got2,) = real.enclosing_gaussians(means, np.log(scales[keep]), quats[keep], [cam], sigma=2.0)
    assert got2 == int((dist2[keep] < 4.0).sum())


def test_views_seeing_counts_the_cameras_that_have_each_gaussian_in_view():
    """Cameras on a line along x, all looking down +z, each 64 px wide (margin 0):
    a Gaussian at (x, y, z) is in camera k's view when its offset from the camera's
    centre projects inside the image, counted here independently of the projection
    code by the pinhole's view angle."""
    real = _real()
    f, w, h = 40.0, 64, 48
    n_cams = int(rng.integers(4, 8))
    xs = np.sort(rng.uniform(-3, 3, n_cams))
    cams = []
    for x in xs:
        w2c = np.eye(4, dtype=np.float32)
        w2c[0, 3] = -x  # the camera sits at (x, 0, 0)
        cams.append(splat.Camera(w2c, f, f, w / 2, h / 2, w, h))
    n = int(rng.integers(300, 600))
    means = np.column_stack([rng.uniform(-6, 6, n), rng.uniform(-1, 1, n), rng.uniform(-1, 8, n)])
    got = real.views_seeing(means.astype(np.float32), cams, margin=0.0)
    half_x, half_y = (w / 2) / f, (h / 2) / f  # tan of the half view angles
    z = means[:, 2]
    want = np.zeros(n, np.int64)
    for x in xs:
        # well inside or well outside only: points within 1e-4 of an edge are dropped below
        want += (z > 0) & (np.abs(means[:, 0] - x) < half_x * z) & (np.abs(means[:, 1]) < half_y * z)
    clear = np.ones(n, bool)
    for x in xs:
        clear &= np.abs(np.abs(means[:, 0] - x) - half_x * z) > 1e-4
        clear &= np.abs(np.abs(means[:, 1]) - half_y * z) > 1e-4
    assert clear.sum() > n // 2 and (want[clear] >= 2).any() and (want[clear] == 0).any()
    np.testing.assert_array_equal(got[clear], want[clear])


def test_real_bench_floaters_table(tmp_path, capsys):
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    out = tmp_path / "f.json"
    assert _real().main(["--root", str(root), "--steps", "4", "--backend", "cpu", "--floaters", "--json", str(out),
                         *TINY]) == 0
    text = capsys.readouterr().out
    (row,) = json.loads(out.read_text())["rows"]
    assert row["near_total"] >= row["near_max"] >= 0 and row["near_opacity"] >= 0
    assert 0 <= row["one_view"] <= row["gaussians"]
    assert row["worst_view"] is not None and row["worst_psnr"] <= row["psnr"] + 1e-9
    assert "floaters: the worst test view" in text and "near total" in text and "enclosing" in text and "one view" in text


def test_targets_are_judged_from_the_rows():
    import io
    real = _real()
    t_ok, t_slow = float(rng.uniform(10, 79)), float(rng.uniform(81, 400))
    p7 = float(rng.uniform(20, 30))

    def row(scene, seed, target, psnr, seconds=1.0):
        return dict(scene=scene, trainer="splat", steps=target, target=target, stopped=False, psnr=psnr,
                    seconds=seconds, seed=seed)
    rows = [row("room", 0, 7000, p7), row("room", 0, 30000, p7 - 0.05, t_ok),
            row("room", 1, 7000, p7), row("room", 1, 30000, p7 - 0.5, t_slow)]
    summary = real.seed_summary(rows)
    buf = io.StringIO()
    real.print_targets(rows, summary, buf)
    lines = buf.getvalue().splitlines()
    assert any("seed    0" in ln and "(<= 80): met" in ln for ln in lines), lines
    assert any("seed    1" in ln and "(<= 80): not met" in ln for ln in lines), lines
    assert any("seed    0" in ln and "-0.05 dB against 7000" in ln and ": met" in ln for ln in lines), lines
    assert any("seed    1" in ln and "-0.50 dB against 7000" in ln and "not met" in ln for ln in lines), lines
    std = float(np.std([p7 - 0.05, p7 - 0.5], ddof=1))
    assert any(f"std {std:.2f} dB over 2 seeds" in ln and "not met" in ln for ln in lines), lines


def test_real_bench_variants_train_beside_the_default(tmp_path, capsys):
    """--variant NAME:KEYS: each scene and seed trained again with those keys on top, as
    trainer splat:NAME; train.max_gaussians=@default takes the default run's final count
    (the MCMC-at-the-same-size comparison); each variant run is the one --set gives."""
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    out = tmp_path / "variants.json"
    rc = _real().main(["--root", str(root), "--steps", "6", "--backend", "cpu", "--seeds", "2", "--json", str(out),
                       "--variant", "mcmc:train.strategy=mcmc,train.max_gaussians=@default,train.mcmc_refine_from=2,"
                       "train.mcmc_refine_every=2", "--variant", "aa:train.antialiased=true", *TINY])
    assert rc == 0
    text = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [(r["trainer"], r["seed"]) for r in rows] == [(t, s) for s in (0, 1) for t in ("splat", "splat:mcmc",
                                                                                           "splat:aa")]
    for s in (0, 1):
        by = {r["trainer"]: r for r in rows if r["seed"] == s}
        assert by["splat:mcmc"]["gaussians"] <= by["splat"]["gaussians"]  # capped at the default's count
    groups = {g["trainer"]: g for g in json.loads(out.read_text())["seeds"]}
    assert set(groups) == {"splat", "splat:mcmc", "splat:aa"} and all(g["seeds"] == [0, 1] for g in groups.values())
    assert "splat:mcmc" in text and "over seeds" in text
    # Each variant paired with the default, seed by seed, from the rows themselves.
    paired = {g["trainer"]: g for g in json.loads(out.read_text())["paired"]}
    assert set(paired) == {"splat:mcmc", "splat:aa"} and "paired against splat" in text
    psnr = {(r["trainer"], r["seed"]): r["psnr"] for r in rows}
    for name, g in paired.items():
        assert g["diffs"] == pytest.approx([psnr[(name, s)] - psnr[("splat", s)] for s in (0, 1)], abs=1e-12)
    # The aa variant of seed 1 is the run --set gives alone.
    alone = tmp_path / "alone.json"
    assert _real().main(["--root", str(root), "--steps", "6", "--backend", "cpu", "--set", "train.seed=1", "--set",
                         "train.antialiased=true", "--json", str(alone), *TINY]) == 0
    want = [r for r in rows if r["trainer"] == "splat:aa" and r["seed"] == 1][0]["psnr"]
    assert json.loads(alone.read_text())["rows"][0]["psnr"] == pytest.approx(want, abs=1e-4)
    # --jobs 3: the same runs three at a time in threads, the same rows in the same order
    # (the MCMC variant waits for its seed's default run, whose count it takes).
    threaded = tmp_path / "threaded.json"
    rc = _real().main(["--root", str(root), "--steps", "6", "--backend", "cpu", "--seeds", "2", "--json",
                       str(threaded), "--jobs", "3", "--variant", "mcmc:train.strategy=mcmc,train.max_gaussians=@default,"
                       "train.mcmc_refine_from=2,train.mcmc_refine_every=2", "--variant", "aa:train.antialiased=true",
                       *TINY])
    assert rc == 0
    assert "3 at a time (--jobs)" in capsys.readouterr().out
    trows = json.loads(threaded.read_text())["rows"]
    assert [(r["trainer"], r["seed"], r["steps"], r["gaussians"]) for r in trows] == \
        [(r["trainer"], r["seed"], r["steps"], r["gaussians"]) for r in rows]
    assert [r["psnr"] for r in trows] == pytest.approx([r["psnr"] for r in rows], abs=1e-4)
    assert all(r["concurrent"] == 3 and r["peak_bytes"] is None for r in trows)
    for bad, match in [(["--jobs", "0"], "--jobs"), (["--jobs", "2", "--breakdown"], "--breakdown")]:
        with pytest.raises(SystemExit, match=match):
            _real().main(["--root", str(root), "--backend", "cpu", *bad])
    for bad, match in [("nocolon", "expected NAME"), ("x:train.seed=@default", "@default is for"),
                       ("splat:train.seed=1", "expected NAME")]:
        with pytest.raises(SystemExit, match=match):
            _real().main(["--root", str(root), "--backend", "cpu", "--variant", bad])


def test_real_bench_fit_exposure_scores_right_halves_with_fitted_colours(tmp_path, capsys):
    """--fit-exposure: the splat rows are splat.evaluate(fit_exposure=True) of the same
    training run (the CPU backend is deterministic: the same recipe trained again here)."""
    root = tmp_path / "captures"
    make_scene(root / "alpha")
    real = _real()
    seed = int(rng.integers(0, 1000))
    args = ["--root", str(root), "--steps", "6", "--backend", "cpu", "--set", f"train.seed={seed}", *TINY]
    rows = {}
    for fit in (False, True):
        out = tmp_path / f"r{fit}.json"
        assert real.main(args + ["--json", str(out)] + (["--fit-exposure"] if fit else [])) == 0
        [rows[fit]] = json.loads(out.read_text())["rows"]
        assert rows[fit]["fit_exposure"] is fit
    text = capsys.readouterr().out
    assert "fitted on its left half (--fit-exposure)" in text
    from splat.cli._data import parse_overrides
    overrides = parse_overrides([a for a in args[args.index("--set"):] if a != "--set"])
    train, test = real.load_scene(root / "alpha", overrides)
    tr = splat.Trainer.from_dataset(train, real.train_config(6, overrides), splat.BackendConfig(backend="cpu"))
    for _ in range(6):
        tr.step()
    want = splat.evaluate(tr, test, fit_exposure=True)
    assert rows[True]["psnr"] == pytest.approx(want.psnr, abs=1e-9)
    assert rows[True]["ssim"] == pytest.approx(want.ssim, abs=1e-9)
    assert rows[False]["psnr"] == pytest.approx(splat.evaluate(tr, test).psnr, abs=1e-9)
    assert rows[True]["psnr"] != rows[False]["psnr"]


def test_gsplat_side_scores_fitted_right_halves_as_splat_does():
    """The gsplat side's evaluation with fit_exposure (no GPU: a render function that
    returns each test image through an affine colour map): the fit undoes the map, so the
    right halves score far above the unfitted images; and the numbers are
    splat.metrics' on the same protocol."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(SOURCE_ROOT, "bench"))
    import gsplat_side
    from splat.metrics import exposure_halves, fitted_render, psnr
    views = [rng.integers(30, 220, (20 + 2 * k, 26, 3), dtype=np.uint8) for k in range(3)]  # heights differ
    cams = [splat.Camera(np.eye(4), 30.0, 30.0, img.shape[1] / 2, img.shape[0] / 2, img.shape[1], img.shape[0])
            for img in views]
    test = type("Test", (), {"cameras": cams, "images": views})()
    a = np.eye(3) * 0.8 + rng.uniform(-0.05, 0.05, (3, 3))
    b = rng.uniform(0.02, 0.08, 3)
    by_size = {(c.width, c.height): np.clip((img / 255.0) @ a.T + b, 0, 1).astype(np.float32)
               for c, img in zip(cams, views)}

    def render(_cam, width, height, _degree):
        return torch.tensor(by_size[(width, height)]), None

    plain, _ = gsplat_side._evaluate(torch, render, test, torch.device("cpu"), 0)
    fitted, _ = gsplat_side._evaluate(torch, render, test, torch.device("cpu"), 0, fit_exposure=True)
    want = []
    for c, img in zip(cams, views):
        t = img.astype(np.float32) / 255.0
        fit, score = exposure_halves(c.height, c.width)
        r, _ = fitted_render(by_size[(c.width, c.height)], t, fit)
        want.append(psnr(r, t, score))
    assert fitted == pytest.approx(float(np.mean(want)), abs=1e-9)
    assert fitted > plain + 15, (fitted, plain)


def test_variants_are_paired_with_the_default_seed_by_seed():
    """paired_summary: each variant's PSNR minus the default's, seed by seed, over the seeds
    both reached; stopped runs and other trainers (gsplat) left out. Oracle: the differences
    written out here."""
    import io
    real = _real()
    seeds = [0, 1, 2, 3, 4]
    base = {s: float(rng.uniform(20, 30)) for s in seeds}
    shift = {s: float(rng.normal(0.1, 0.3)) for s in seeds}

    def row(trainer, seed, psnr, stopped=False, target=30000):
        return dict(scene="beer", trainer=trainer, steps=target, target=target, stopped=stopped, psnr=psnr,
                    seconds=1.0, seed=seed)
    rows = [row("splat", s, base[s]) for s in seeds]
    rows += [row("splat:w", s, base[s] + shift[s], stopped=(s == 4)) for s in seeds]   # seed 4 stopped
    rows += [row("gsplat", s, base[s] - 1.0) for s in seeds]
    rows += [row("splat:w", 9, 25.0)]   # a seed the default did not train
    (g,) = real.paired_summary(rows)
    d = np.array([(base[s] + shift[s]) - base[s] for s in seeds[:4]])   # the floats the bench subtracts
    assert (g["trainer"], g["base"], g["target"], g["seeds"]) == ("splat:w", "splat", 30000, [0, 1, 2, 3])
    np.testing.assert_allclose(g["diffs"], d, rtol=0, atol=1e-12)
    assert abs(g["mean"] - d.mean()) < 1e-12 and abs(g["std"] - d.std(ddof=1)) < 1e-12
    assert abs(g["stderr"] - d.std(ddof=1) / 2.0) < 1e-12
    assert (g["worst"], g["best"]) == (d.min(), d.max())
    buf = io.StringIO()
    real.print_paired([g], buf)
    text = buf.getvalue()
    assert "paired against splat" in text and f"s3 {d[3]:+.2f}" in text and f"{d.mean():+.2f}" in text, text
