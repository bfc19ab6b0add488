"""bench/mixed_orientation.py: a COLMAP capture with every other image turned a
quarter turn, its camera turned with it. The oracle is numpy's rot90: a turned
image is rot90 of the original, and the CPU rasterizer's render of a scene from
a turned camera is rot90 of its render from the original camera."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, SOURCE_ROOT, splat  # noqa: E402
import _captures as cap  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")


def _tool():
    spec = importlib.util.spec_from_file_location("mixed_orientation",
                                                  os.path.join(SOURCE_ROOT, "bench", "mixed_orientation.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _capture(root, rng, cameras):
    """One image per camera, random pixels, random poses; returns the poses."""
    images = []
    for cid, (_, w, h, _) in cameras.items():
        name = f"img_{cid:02d}.png"
        cap.save_image(root / "images" / name, rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        images.append((name, cid, cap.random_w2c(rng)))
    cap.write_colmap_text(root, cameras, images, rng.normal(size=(200, 3)))
    return images


def _gaussians(rng, n=60):
    return splat.Gaussians(rng.normal(0, 0.6, (n, 3)), rng.normal(-2.2, 0.3, (n, 3)), rng.normal(size=(n, 4)),
                           rng.normal(1.0, 1.0, n), rng.normal(0, 0.8, (n, 1, 3)))


def test_turned_views_are_the_same_views(tmp_path):
    rng = np.random.default_rng()
    # Off-centre principal points and fx != fy, so a wrong swap or flip shows.
    cameras = {k + 1: ("PINHOLE", 40, 30, [float(rng.uniform(30, 40)), float(rng.uniform(30, 40)),
                                           float(rng.uniform(15, 25)), float(rng.uniform(11, 19))])
               for k in range(4)}
    cameras[5] = ("SIMPLE_PINHOLE", 36, 28, [33.0, 17.2, 14.9])
    _capture(tmp_path / "src", rng, cameras)
    made = _tool().make(tmp_path / "src", tmp_path / "out")
    assert made == {"images": 5, "turned": 2, "points": 200}

    src = splat.load_dataset(tmp_path / "src", "all")
    out = splat.load_dataset(tmp_path / "out", "all")
    assert [n.split(".")[0] for n in src.names] == [n.split(".")[0] for n in out.names]
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    g = _gaussians(rng)
    turned = 0
    for k, (c0, c1) in enumerate(zip(src.cameras, out.cameras)):
        want_img, want_cam = src.images[k], c0
        render0 = r.forward(g, c0, sh_degree=0).image.copy()
        render1 = r.forward(g, c1, sh_degree=0).image.copy()
        if k % 2 == 1:  # every other image by name, the second first
            turned += 1
            assert (c1.width, c1.height) == (c0.height, c0.width)
            assert np.array_equal(out.images[k], np.rot90(want_img, k=-1))
            # float32 projections of two cameras that differ by an exact quarter turn
            np.testing.assert_allclose(render1, np.rot90(render0, k=-1), rtol=0, atol=2e-5)
            assert np.abs(render0).max() > 0.05  # the scene is in view
        else:
            assert np.array_equal(out.images[k], want_img)
            assert (c1.width, c1.height, c1.fx, c1.fy, c1.cx, c1.cy) == \
                (want_cam.width, want_cam.height, want_cam.fx, want_cam.fy, want_cam.cx, want_cam.cy)
            np.testing.assert_allclose(render1, render0, rtol=0, atol=2e-5)
    assert turned == 2
    # The same points.
    np.testing.assert_allclose(out.points, src.points, rtol=0, atol=1e-6)


def test_radial_lens_turns_with_the_image(tmp_path):
    rng = np.random.default_rng()
    cameras = {1: ("SIMPLE_RADIAL", 40, 30, [36.0, 20.0, 15.0, 0.06]),
               2: ("SIMPLE_RADIAL", 40, 30, [36.0, 20.0, 15.0, 0.06])}
    _capture(tmp_path / "src", rng, cameras)
    _tool().make(tmp_path / "src", tmp_path / "out")
    src = splat.load_dataset(tmp_path / "src", "all")
    out = splat.load_dataset(tmp_path / "out", "all")
    # Undistorted at load: the turned view's undistorted image and camera are the
    # original's turned (resampling at turned positions: rounding moves a value by 1).
    c0, c1 = src.cameras[1], out.cameras[1]
    assert (c1.width, c1.height) == (c0.height, c0.width)
    assert abs(c1.fx - c0.fy) < 1e-4 and abs(c1.fy - c0.fx) < 1e-4
    diff = np.abs(out.images[1].astype(int) - np.rot90(src.images[1], k=-1).astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99, (diff.max(), (diff == 0).mean())


def test_refusals(tmp_path, capsys):
    rng = np.random.default_rng()
    _capture(tmp_path / "src", rng, {1: ("OPENCV", 40, 30, [35.0, 35.0, 20.0, 15.0, 0.01, 0.0, 0.001, 0.0])})
    tool = _tool()
    assert tool.main([str(tmp_path / "src"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "img_01.png" in err and "OPENCV" in err and "Traceback" not in err
    (tmp_path / "exists").mkdir()
    assert tool.main([str(tmp_path / "src"), str(tmp_path / "exists")]) == 2
    assert "exists" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main([str(tmp_path / "src"), str(tmp_path / "o2"), "--every", "0"])
