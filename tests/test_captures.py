"""Captures as people shoot them: mixed portrait / landscape COLMAP models,
masks (a masks/ folder, RGBA alpha), nerfstudio transforms.json, the capture
defaults (black background, initial points)."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import splat  # noqa: E402,F401
import _captures as cap  # noqa: E402

from splat.data import DatasetError, detect_format, load_dataset  # noqa: E402
from splat.data.points import MIN_SFM_POINTS, capture_points, view_volume_points  # noqa: E402

rng = np.random.default_rng()


def _colmap_mixed(root, n=6, distorted=False):
    """Landscape 40x30 and portrait 30x40 cameras alternating; returns {name: (w2c, image)}."""
    land = ("SIMPLE_RADIAL", 40, 30, [35.0, 20.0, 15.0, 0.08]) if distorted else \
        ("PINHOLE", 40, 30, [35.0, 36.0, 20.3, 14.8])
    port = ("PINHOLE", 30, 40, [36.0, 35.0, 15.2, 19.9])
    cams = {1: land, 2: port}
    images, truth = [], {}
    for k in range(n):
        cid = 1 + k % 2
        w, h = cams[cid][1], cams[cid][2]
        name = f"img_{k:02d}.jpg" if k % 3 == 0 else f"img_{k:02d}.png"
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if name.endswith(".jpg"):
            Image.fromarray(img).save(root / "images" / name if (root / "images").is_dir() else
                                      _mk(root / "images") / name, quality=100)
            img = np.asarray(Image.open(root / "images" / name))
        else:
            cap.save_image(root / "images" / name, img)
        w2c = cap.random_w2c(rng)
        images.append((name, cid, w2c))
        truth[name] = (w2c, img)
    cap.write_colmap_text(root, cams, images, rng.normal(size=(300, 3)))
    return truth


def _mk(p):
    p.mkdir(parents=True, exist_ok=True)
    return p


def test_mixed_portrait_and_landscape(tmp_path):
    truth = _colmap_mixed(tmp_path)
    ds = load_dataset(tmp_path, "all")
    assert not ds.uniform_size
    for cam, img, name in zip(ds.cameras, ds.images, ds.names):
        w2c, ref = truth[name]
        assert img.shape == ref.shape and (cam.width, cam.height) == (ref.shape[1], ref.shape[0])
        np.testing.assert_array_equal(img, ref)
        np.testing.assert_allclose(cam.world_to_camera, w2c, atol=1e-5)
    sizes = {(c.width, c.height) for c in ds.cameras}
    assert sizes == {(40, 30), (30, 40)}
    # the split is every 8th by name; downscale halves each image on its own
    half = load_dataset(tmp_path, "all", downscale=2)
    assert {(c.width, c.height) for c in half.cameras} == {(20, 15), (15, 20)}
    with pytest.raises(ValueError, match="different sizes"):
        ds.width


def test_mixed_sizes_with_distortion_crop_each_camera(tmp_path):
    _colmap_mixed(tmp_path, distorted=True)
    ds = load_dataset(tmp_path, "all")
    land = [c for c in ds.cameras if c.width > c.height]
    port = [c for c in ds.cameras if c.width < c.height]
    assert land and port
    assert all((c.width, c.height) == (land[0].width, land[0].height) for c in land)
    assert land[0].width < 40      # pincushion: cropped


def _masked_colmap(root, ext_rule, downscale_dir=False):
    truth = _colmap_mixed(root, n=4)
    masks = {}
    for name, (_, img) in truth.items():
        h, w = img.shape[:2]
        m = np.full((h, w), 255, np.uint8)
        y0, x0 = rng.integers(0, h - 8), rng.integers(0, w - 8)
        m[y0:y0 + 6, x0:x0 + 7] = 0
        m[rng.uniform(size=(h, w)) < 0.05] = 0
        fname = name + ".png" if ext_rule == "append" else os.path.splitext(name)[0] + ".png"
        cap.save_image(root / "masks" / fname, m)
        masks[name] = m >= 128
    return truth, masks


@pytest.mark.parametrize("ext_rule", ["append", "replace"])
def test_masks_folder(tmp_path, ext_rule):
    truth, masks = _masked_colmap(tmp_path, ext_rule)
    ds = load_dataset(tmp_path, "all")
    assert ds.masks is not None
    for name, m in zip(ds.names, ds.masks):
        np.testing.assert_array_equal(m, masks[name])
    # downscale 2: a pixel counts only when all four of its source pixels count
    ds2 = load_dataset(tmp_path, "all", downscale=2)
    for name, m in zip(ds2.names, ds2.masks):
        full = masks[name]
        h, w = full.shape[0] // 2, full.shape[1] // 2
        ref = full[: 2 * h, : 2 * w].reshape(h, 2, w, 2).all(axis=(1, 3))
        np.testing.assert_array_equal(m, ref)
    # an image without its mask is an error naming it
    os.remove(next((tmp_path / "masks").iterdir()))
    with pytest.raises(DatasetError, match="no mask for"):
        load_dataset(tmp_path, "all")


def test_masks_through_undistortion(tmp_path):
    """A mask goes through the same resampling as its image: a pixel of the
    undistorted mask counts only if all four bilinear taps counted."""
    model, params = "OPENCV", [38.0, 37.0, 20.4, 15.3, 0.12, -0.02, 0.003, -0.002]
    w, h = 40, 30
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    cap.save_image(tmp_path / "images" / "a.png", img)
    m = np.ones((h, w), bool)
    m[10:16, 12:20] = False
    cap.save_image(tmp_path / "masks" / "a.png", (m * 255).astype(np.uint8))
    cap.write_colmap_text(tmp_path, {1: (model, w, h, params)}, [("a.png", 1, cap.random_w2c(rng))])
    ds = load_dataset(tmp_path, "all")
    cam, got = ds.cameras[0], ds.masks[0]
    fx, fy, cx, cy, c = cap.split_params(model, params)
    u, v = np.meshgrid(np.arange(cam.width) + 0.5, np.arange(cam.height) + 0.5)
    xd, yd = cap.ref_distort(model, c, (u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy)
    sx, sy = fx * xd + cx - 0.5, fy * yd + cy - 0.5
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    ref = m[y0, x0] & m[y0, x1] & m[y1, x0] & m[y1, x1]
    near_edge = (np.abs(sx - np.rint(sx)) < 1e-4) | (np.abs(sy - np.rint(sy)) < 1e-4)   # taps of weight ~0
    assert (~ref).sum() > 20
    np.testing.assert_array_equal(got[~near_edge], ref[~near_edge])


def test_alpha_as_mask_or_composite(tmp_path):
    h, w = 20, 24
    rgba = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    rgba[..., 3] = np.where(rng.uniform(size=(h, w)) < 0.3, 0, 255)
    rgba[0, 0, 3], rgba[0, 1, 3], rgba[0, 2, 3] = 0, 255, 200
    cap.save_image(tmp_path / "images" / "x.png", rgba)
    cap.write_colmap_text(tmp_path, {1: ("PINHOLE", w, h, [20.0, 20.0, 12.0, 10.0])},
                          [("x.png", 1, cap.random_w2c(rng))])
    comp = load_dataset(tmp_path, "all")          # captures: black background
    assert comp.background == (0.0, 0.0, 0.0) and comp.masks is None
    a = rgba[..., 3:].astype(np.float64) / 255
    ref = np.clip(np.rint(rgba[..., :3] * a), 0, 255).astype(np.uint8)
    assert np.abs(comp.images[0].astype(int) - ref).max() <= 1
    masked = load_dataset(tmp_path, "all", alpha="mask")
    np.testing.assert_array_equal(masked.masks[0], rgba[..., 3] >= 128)
    keep = rgba[..., 3] > 0
    np.testing.assert_array_equal(masked.images[0][keep], rgba[..., :3][keep])    # colour kept, not blended
    with pytest.raises(ValueError, match="alpha"):
        load_dataset(tmp_path, "all", alpha="bogus")


# --------------------------------------------------------------------------- nerfstudio


def _nerfstudio(root, n=9, per_frame=False, model="OPENCV", coeffs=None, masks=False, ply=True,
                splits=None):
    """The same capture as a COLMAP text model (root/colmap) and as nerfstudio
    (root/ns); returns (colmap root, nerfstudio root)."""
    col, ns = root / "colmap", root / "ns"
    w, h = 40, 30
    coeffs = coeffs if coeffs is not None else {"k1": 0.05, "k2": -0.01, "p1": 0.002, "p2": -0.001}
    if model == "OPENCV":
        params = [36.0, 35.0, 20.2, 15.1, coeffs.get("k1", 0), coeffs.get("k2", 0), coeffs.get("p1", 0),
                  coeffs.get("p2", 0)]
    else:
        params = [30.0, 30.0, 20.2, 15.1, coeffs.get("k1", 0), coeffs.get("k2", 0), coeffs.get("k3", 0),
                  coeffs.get("k4", 0)]
    intr = {"fl_x": params[0], "fl_y": params[1], "cx": params[2], "cy": params[3], "w": w, "h": h,
            "camera_model": model, **coeffs}
    frames, images = [], []
    for k in range(n):
        name = f"frame_{k:05d}.png"
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        cap.save_image(col / "images" / name, img)
        cap.save_image(ns / "images" / name, img)
        w2c = cap.random_w2c(rng)
        images.append((name, 1, w2c))
        fr = {"file_path": f"images/{name}", "transform_matrix": cap.c2w_opengl(w2c).tolist()}
        if per_frame:
            fr.update(intr)
        if masks:
            m = (rng.uniform(size=(h, w)) > 0.2).astype(np.uint8) * 255
            cap.save_image(col / "masks" / (name + ".png"), m)
            cap.save_image(ns / "masks" / name, m)
            fr["mask_path"] = f"masks/{name}"
        frames.append(fr)
    rng.shuffle(frames)                       # the order of the file is not the order of the split
    pts = rng.normal(size=(200, 3))
    cap.write_colmap_text(col, {1: (model, w, h, params)}, images, pts)
    meta = {} if per_frame else dict(intr)
    meta["frames"] = frames
    meta["applied_transform"] = np.eye(4)[:3].tolist()
    if ply:
        cap.write_ascii_ply(ns / "sparse_pc.ply", pts, np.full((len(pts), 3), [128, 64, 32]))
        meta["ply_file_path"] = "sparse_pc.ply"
    if splits:
        meta.update(splits)
    cap.write_transforms(ns, meta)
    return col, ns


@pytest.mark.parametrize("per_frame", [False, True])
@pytest.mark.parametrize("model", ["OPENCV", "OPENCV_FISHEYE"])
def test_nerfstudio_matches_the_same_colmap_capture(tmp_path, per_frame, model):
    coeffs = None if model == "OPENCV" else {"k1": 0.03, "k2": -0.01, "k3": 0.002, "k4": 0.0}
    col, ns = _nerfstudio(tmp_path, per_frame=per_frame, model=model, coeffs=coeffs, masks=True)
    assert detect_format(ns) == "nerfstudio" and detect_format(col) == "colmap"
    for split in ("train", "test", "all"):
        a, b = load_dataset(col, split), load_dataset(ns, split)
        assert a.names == [n.removeprefix("images/") for n in b.names]
        for ca, cb, ia, ib, ma, mb in zip(a.cameras, b.cameras, a.images, b.images, a.masks, b.masks):
            np.testing.assert_allclose(cb.world_to_camera, ca.world_to_camera, atol=1e-5)
            assert (cb.fx, cb.fy, cb.cx, cb.cy, cb.width, cb.height) == pytest.approx(
                (ca.fx, ca.fy, ca.cx, ca.cy, ca.width, ca.height))
            np.testing.assert_array_equal(ib, ia)
            np.testing.assert_array_equal(mb, ma)
        np.testing.assert_allclose(b.points, a.points, atol=1e-6)
        np.testing.assert_allclose(b.point_colors, a.point_colors, atol=1e-6)
        assert b.background == (0.0, 0.0, 0.0)
    assert len(load_dataset(ns, "test")) == 2       # 9 frames, every 8th by name


def test_nerfstudio_split_lists_and_errors(tmp_path):
    splits = {"train_filenames": [f"images/frame_{k:05d}.png" for k in (0, 1, 2, 3, 5)],
              "val_filenames": ["images/frame_00004.png"],
              "test_filenames": ["images/frame_00006.png", "images/frame_00007.png"]}
    _, ns = _nerfstudio(tmp_path, splits=splits, ply=False)
    assert load_dataset(ns, "train").names == splits["train_filenames"]
    assert load_dataset(ns, "val").names == splits["val_filenames"]
    assert load_dataset(ns, "test").names == splits["test_filenames"]
    tf = ns / "transforms.json"
    meta = json.loads(tf.read_text())
    good = json.dumps(meta)
    meta["test_filenames"] = ["images/nope.png"]
    tf.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="nope.png"):
        load_dataset(ns, "test")
    for key, value, match in [("camera_model", "EQUIRECTANGULAR", "EQUIRECTANGULAR"),
                              ("k4", 0.1, "k4"), ("fl_x", -3, "fl_x")]:
        meta = json.loads(good)
        meta[key] = value
        tf.write_text(json.dumps(meta))
        with pytest.raises(DatasetError, match=match):
            load_dataset(ns, "train")
    meta = json.loads(good)
    meta["camera_model"] = "OPENCV_FISHEYE"
    tf.write_text(json.dumps(meta))         # p1 / p2 on a fisheye
    with pytest.raises(DatasetError, match="p1"):
        load_dataset(ns, "train")
    meta = json.loads(good)
    meta["frames"][0]["mask_path"] = "masks/x.png"
    tf.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="mask_path"):
        load_dataset(ns, "train")


def test_nerfstudio_distortion_is_honoured(tmp_path):
    """k1 changes the images (never ignored) and matches the COLMAP loader's."""
    _, ns0 = _nerfstudio(tmp_path / "a", coeffs={"k1": 0.0})
    col, ns1 = _nerfstudio(tmp_path / "b", coeffs={"k1": 0.2})
    a = load_dataset(ns1, "all")
    b = load_dataset(col, "all")
    np.testing.assert_array_equal(a.images[0], b.images[0])
    assert a.cameras[0].width < 40
    assert load_dataset(ns0, "all").cameras[0].width == 40


def test_blender_transforms_with_distortion_keys(tmp_path):
    """An instant-ngp style transforms_train.json with k1: undistorted like
    the COLMAP camera with the same parameters, not ignored."""
    w, h = 40, 30
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    cap.save_image(tmp_path / "bl" / "train" / "r_0.png", img)
    cap.save_image(tmp_path / "col" / "images" / "r_0.png", img)
    w2c = cap.random_w2c(rng)
    meta = {"fl_x": 33.0, "fl_y": 34.0, "cx": 20.1, "cy": 14.9, "k1": 0.2, "k2": 0.0, "p1": 0.0, "p2": 0.0,
            "frames": [{"file_path": "./train/r_0", "transform_matrix": cap.c2w_opengl(w2c).tolist()}]}
    (tmp_path / "bl" / "transforms_train.json").write_text(json.dumps(meta))
    cap.write_colmap_text(tmp_path / "col", {1: ("OPENCV", w, h, [33.0, 34.0, 20.1, 14.9, 0.2, 0, 0, 0])},
                          [("r_0.png", 1, w2c)])
    a = load_dataset(tmp_path / "bl", background=(0, 0, 0))
    b = load_dataset(tmp_path / "col", "all")
    np.testing.assert_array_equal(a.images[0], b.images[0])
    assert a.cameras[0].width < w
    meta["k4"] = 0.1
    (tmp_path / "bl" / "transforms_train.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="k4"):
        load_dataset(tmp_path / "bl")


# --------------------------------------------------------------------------- initial points


def test_view_volume_points_are_seen_by_the_cameras():
    cams = []
    from splat.camera import Camera
    for _ in range(5):
        cams.append(Camera(cap.random_w2c(rng).astype(np.float32), 30.0, 30.0, 20.0, 15.0, 40, 30))
    pts = view_volume_points(cams, 2000, extent=3.0, seed=int(rng.integers(1 << 30)))
    seen = np.zeros(len(pts), bool)
    for c in cams:
        w2c = np.asarray(c.world_to_camera, np.float64)
        p = pts @ w2c[:3, :3].T + w2c[:3, 3]
        z = p[:, 2]
        u, v = c.fx * p[:, 0] / z + c.cx, c.fy * p[:, 1] / z + c.cy
        seen |= (z > 0.05 * 3.0 - 1e-4) & (z < 1.5 * 3.0 + 1e-4) & (u >= -1e-3) & (u <= 40 + 1e-3) & \
            (v >= -1e-3) & (v <= 30 + 1e-3)
    assert seen.all()


def test_tiny_sfm_cloud_falls_back_with_a_warning(tmp_path):
    _colmap_mixed(tmp_path)
    cap.write_colmap_text(tmp_path, {2: ("PINHOLE", 30, 40, [36.0, 35.0, 15.2, 19.9])},
                          [(f"img_{k:02d}.png", 2, cap.random_w2c(rng)) for k in (1, 5)],
                          rng.normal(size=(7, 3)))
    ds = load_dataset(tmp_path, "all")
    pts, cols, note = capture_points(ds, 500)
    assert note and "only 7 SfM points" in note
    assert len(pts) == 507 and cols.shape == (507, 3)
    np.testing.assert_array_equal(pts[:7], ds.points)
    full = ds.subset(slice(None))
    full.points = rng.normal(size=(MIN_SFM_POINTS, 3)).astype(np.float32)
    full.point_colors = np.full_like(full.points, 0.3)
    p2, _, note2 = capture_points(full, 500)
    assert note2 is None and p2 is full.points


def test_trainer_warns_and_starts_in_the_view_volume(tmp_path):
    from _pkg import NATIVE
    if not NATIVE:
        pytest.skip("needs the native module splat._core")
    truth = _colmap_mixed(tmp_path)
    names = sorted(truth)
    cams = {1: ("PINHOLE", 40, 30, [35.0, 36.0, 20.3, 14.8]), 2: ("PINHOLE", 30, 40, [36.0, 35.0, 15.2, 19.9])}
    cap.write_colmap_text(tmp_path, cams, [(n, 1 + k % 2, truth[n][0]) for k, n in enumerate(names)], None)
    ds = load_dataset(tmp_path, "train")
    assert len(ds.points) == 0
    with pytest.warns(UserWarning, match="no SfM points"):
        tr = splat.Trainer.from_dataset(ds, splat.TrainConfig(init_points=300, steps=5),
                                        splat.BackendConfig(backend="cpu"))
    assert tr.num_gaussians == 300


def test_nerfstudio_downscaled_folder_and_config_check(tmp_path):
    from splat.config import check_config
    _, ns = _nerfstudio(tmp_path, n=3, coeffs={"k1": 0.0}, ply=False)
    small = {}
    for p in sorted((ns / "images").iterdir()):
        img = rng.integers(0, 256, (15, 20, 3), dtype=np.uint8)
        cap.save_image(ns / "images_2" / p.name, img)
        small[f"images/{p.name}"] = img
    ds = load_dataset(ns, "all", downscale=2)
    for cam, img, name in zip(ds.cameras, ds.images, ds.names):
        np.testing.assert_array_equal(img, small[name])        # the copy, not a box average
        assert cam.fx == pytest.approx(36.0 / 2) and (cam.width, cam.height) == (20, 15)
    assert check_config({"data": {"path": str(ns)}}) == []
    errs = check_config({"data": {"path": str(tmp_path), "format": "nerfstudio"}})
    assert errs and "transforms.json" in errs[0]
