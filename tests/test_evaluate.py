"""Image metrics (PSNR, SSIM) and `splat.evaluate` on a tiny synthetic scene."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _scenes import make_rng  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

skimage_metrics = pytest.importorskip("skimage.metrics")


def smooth_noise(rng, h, w, scale):
    """Smooth random structure: bilinear upsampling of a coarse random grid."""
    gh, gw = max(2, h // scale), max(2, w // scale)
    grid = rng.uniform(0.0, 1.0, size=(gh, gw, 3))
    ys = np.linspace(0, gh - 1, h)
    xs = np.linspace(0, gw - 1, w)
    y0 = np.floor(ys).astype(int).clip(0, gh - 2)
    x0 = np.floor(xs).astype(int).clip(0, gw - 2)
    fy = (ys - y0)[:, None, None]
    fx = (xs - x0)[None, :, None]
    g00 = grid[y0][:, x0]
    g01 = grid[y0][:, x0 + 1]
    g10 = grid[y0 + 1][:, x0]
    g11 = grid[y0 + 1][:, x0 + 1]
    return (1 - fy) * ((1 - fx) * g00 + fx * g01) + fy * ((1 - fx) * g10 + fx * g11)


def image_pair(rng, h, w):
    """A target with structure and noise, and a degraded copy of it (both in [0, 1])."""
    base = 0.7 * smooth_noise(rng, h, w, int(rng.integers(3, 9))) + 0.3 * rng.uniform(size=(h, w, 3))
    other = base + rng.normal(scale=rng.uniform(0.02, 0.2), size=base.shape) \
        + 0.2 * (smooth_noise(rng, h, w, 5) - 0.5)
    return np.clip(other, 0, 1).astype(np.float32), np.clip(base, 0, 1).astype(np.float32)


def skimage_ssim(a, b):
    return skimage_metrics.structural_similarity(
        a.astype(np.float64), b.astype(np.float64), gaussian_weights=True, sigma=1.5,
        use_sample_covariance=False, data_range=1.0, channel_axis=-1)


@pytest.mark.parametrize("h,w", [(11, 11), (16, 16), (37, 23), (23, 64), (48, 40)])
def test_ssim_matches_scikit_image(h, w):
    rng, seed = make_rng()
    for _ in range(3):
        a, b = image_pair(rng, h, w)
        want = skimage_ssim(a, b)
        got = splat.ssim(a, b)
        assert abs(got - want) < 1e-5, f"seed {seed}: {got} vs {want} at {h}x{w}"
    a, _ = image_pair(rng, h, w)
    assert abs(splat.ssim(a, a) - 1.0) < 1e-6


def test_ssim_clips_the_render():
    rng, seed = make_rng()
    a, b = image_pair(rng, 20, 30)
    wild = a.copy()
    wild[::3] = wild[::3] * 3.0 - 1.0                      # out of [0, 1]
    assert abs(splat.ssim(wild, b) - skimage_ssim(np.clip(wild, 0, 1), b)) < 1e-5, f"seed {seed}"


def test_psnr_formula():
    rng, seed = make_rng()
    for h, w in [(8, 8), (13, 29)]:
        a, b = image_pair(rng, h, w)
        a = a * 1.4 - 0.2                                  # the render is clipped, the target is not
        mse = np.mean((np.clip(a.astype(np.float64), 0, 1) - b.astype(np.float64)) ** 2)
        assert abs(splat.psnr(a, b) - 10.0 * np.log10(1.0 / mse)) < 1e-9, f"seed {seed}"
    b = rng.uniform(size=(5, 6, 3))
    assert splat.psnr(b, b) == float("inf")
    assert abs(splat.psnr(np.zeros((4, 4, 3)), np.full((4, 4, 3), 0.1)) - 20.0) < 1e-9


# --------------------------------------------------------------------------- evaluate


@pytest.fixture(scope="module")
def tiny():
    from splat.data import synthetic
    train, test = synthetic.make_scene(n_gaussians=120, n_views=6, width=32, height=24, seed=11, n_test_views=3)
    # no densification (and so no opacity reset): the PSNR only goes up
    cfg = splat.TrainConfig(steps=40, sh_degree=1, densify_from=10_000, densify_until=10_000)
    trainer = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
    return trainer, test


def check_consistent(trainer, test):
    renders = {}
    ev = splat.evaluate(trainer, test, renders=renders)
    assert len(ev.per_view) == len(test) and set(renders) == set(test.names)
    for v, cam, img, name in zip(ev.per_view, test.cameras, test.images, test.names):
        assert v["name"] == name
        render = trainer.render(cam, background=test.background)
        assert np.array_equal(render, renders[name])
        target = img.astype(np.float32) / 255.0
        assert v["psnr"] == pytest.approx(splat.psnr(render, target), abs=1e-9)
        assert v["ssim"] == pytest.approx(splat.ssim(render, target), abs=1e-9)
        assert v["ssim"] == pytest.approx(skimage_ssim(np.clip(render, 0, 1), target), abs=1e-5)
    assert ev.psnr == pytest.approx(np.mean([v["psnr"] for v in ev.per_view]), abs=1e-9)
    assert ev.ssim == pytest.approx(np.mean([v["ssim"] for v in ev.per_view]), abs=1e-9)
    d = ev.to_dict()
    assert d["psnr"] == ev.psnr and d["per_view"] == ev.per_view
    return ev


def check_supersample(trainer, test, k=2):
    renders = {}
    ev = splat.evaluate(trainer, test, supersample=k, renders=renders)
    for v, cam, img, name in zip(ev.per_view, test.cameras, test.images, test.names):
        big = trainer.render(cam.scaled(k), background=test.background).astype(np.float64)
        assert big.shape == (test.height * k, test.width * k, 3)
        small = big.reshape(test.height, k, test.width, k, 3).mean(axis=(1, 3))
        assert np.allclose(renders[name], small, atol=1e-6)
        target = img.astype(np.float32) / 255.0
        assert v["psnr"] == pytest.approx(splat.psnr(small, target), abs=1e-4)
    return ev


def test_evaluate_untrained_and_trained(tiny):
    trainer, test = tiny
    assert trainer.step_count == 0
    before = check_consistent(trainer, test)
    check_supersample(trainer, test)
    trainer.run(40, progress=False)
    after = check_consistent(trainer, test)
    check_supersample(trainer, test)
    assert after.psnr > before.psnr


def test_evaluate_bad_supersample(tiny):
    trainer, test = tiny
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match=r"\] supersample:"):
            splat.evaluate(trainer, test, supersample=bad)
    for bad in (True, "2"):  # not numbers
        with pytest.raises(TypeError, match=r"\] supersample:"):
            splat.evaluate(trainer, test, supersample=bad)


def test_evaluate_reports_progress_after_every_view(tiny):
    """progress(done, total) follows each view, a view masked entirely (skipped) too,
    and the results are those without it."""
    from splat.data.dataset import Dataset
    trainer, test = tiny
    masks = [None] * len(test)
    masks[1] = np.zeros((test.cameras[1].height, test.cameras[1].width), bool)   # nothing of it counts
    masked = Dataset(cameras=test.cameras, images=test.images, names=test.names, masks=masks,
                     background=test.background, scene_extent=test.scene_extent)
    calls = []
    ev = splat.evaluate(trainer, masked, masked=True, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(k, len(test)) for k in range(1, len(test) + 1)]
    assert [v["name"] for v in ev.per_view] == [n for i, n in enumerate(test.names) if i != 1]
    assert ev.psnr == splat.evaluate(trainer, masked, masked=True).psnr


def test_fitted_exposure_scores_right_halves_fitted_on_the_left(tiny):
    """Test images that are the renders under a random colour correction per view:
    fitted on each left half, the right half matches to the 8-bit rounding. The
    oracle: the normal equations solved by numpy on the left half, and the right
    half's PSNR by hand."""
    from splat.data.dataset import Dataset
    trainer, test = tiny
    rng, seed = make_rng()
    images = []
    for cam in test.cameras:
        render = trainer.render(cam, background=test.background).astype(np.float64)
        a, b = np.eye(3) + rng.normal(0, 0.08, (3, 3)), rng.normal(0, 0.05, 3)
        images.append(np.rint(np.clip(render @ a.T + b, 0, 1) * 255).astype(np.uint8))
    shifted = Dataset(cameras=test.cameras, images=images, names=test.names, masks=[None] * len(test),
                      background=test.background, scene_extent=test.scene_extent)
    plain = splat.evaluate(trainer, shifted)
    renders = {}
    ev = splat.evaluate(trainer, shifted, fit_exposure=True, renders=renders)
    assert ev.fit_exposure and ev.to_dict()["fit_exposure"] is True and "fit_exposure" not in plain.to_dict()
    for v, cam, img in zip(ev.per_view, test.cameras, images):
        render = trainer.render(cam, background=test.background).astype(np.float64)
        target = img.astype(np.float64) / 255.0
        half = cam.width // 2
        x = np.concatenate([render[:, :half].reshape(-1, 3), np.ones((cam.height * half, 1))], axis=1)
        sol = np.linalg.solve(x.T @ x, x.T @ target[:, :half].reshape(-1, 3))   # [4, 3]
        np.testing.assert_allclose(np.asarray(v["exposure"]), sol.T, atol=1e-4, err_msg=str(seed))
        corrected = np.clip(render @ sol[:3] + sol[3], 0, 1)
        np.testing.assert_allclose(renders[v["name"]], corrected, atol=1e-4)
        mse = np.mean((corrected[:, half:] - target[:, half:]) ** 2)
        assert v["psnr"] == pytest.approx(-10 * np.log10(mse), abs=1e-3), seed
    assert ev.psnr > plain.psnr + 5, (ev.psnr, plain.psnr, seed)


def test_fit_exposure_recovers_a_correction_and_needs_pixels():
    rng, seed = make_rng()
    render = rng.uniform(0.1, 0.9, (20, 30, 3))
    e = np.concatenate([np.eye(3) + rng.normal(0, 0.1, (3, 3)), rng.normal(0, 0.05, (3, 1))], axis=1)
    target = render @ e[:, :3].T + e[:, 3]
    np.testing.assert_allclose(splat.metrics.fit_exposure(render, target), e, atol=1e-5, err_msg=str(seed))
    few = np.zeros((20, 30), bool)
    few[0, :3] = True
    with pytest.raises(ValueError, match=r"fit_exposure: 3 pixels"):
        splat.metrics.fit_exposure(render, target, few)
