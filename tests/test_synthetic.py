"""The procedural scene behind `splat train` without a config."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402,F401

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat.data import load_dataset  # noqa: E402
    from splat.data import synthetic  # noqa: E402

W, H = 40, 24  # small and not square


@pytest.fixture(scope="module")
def scene():
    return synthetic.make_scene(n_gaussians=150, n_views=6, width=W, height=H, seed=7, n_test_views=3)


def test_shapes_and_fields(scene):
    train, test = scene
    assert np.shape(train.images) == (6, H, W, 3) and train.images[0].dtype == np.uint8
    assert np.shape(test.images) == (3, H, W, 3)
    assert (train.width, train.height) == (W, H)
    assert len(train.names) == 6 and len(set(train.names)) == 6
    assert len(set(train.names) | set(test.names)) == 9
    assert train.format == test.format == "synthetic"
    assert (train.split, test.split) == ("train", "test")
    assert train.background == (1.0, 1.0, 1.0)
    # COLMAP-like point cloud on the train split: float32 points near the scene, colours in [0, 1]
    assert train.points.dtype == np.float32 and train.points.ndim == 2 and train.points.shape[1] == 3
    assert 8 <= len(train.points) <= 150
    assert train.point_colors.shape == train.points.shape
    assert np.all((train.point_colors >= 0) & (train.point_colors <= 1))
    assert np.all(np.abs(train.points) < 2.0)
    assert train.scene_extent > 0


def test_cameras_look_at_the_origin(scene):
    for ds in scene:
        for cam in ds.cameras:
            assert np.isclose(np.linalg.norm(cam.center), synthetic.CAMERA_DISTANCE, rtol=1e-5)
            w2c = cam.world_to_camera.astype(np.float64)
            t = w2c[:3, 3]                      # the origin in camera space
            assert t[2] > 0                      # in front of the camera (OpenCV: +z forward)
            u = cam.fx * t[0] / t[2] + cam.cx
            v = cam.fy * t[1] / t[2] + cam.cy
            assert abs(u - W / 2) < 0.1 * W and abs(v - H / 2) < 0.1 * H
            assert np.allclose(w2c[:3, :3] @ w2c[:3, :3].T, np.eye(3), atol=1e-5)


def test_images_show_the_scene(scene):
    for ds in scene:
        for img in ds.images:
            assert img.std() > 10                                    # not constant
            white = np.all(img == 255, axis=-1).mean()
            assert 0.05 < white < 0.95                               # background and objects both visible
            assert len(np.unique(img.reshape(-1, 3), axis=0)) > 20   # many colours


def test_deterministic_by_seed(scene):
    again = synthetic.make_scene(n_gaussians=150, n_views=6, width=W, height=H, seed=7, n_test_views=3)
    for a, b in zip(scene, again):
        assert np.array_equal(a.images, b.images)
        assert all(np.array_equal(c.world_to_camera, d.world_to_camera) for c, d in zip(a.cameras, b.cameras))
    assert np.array_equal(scene[0].points, again[0].points)
    other = synthetic.make_scene(n_gaussians=150, n_views=6, width=W, height=H, seed=8, n_test_views=3)
    assert not np.array_equal(scene[0].images, other[0].images)
    assert not np.array_equal(scene[0].points, other[0].points)
    # seed None is the built-in scene (seed 0)
    g0, gn = synthetic.ground_truth(100, seed=0), synthetic.ground_truth(100)
    assert np.array_equal(g0.means, gn.means) and np.array_equal(g0.sh, gn.sh)


def test_ground_truth():
    g = synthetic.ground_truth(300, seed=1)
    assert 200 <= len(g) <= 400
    assert g.sh.shape[1:] == (4, 3)
    assert np.allclose(np.linalg.norm(g.quats, axis=1), 1.0, atol=1e-5)
    scales = np.exp(g.log_scales)
    assert np.all(scales.max(axis=1) / scales.min(axis=1) >= 1.5)  # anisotropic (flat or elongated)
    assert np.all(np.abs(g.means) < 1.5)


def test_background_and_point_count():
    train, test = synthetic.make_scene(n_gaussians=60, n_views=2, width=16, height=16, seed=3,
                                       background=(0.0, 0.0, 0.0), n_test_views=1, n_points=30)
    assert len(train.points) == 30
    assert train.background == test.background == (0.0, 0.0, 0.0)
    corner = np.stack(train.images)[:, 0, 0]
    assert np.all(corner < 40)


@pytest.mark.parametrize("kwargs", [dict(n_views=0), dict(width=0), dict(height=-1), dict(n_test_views=0),
                                    dict(n_gaussians=5), dict(background=(2.0, 0.0, 0.0)),
                                    dict(width=2.5)])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        synthetic.make_scene(**kwargs)


@pytest.mark.parametrize("steps", [1, 10, 50, 2000, 30000])
def test_default_train_config_is_valid(steps):
    cfg = synthetic.default_train_config(steps)
    assert cfg.errors() == []
    assert cfg.steps == steps
    assert cfg.densify_from <= cfg.densify_until <= steps or steps < 5
    assert cfg.opacity_reset_every >= 1 and cfg.sh_degree_interval >= 1


def test_write_blender_round_trip(tmp_path, scene):
    train, test = scene
    root = synthetic.write_blender(tmp_path / "scene", {"train": train, "test": test})
    for split, ds in (("train", train), ("test", test)):
        loaded = load_dataset(root, split)
        assert loaded.format == "blender"
        assert np.array_equal(loaded.images, ds.images)
        for a, b in zip(loaded.cameras, ds.cameras):
            assert np.allclose(a.world_to_camera, b.world_to_camera, atol=1e-5)
            assert np.allclose([a.fx, a.fy, a.cx, a.cy], [b.fx, b.fy, b.cx, b.cy], rtol=1e-5)
