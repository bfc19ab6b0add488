"""Distorted cameras: every COLMAP lens model is undistorted to a cropped pinhole
camera at load. Checked against an independent numpy implementation of the
models (tests/_captures.py): a known pattern is rendered through the distorted
camera, loaded, and compared with the pinhole render of the same pattern for
the camera the loader returns; no pixel may come from outside the source."""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import splat  # noqa: E402,F401
import _captures as cap  # noqa: E402

from splat.data import DatasetError, load_dataset  # noqa: E402
from splat.data.lens import Lens, plan_undistortion  # noqa: E402

rng = np.random.default_rng()
W, H = 120, 90


def _params(model):
    f = rng.uniform(95, 105)
    cx, cy = W / 2 + rng.uniform(-3, 3), H / 2 + rng.uniform(-3, 3)
    fy = f * rng.uniform(0.97, 1.03)
    if model == "SIMPLE_RADIAL":
        return [f, cx, cy, rng.uniform(0.12, 0.2)]                       # pincushion
    if model == "RADIAL":
        return [f, cx, cy, rng.uniform(-0.2, -0.12), rng.uniform(0.0, 0.05)]   # barrel
    if model == "OPENCV":
        return [f, fy, cx, cy, rng.uniform(0.08, 0.15), rng.uniform(-0.05, 0.0),
                rng.uniform(-0.006, 0.006), rng.uniform(-0.006, 0.006)]
    if model == "FULL_OPENCV":
        return [f, fy, cx, cy, rng.uniform(0.05, 0.12), rng.uniform(-0.03, 0.03),
                rng.uniform(-0.005, 0.005), rng.uniform(-0.005, 0.005), rng.uniform(-0.01, 0.01),
                rng.uniform(-0.1, 0.1), rng.uniform(-0.02, 0.02), rng.uniform(-0.005, 0.005)]
    if model == "OPENCV_FISHEYE":
        return [f * 0.8, fy * 0.8, cx, cy, rng.uniform(-0.05, 0.05), rng.uniform(-0.01, 0.01),
                rng.uniform(-0.002, 0.002), 0.0]
    raise AssertionError(model)


def _capture(root, model, params, w=W, h=H, n=2, rgba=False, beyond_90=False, freq=1.0):
    phase = rng.uniform(0, 2 * np.pi, 3)
    img, ok = cap.distorted_render(model, params, w, h, phase, freq)
    if beyond_90:   # a fisheye's rays past 90 degrees have no pinhole image: painted black
        assert 0.05 < (~ok).mean() < 0.6
    else:
        assert ok.all(), "the test's own inversion must cover the whole source"
    images = []
    for k in range(n):
        name = f"frame_{k:03d}.png"
        px = img
        if rgba:
            px = np.concatenate([img, np.ones((h, w, 1))], axis=2)
        cap.save_image(root / "images" / name, px)
        images.append((name, 1, cap.random_w2c(rng)))
    cap.write_colmap_text(root, {1: (model, w, h, params)}, images, rng.normal(size=(200, 3)))
    return phase


def _check_pattern(ds, phase, mean_tol=2.0, freq=1.0):
    errs = []
    for cam, img in zip(ds.cameras, ds.images):
        ref = cap.pinhole_render(cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height, phase, freq)
        got = img.astype(np.float64) / 255.0
        errs.append(np.abs(got - ref))
        # the same comparison with the principal point one pixel off must be clearly worse:
        # the check sees a wrong camera
        off = cap.pinhole_render(cam.fx, cam.fy, cam.cx + 1.0, cam.cy, cam.width, cam.height, phase, freq)
        assert np.abs(got - off).mean() > 2.0 * np.abs(got - ref).mean()
    err = np.concatenate([e.ravel() for e in errs])
    assert err.mean() < mean_tol / 255, err.mean() * 255
    assert err.max() < 10.0 / 255, err.max() * 255


def _crop_is_maximal(model, params, cam, src_w, src_h):
    """Each side of the crop that is not at the canvas border cannot grow by a
    pixel without taking a sample from outside the source (the test's model)."""
    fx, fy, cx, cy, c = cap.split_params(model, params)

    def valid(u, v):
        x, y = (u + 0.5 - cam.cx) / cam.fx, (v + 0.5 - cam.cy) / cam.fy
        xd, yd = cap.ref_distort(model, c, x, y)
        sx, sy = fx * xd + cx - 0.5, fy * yd + cy - 0.5
        return (sx >= 0) & (sx <= src_w - 1) & (sy >= 0) & (sy <= src_h - 1)

    us, vs = np.arange(cam.width), np.arange(cam.height)
    assert valid(*np.meshgrid(us, vs)).all()
    blocked = 0
    for u, v in ((np.full(cam.height, -1), vs), (np.full(cam.height, cam.width), vs),
                 (us, np.full(cam.width, -1)), (us, np.full(cam.width, cam.height))):
        blocked += int(not valid(u, v).all())
    return blocked


@pytest.mark.parametrize("model", ["SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE"])
def test_undistorted_capture_matches_pinhole_render(tmp_path, model):
    params = _params(model)
    phase = _capture(tmp_path, model, params, rgba=True)
    ds = load_dataset(tmp_path, "all", keep_alpha=True)
    _check_pattern(ds, phase)
    for cam, a in zip(ds.cameras, ds.alphas):
        # fill: every pixel of the result comes from inside the source (alpha 1 everywhere)
        assert (a == 255).all()
        assert cam.fx == pytest.approx(params[0], rel=1e-9)     # the focal length is kept
    if model == "SIMPLE_RADIAL" or model == "OPENCV":
        # pincushion: the corners of the frame are outside the source, the crop is smaller
        cam = ds.cameras[0]
        assert cam.width < W or cam.height < H
        assert cam.width * cam.height > 0.5 * W * H
    if model != "OPENCV_FISHEYE":
        assert ds.cameras[0].width <= W and ds.cameras[0].height <= H
        # every side either touches the frame or is blocked by fill
        cam = ds.cameras[0]
        blocked = _crop_is_maximal(model, params, cam, W, H)
        fx, fy, cx, cy, _ = cap.split_params(model, params)
        l, t = round(cx - cam.cx), round(cy - cam.cy)
        at_border = int(l == 0) + int(t == 0) + int(l + cam.width == W) + int(t + cam.height == H)
        assert blocked + at_border >= 4


def test_fill_never_survives_with_masks_and_background(tmp_path):
    """A pincushion capture on a bright background with a mask folder of white
    masks: no background colour leaks in and every mask pixel still counts."""
    model, params = "SIMPLE_RADIAL", [60.0, W / 2, H / 2, 0.35]
    _capture(tmp_path, model, params)
    for name in ("frame_000", "frame_001"):
        cap.save_image(tmp_path / "masks" / f"{name}.png", np.full((H, W), 255, np.uint8))
    ds = load_dataset(tmp_path, "all", background=(1.0, 0.0, 1.0))
    assert ds.masks is None
    for img in ds.images:
        magenta = (img[..., 0] > 240) & (img[..., 1] < 15) & (img[..., 2] > 240)
        assert not magenta.any()
    assert ds.cameras[0].width < W


def test_wide_fisheye_keeps_a_wide_centred_view(tmp_path):
    """A fisheye that sees well over 180 degrees across: the pinhole result is
    centred on the principal point, covers 2 x 60 degrees on the wide axis
    (as far as a pinhole image sensibly goes), and matches the pattern."""
    w, h = 160, 120
    f = 40.0     # the source's half-width is 80 px = 2 rad from the axis
    params = [f, f, w / 2, h / 2, 0.01, -0.002, 0.0, 0.0]
    # the pinhole image magnifies the periphery up to 7x: a pattern of lower frequency
    # keeps bilinear sampling of the compressed source exact enough there
    phase = _capture(tmp_path, "OPENCV_FISHEYE", params, w=w, h=h, beyond_90=True, freq=0.35)
    ds = load_dataset(tmp_path, "all")
    _check_pattern(ds, phase, freq=0.35)
    cam = ds.cameras[0]
    assert cam.fx == pytest.approx(f)
    assert not (ds.images[0] == 0).all(axis=2).any()     # nothing from past 90 degrees
    assert abs(cam.cx - cam.width / 2) <= 0.5 and abs(cam.cy - cam.height / 2) <= 0.5
    hfov = 2 * math.degrees(math.atan(cam.width / 2 / cam.fx))
    vfov = 2 * math.degrees(math.atan(cam.height / 2 / cam.fy))
    assert 118 <= hfov <= 122, hfov
    assert vfov >= 100, vfov


def test_zero_coefficients_are_the_source_itself(tmp_path):
    params = [80.0, 82.0, W / 2 + 0.3, H / 2 - 0.7, 0.0, 0.0, 0.0, 0.0]
    _capture(tmp_path, "OPENCV", params)
    ds = load_dataset(tmp_path, "all")
    src = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(tmp_path / "images" / ds.names[0]))
    np.testing.assert_array_equal(ds.images[0], src)
    assert (ds.cameras[0].cx, ds.cameras[0].width) == (params[2], W)


def test_downscale_undistorts_at_the_smaller_size(tmp_path):
    params = _params("OPENCV")
    phase = _capture(tmp_path, "OPENCV", params)
    ds = load_dataset(tmp_path, "all", downscale=2)
    cam = ds.cameras[0]
    assert cam.fx == pytest.approx(params[0] / 2)
    assert cam.width <= W // 2 and cam.height <= H // 2
    # box-averaged pattern: looser, the pattern is averaged over 2x2 source pixels
    ref = cap.pinhole_render(cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height, phase)
    assert np.abs(ds.images[0] / 255.0 - ref).mean() < 6.0 / 255


def test_strong_barrel_fold_is_not_sampled():
    """RADIAL with k1 so negative that r (1 + k1 r^2) turns back inside the
    frame: past the fold the model maps far rays back into the picture, and
    those pixels must not be used."""
    lens = Lens.from_colmap("RADIAL", 200, 150, [100.0, 100.0, 75.0, -0.6, 0.0])
    plan = plan_undistortion(lens)
    fx, fy, cx, cy = plan.intrinsics
    r_fold = math.sqrt(1 / (3 * 0.6))
    corners = [((u + 0.5 - cx) / fx, (v + 0.5 - cy) / fy) for u in (0, plan.width - 1) for v in (0, plan.height - 1)]
    assert max(math.hypot(x, y) for x, y in corners) <= r_fold + 1e-9


def test_unsupported_and_degenerate_lenses(tmp_path):
    with pytest.raises(ValueError, match="FOV"):
        Lens.from_colmap("FOV", 10, 10, [1, 1, 5, 5, 0.1])
    with pytest.raises(ValueError, match="OPENCV takes 8"):
        Lens.from_colmap("OPENCV", 10, 10, [1, 1, 5, 5])
    with pytest.raises(ValueError, match="focal"):
        Lens("PINHOLE", 10, 10, -1.0, 1.0, 5.0, 5.0)
    # a principal point far outside the image leaves nothing to crop around
    _capture(tmp_path, "SIMPLE_RADIAL", [100.0, W / 2, H / 2, 0.1])
    cap.write_colmap_text(tmp_path, {1: ("SIMPLE_RADIAL", W, H, [100.0, 5 * W, H / 2, 0.1])},
                          [("frame_000.png", 1, cap.random_w2c(rng))])
    with pytest.raises(DatasetError, match="no valid undistorted region"):
        load_dataset(tmp_path, "all")
