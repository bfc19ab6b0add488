"""Dataset loading: Blender / NeRF-synthetic and COLMAP folders made on the fly."""
from __future__ import annotations

import json
import os
import struct
import sys

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import splat  # noqa: E402,F401  (makes `splat.*` importable without the native module)

from splat.camera import Camera  # noqa: E402
from splat.data import Dataset, DatasetError, load_dataset, scene_extent, select_frames  # noqa: E402
from splat.data import colmap as colmap_mod  # noqa: E402

rng = np.random.default_rng()


# --------------------------------------------------------------------------- helpers


def random_rgba(h, w):
    img = rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8)
    img[0, 0, 3] = 0      # always some fully transparent,
    img[0, 1, 3] = 255    # fully opaque
    img[0, 2, 3] = 128    # and partial pixels
    return img


def look_at_c2w_opengl(eye, target=(0.0, 0.0, 0.0)):
    """Camera-to-world in OpenGL axes (x right, y up, looking down -z)."""
    eye = np.asarray(eye, dtype=np.float64)
    fwd = np.asarray(target, dtype=np.float64) - eye
    fwd /= np.linalg.norm(fwd)
    up = np.array([0.0, 0.0, 1.0])
    right = np.cross(fwd, up)
    right /= np.linalg.norm(right)
    true_up = np.cross(right, fwd)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, true_up, -fwd, eye
    return c2w


def random_eye():
    d = rng.normal(size=3)
    d[2] = abs(d[2]) + 0.2
    return d / np.linalg.norm(d) * rng.uniform(2.5, 4.5)


def make_blender(root, splits=None, h=16, w=24, angle=None, ext=False, rgb_only=False):
    """A NeRF-synthetic folder; returns {split: (angle, [c2w], [rgba uint8])}."""
    splits = splits or {"train": 4, "test": 3}
    angle = angle if angle is not None else float(rng.uniform(0.5, 1.2))
    out = {}
    for split, n in splits.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        frames, mats, imgs = [], [], []
        for i in range(n):
            c2w = look_at_c2w_opengl(random_eye())
            img = random_rgba(h, w)
            if rgb_only:
                img = img[..., :3].copy()
            Image.fromarray(img).save(root / split / f"r_{i}.png")
            frames.append({"file_path": f"./{split}/r_{i}" + (".png" if ext else ""),
                           "rotation": 0.1, "transform_matrix": c2w.tolist()})
            mats.append(c2w)
            imgs.append(img)
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": angle, "frames": frames}))
        out[split] = (angle, mats, imgs)
    return out


def composite_ref(rgba, bg):
    x = rgba.astype(np.float64) / 255.0
    if x.shape[2] == 3:
        return rgba
    out = x[..., :3] * x[..., 3:] + np.asarray(bg) * (1.0 - x[..., 3:])
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)


def assert_close_u8(a, b, max_diff=1):
    assert a.shape == b.shape
    d = np.abs(a.astype(np.int32) - b.astype(np.int32))
    assert d.max() <= max_diff, d.max()
    assert np.mean(d == 0) > 0.97


# --------------------------------------------------------------------------- Blender


def test_blender_loads_and_composites(tmp_path):
    scene = make_blender(tmp_path)
    bg = tuple(float(x) for x in rng.uniform(0.05, 0.95, size=3))
    ds = load_dataset(tmp_path, "train", background=bg)
    angle, mats, imgs = scene["train"]
    assert isinstance(ds, Dataset) and len(ds) == 4
    assert ds.images[0].dtype == np.uint8 and np.shape(ds.images) == (4, 16, 24, 3)
    assert (ds.width, ds.height) == (24, 16)
    assert ds.points is None and ds.point_colors is None
    assert ds.background == bg
    assert ds.names == [f"train/r_{i}" for i in range(4)]
    assert ds.format == "blender" and ds.split == "train"
    for i in range(4):
        assert_close_u8(ds.images[i], composite_ref(imgs[i], bg))
        ref = Camera.from_blender(mats[i], angle, 24, 16)
        cam = ds.cameras[i]
        np.testing.assert_array_equal(cam.world_to_camera, ref.world_to_camera)
        assert (cam.fx, cam.fy, cam.cx, cam.cy, cam.width, cam.height) == \
            (ref.fx, ref.fy, ref.cx, ref.cy, ref.width, ref.height)
        np.testing.assert_allclose(cam.center, mats[i][:3, 3], atol=1e-5)
    # fully transparent pixel is the background; fully opaque keeps its colour
    np.testing.assert_array_equal(ds.images[0][0, 0], np.rint(np.asarray(bg) * 255).astype(np.uint8))
    np.testing.assert_array_equal(ds.images[0][0, 1], imgs[0][0, 1, :3])


def test_blender_other_splits_extensions_and_rgb(tmp_path):
    make_blender(tmp_path, {"val": 2}, ext=True, rgb_only=True)
    ds = load_dataset(tmp_path, "val")
    assert len(ds) == 2
    raw = np.asarray(Image.open(tmp_path / "val" / "r_1.png"))
    np.testing.assert_array_equal(ds.images[1], raw)   # opaque RGB passes through untouched
    with pytest.raises(DatasetError, match="transforms_train.json"):
        load_dataset(tmp_path, "train")
    with pytest.raises(ValueError, match="split"):
        load_dataset(tmp_path, "bogus")


def test_blender_downscale_box_average_before_compositing(tmp_path):
    scene = make_blender(tmp_path, {"train": 3}, h=18, w=25)   # 25 is not a multiple of 2: cropped
    bg = (1.0, 1.0, 1.0)
    ds = load_dataset(tmp_path, background=bg, downscale=2)
    angle, mats, imgs = scene["train"]
    assert np.shape(ds.images) == (3, 9, 12, 3)
    full = Camera.from_blender(mats[0], angle, 25, 18)
    cam = ds.cameras[0]
    assert cam.fx == pytest.approx(full.fx / 2) and cam.fy == pytest.approx(full.fy / 2)
    assert cam.cx == pytest.approx(12.5 / 2) and cam.cy == pytest.approx(9.0 / 2)
    assert (cam.width, cam.height) == (12, 9)
    for i in range(3):
        x = imgs[i][:18, :24].astype(np.float64).reshape(9, 2, 12, 2, 4).mean(axis=(1, 3)) / 255.0
        ref = x[..., :3] * x[..., 3:] + (1.0 - x[..., 3:])
        ref = np.clip(np.rint(ref * 255), 0, 255).astype(np.uint8)
        assert_close_u8(ds.images[i], ref)


def test_blender_frames_subset(tmp_path):
    make_blender(tmp_path, {"test": 7})
    full = load_dataset(tmp_path, "test")
    for spec, idx in [("0::2", [0, 2, 4, 6]), (slice(1, None, 3), [1, 4]), ([5, 0], [5, 0]),
                      ("3", [3]), (range(2), [0, 1])]:
        sub = load_dataset(tmp_path, "test", frames=spec)
        assert sub.names == [full.names[i] for i in idx]
        np.testing.assert_array_equal(sub.images, [full.images[i] for i in idx])
        sub2 = full.subset(spec)
        assert sub2.names == sub.names
        assert sub2.scene_extent == pytest.approx(sub.scene_extent)
    with pytest.raises(ValueError, match="frames"):
        load_dataset(tmp_path, "test", frames=[7])
    with pytest.raises(ValueError, match="frames"):
        load_dataset(tmp_path, "test", frames="a:b")
    assert select_frames(5, None) == [0, 1, 2, 3, 4]
    assert select_frames(5, [-1]) == [4]


def test_scene_extent_matches_hand_computation(tmp_path):
    make_blender(tmp_path, {"train": 5})
    meta = json.loads((tmp_path / "transforms_train.json").read_text())
    centers = np.array([np.asarray(f["transform_matrix"])[:3, 3] for f in meta["frames"]])
    mean = centers.mean(axis=0)
    expected = 1.1 * max(np.linalg.norm(c - mean) for c in centers)
    ds = load_dataset(tmp_path)
    assert ds.scene_extent == pytest.approx(expected, rel=1e-5)
    assert scene_extent(ds.cameras) == pytest.approx(expected, rel=1e-5)
    # a single camera would give 0: the extent falls back to 1
    assert scene_extent(ds.cameras[:1]) == 1.0


def test_keep_alpha(tmp_path):
    scene = make_blender(tmp_path, {"train": 2})
    ds = load_dataset(tmp_path, keep_alpha=True)
    np.testing.assert_array_equal(ds.alphas[1], scene["train"][2][1][..., 3])
    assert load_dataset(tmp_path).alphas is None


def test_blender_bad_inputs_name_the_file(tmp_path):
    make_blender(tmp_path, {"train": 3})
    tf = tmp_path / "transforms_train.json"
    good = tf.read_text()

    tf.write_text(good[: len(good) // 2])          # truncated json
    with pytest.raises(DatasetError, match="transforms_train.json"):
        load_dataset(tmp_path)

    meta = json.loads(good)
    del meta["camera_angle_x"]
    tf.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="camera_angle_x"):
        load_dataset(tmp_path)

    meta = json.loads(good)
    meta["frames"][1]["transform_matrix"] = [[1, 0, 0], [0, 1, 0]]
    tf.write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match=r"frames\[1\]"):
        load_dataset(tmp_path)

    tf.write_text(good)
    img = tmp_path / "train" / "r_1.png"
    data = img.read_bytes()
    img.write_bytes(b"this is not a png" + data[:20])   # not an image
    with pytest.raises(DatasetError, match="r_1.png"):
        load_dataset(tmp_path)
    img.write_bytes(data[: len(data) // 2])             # truncated png
    with pytest.raises(DatasetError, match="r_1.png"):
        load_dataset(tmp_path)
    img.unlink()                                       # missing image
    with pytest.raises(DatasetError, match="r_1.png"):
        load_dataset(tmp_path)
    Image.fromarray(random_rgba(10, 14)).save(img)     # another size: its own camera, same field of view
    ds = load_dataset(tmp_path)
    assert (ds.cameras[1].width, ds.cameras[1].height) == (14, 10)
    assert ds.cameras[1].fx / 14 == pytest.approx(ds.cameras[0].fx / ds.cameras[0].width)


def test_unrecognised_folder(tmp_path):
    with pytest.raises(DatasetError) as e:
        load_dataset(tmp_path)
    msg = str(e.value)
    assert str(tmp_path) in msg and "transforms_train.json" in msg and "sparse" in msg
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset(tmp_path / "nope")
    assert issubclass(DatasetError, ValueError)
    for bad in [dict(downscale=0), dict(downscale=1.5), dict(background=(2, 0, 0)), dict(format="x")]:
        with pytest.raises((ValueError, TypeError)):
            load_dataset(tmp_path, **bad)


# --------------------------------------------------------------------------- COLMAP writers

MODEL_IDS = {name: mid for mid, (name, _) in colmap_mod.CAMERA_MODELS.items()}


def random_quat():
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return q if q[0] > 0 else -q


def write_colmap_bin(sparse, cams, images, points):
    sparse.mkdir(parents=True, exist_ok=True)
    b = struct.pack("<Q", len(cams))
    for cid, (model, w, h, params) in cams.items():
        b += struct.pack("<iiQQ", cid, MODEL_IDS[model], w, h) + struct.pack(f"<{len(params)}d", *params)
    (sparse / "cameras.bin").write_bytes(b)
    b = struct.pack("<Q", len(images))
    for iid, (q, t, cid, name, npts) in images.items():
        b += struct.pack("<i4d3di", iid, *q, *t, cid) + name.encode() + b"\0" + struct.pack("<Q", npts)
        for k in range(npts):
            b += struct.pack("<ddq", rng.uniform(0, 10), rng.uniform(0, 10), k - 1)
    (sparse / "images.bin").write_bytes(b)
    b = struct.pack("<Q", len(points))
    for pid, (xyz, rgb, track) in points.items():
        b += struct.pack("<Q3d3Bd", pid, *xyz, *rgb, 0.5) + struct.pack("<Q", track)
        for k in range(track):
            b += struct.pack("<ii", k + 1, k)
    (sparse / "points3D.bin").write_bytes(b)


def write_colmap_txt(sparse, cams, images, points):
    sparse.mkdir(parents=True, exist_ok=True)
    lines = ["# Camera list with one line of data per camera:", "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]"]
    for cid, (model, w, h, params) in cams.items():
        lines.append(f"{cid} {model} {w} {h} " + " ".join(repr(float(p)) for p in params))
    (sparse / "cameras.txt").write_text("\n".join(lines) + "\n")
    lines = ["# Image list with two lines of data per image:",
             "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME", "#   POINTS2D[] as (X, Y, POINT3D_ID)"]
    for iid, (q, t, cid, name, npts) in images.items():
        lines.append(f"{iid} " + " ".join(repr(float(v)) for v in (*q, *t)) + f" {cid} {name}")
        lines.append(" ".join(f"{rng.uniform(0, 10)} {rng.uniform(0, 10)} {k - 1}" for k in range(npts)))
    (sparse / "images.txt").write_text("\n".join(lines) + "\n")
    lines = ["# 3D point list with one line of data per point:"]
    for pid, (xyz, rgb, track) in points.items():
        lines.append(f"{pid} " + " ".join(repr(float(v)) for v in xyz) + " " + " ".join(str(int(c)) for c in rgb)
                     + " 0.5" + "".join(f" {k + 1} {k}" for k in range(track)))
    (sparse / "points3D.txt").write_text("\n".join(lines) + "\n")


def make_colmap(root, n=10, h=12, w=20, cams=None, fmt="bin", sparse_sub="sparse/0", image_ext="png",
                rgba=False):
    """A COLMAP folder with n images; returns (cams, images, points, {name: image array})."""
    if cams is None:
        cams = {1: ("PINHOLE", w, h, [rng.uniform(15, 25), rng.uniform(15, 25), w / 2 + rng.uniform(-1, 1),
                                      h / 2 + rng.uniform(-1, 1)]),
                7: ("SIMPLE_PINHOLE", w, h, [rng.uniform(15, 25), w / 2, h / 2])}
    cam_ids = list(cams)
    ids = rng.permutation(np.arange(1, n + 1) * 3)     # ids unrelated to the name order
    images = {}
    for k, iid in enumerate(ids):
        name = f"img_{int(rng.integers(0, 10**6)):06d}_{k}.{image_ext}"
        images[int(iid)] = (random_quat(), rng.normal(size=3) * 2, cam_ids[k % len(cam_ids)], name,
                            int(rng.integers(0, 4)))
    points = {int(pid): (rng.normal(size=3), rng.integers(0, 256, size=3), int(rng.integers(0, 4)))
              for pid in rng.permutation(100)[:30] + 1}
    writer = write_colmap_bin if fmt == "bin" else write_colmap_txt
    writer(root / sparse_sub, cams, images, points)
    (root / "images").mkdir(parents=True, exist_ok=True)
    pix = {}
    for q, t, cid, name, _ in images.values():
        cw, ch = cams[cid][1], cams[cid][2]
        img = random_rgba(ch, cw) if rgba else rng.integers(0, 256, size=(ch, cw, 3), dtype=np.uint8)
        Image.fromarray(img).save(root / "images" / name)
        pix[name] = img
    return cams, images, points, pix


def rotmat_reference(q):
    from scipy.spatial.transform import Rotation
    w, x, y, z = q
    return Rotation.from_quat([x, y, z, w]).as_matrix()


def test_a_path_inside_a_scene_names_the_scene_folder(tmp_path):
    """Given a file or folder inside a scene (a transforms file, a COLMAP model or one of
    its files, an image folder) instead of the scene, the error names the scene folder,
    and loading that folder works; an unrelated folder gets no guess."""
    blender = tmp_path / "lego"
    make_blender(blender)
    colmap = tmp_path / "garden"
    make_colmap(colmap, n=3, fmt="txt")
    inside = [(colmap / "sparse" / "0", colmap), (colmap / "sparse" / "0" / "cameras.txt", colmap),
              (colmap / "sparse", colmap), (colmap / "images", colmap),
              (blender / "transforms_train.json", blender), (blender / "train", blender)]
    for path, scene in inside:
        with pytest.raises(DatasetError, match=f"the scene folder is probably {scene}$"):
            load_dataset(path)
        assert len(load_dataset(scene, "train")) > 0
    (tmp_path / "unrelated").mkdir()
    with pytest.raises(DatasetError) as e:
        load_dataset(tmp_path / "unrelated")
    assert "probably" not in str(e.value)
    errors = splat.check_config({"data": {"path": str(colmap / "sparse" / "0" / "images.txt")}})
    assert any(f"the scene folder is probably {colmap}" in err for err in errors), errors


# --------------------------------------------------------------------------- COLMAP


@pytest.mark.parametrize("fmt", ["bin", "txt"])
def test_colmap_loads(tmp_path, fmt):
    cams, images, points, pix = make_colmap(tmp_path, fmt=fmt)
    by_name = sorted(images.values(), key=lambda im: im[3])
    test_names = [im[3] for k, im in enumerate(by_name) if k % 8 == 0]
    train_names = [im[3] for k, im in enumerate(by_name) if k % 8 != 0]
    tr = load_dataset(tmp_path, "train")
    te = load_dataset(tmp_path, "test")
    assert tr.names == train_names and te.names == test_names
    assert tr.format == "colmap"
    assert len(load_dataset(tmp_path, "all")) == 10
    assert load_dataset(tmp_path, "test", test_every=3).names == [im[3] for im in by_name[::3]]
    name_to_image = {im[3]: im for im in images.values()}
    for i, name in enumerate(tr.names):
        q, t, cid, _, _ = name_to_image[name]
        cam = tr.cameras[i]
        model, w, h, params = cams[cid]
        if model == "PINHOLE":
            assert (cam.fx, cam.fy, cam.cx, cam.cy) == pytest.approx(params)
        else:
            assert (cam.fx, cam.fy, cam.cx, cam.cy) == pytest.approx([params[0], params[0], params[1], params[2]])
        assert (cam.width, cam.height) == (w, h)
        np.testing.assert_allclose(cam.world_to_camera[:3, :3], rotmat_reference(q), atol=1e-6)
        np.testing.assert_allclose(cam.world_to_camera[:3, 3], t, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(tr.images[i], pix[name])
    ordered = [points[k] for k in points]
    np.testing.assert_allclose(tr.points, np.array([p[0] for p in ordered]), rtol=1e-6)
    np.testing.assert_allclose(tr.point_colors, np.array([p[1] for p in ordered]) / 255.0, rtol=1e-6)
    assert tr.points.dtype == np.float32 and tr.point_colors.dtype == np.float32
    centers = np.array([-rotmat_reference(name_to_image[n][0]).T @ name_to_image[n][1] for n in tr.names])
    expected = 1.1 * np.max(np.linalg.norm(centers - centers.mean(axis=0), axis=1))
    assert tr.scene_extent == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="split"):
        load_dataset(tmp_path, "val")


def test_colmap_binary_and_text_agree_and_binary_preferred(tmp_path):
    cams, images, points, _ = make_colmap(tmp_path, fmt="bin")
    a = load_dataset(tmp_path, "all")
    write_colmap_txt(tmp_path / "sparse" / "0", cams, images, points)
    for stem in ("cameras", "images", "points3D"):
        (tmp_path / "sparse" / "0" / f"{stem}.bin").rename(tmp_path / f"{stem}.bin.keep")
    b = load_dataset(tmp_path, "all")
    assert a.names == b.names
    for ca, cb in zip(a.cameras, b.cameras):
        np.testing.assert_array_equal(ca.world_to_camera, cb.world_to_camera)
        assert (ca.fx, ca.fy, ca.cx, ca.cy) == (cb.fx, cb.fy, cb.cx, cb.cy)
    np.testing.assert_array_equal(a.points, b.points)
    np.testing.assert_array_equal(a.point_colors, b.point_colors)
    # both present: the binary model wins (make the text one different)
    for stem in ("cameras", "images", "points3D"):
        (tmp_path / f"{stem}.bin.keep").rename(tmp_path / "sparse" / "0" / f"{stem}.bin")
    pts_txt = tmp_path / "sparse" / "0" / "points3D.txt"
    pts_txt.write_text("1 9 9 9 1 2 3 0.1\n")
    c = load_dataset(tmp_path, "all")
    np.testing.assert_array_equal(c.points, a.points)


def test_colmap_sparse_without_subfolder_and_rgba(tmp_path):
    make_colmap(tmp_path, n=4, fmt="txt", sparse_sub="sparse", rgba=True)
    bg = (0.0, 0.5, 1.0)
    ds = load_dataset(tmp_path, "all", background=bg, keep_alpha=True)
    raw = np.asarray(Image.open(tmp_path / "images" / ds.names[2]))
    assert_close_u8(ds.images[2], composite_ref(raw, bg))
    np.testing.assert_array_equal(ds.alphas[2], raw[..., 3])


def test_colmap_downscale(tmp_path):
    cams, images, points, pix = make_colmap(tmp_path, n=3, h=12, w=20)
    ds = load_dataset(tmp_path, "all", downscale=2)
    assert np.shape(ds.images) == (3, 6, 10, 3)
    full = load_dataset(tmp_path, "all")
    for a, b in zip(ds.cameras, full.cameras):
        assert (a.fx, a.fy, a.cx, a.cy) == pytest.approx((b.fx / 2, b.fy / 2, b.cx / 2, b.cy / 2))
    ref = pix[ds.names[0]].astype(np.float64).reshape(6, 2, 10, 2, 3).mean(axis=(1, 3))
    assert np.abs(ds.images[0] - ref).max() <= 0.5 + 1e-6
    # a prepared images_2 folder is used as is (sizes rounded up, as resizers may)
    (tmp_path / "images_2").mkdir()
    marker = {}
    for name in pix:
        img = rng.integers(0, 256, size=(6, 11, 3), dtype=np.uint8)
        Image.fromarray(img).save(tmp_path / "images_2" / name)
        marker[name] = img
    ds2 = load_dataset(tmp_path, "all", downscale=2)
    np.testing.assert_array_equal(ds2.images[1], marker[ds2.names[1]])
    for a, b in zip(ds2.cameras, full.cameras):
        assert a.fx == pytest.approx(b.fx * 11 / 20) and a.fy == pytest.approx(b.fy * 6 / 12)


def test_colmap_unsupported_model(tmp_path):
    cams = {1: ("FOV", 20, 12, [20.0, 20.0, 10.0, 6.0, 0.1])}
    make_colmap(tmp_path, n=2, cams=cams)
    with pytest.raises(DatasetError, match="FOV"):
        load_dataset(tmp_path, "all")


@pytest.mark.parametrize("stem", ["cameras", "images", "points3D"])
def test_colmap_truncated_binary_names_the_file(tmp_path, stem):
    make_colmap(tmp_path, n=4)
    p = tmp_path / "sparse" / "0" / f"{stem}.bin"
    data = p.read_bytes()
    for cut in (1, 7, len(data) // 2, len(data) - 3):
        p.write_bytes(data[:cut])
        with pytest.raises(DatasetError, match=f"{stem}.bin"):
            load_dataset(tmp_path, "all")
    p.write_bytes(data + b"\x01\x02")          # trailing garbage
    with pytest.raises(DatasetError, match=f"{stem}.bin"):
        load_dataset(tmp_path, "all")
    p.unlink()                                 # missing
    with pytest.raises(DatasetError, match=stem):
        load_dataset(tmp_path, "all")


def test_colmap_bad_text_and_missing_images(tmp_path):
    cams, images, points, pix = make_colmap(tmp_path, n=4, fmt="txt")
    sp = tmp_path / "sparse" / "0"
    good = (sp / "cameras.txt").read_text()
    (sp / "cameras.txt").write_text(good.replace("PINHOLE", "PINHOLE 1", 1))
    with pytest.raises(DatasetError, match="cameras.txt"):
        load_dataset(tmp_path, "all")
    (sp / "cameras.txt").write_text(good)
    good_img = (sp / "images.txt").read_text()
    (sp / "images.txt").write_text(good_img.replace(" 7 ", " 99 ", 1) if " 7 " in good_img else
                                   good_img + "500 1 0 0 0 0 0 0 99 extra.png\n\n")
    with pytest.raises(DatasetError, match="images.txt"):
        load_dataset(tmp_path, "all")
    (sp / "images.txt").write_text(good_img)
    name = sorted(pix)[1]
    (tmp_path / "images" / name).unlink()
    with pytest.raises(DatasetError, match=name):
        load_dataset(tmp_path, "all")
    (tmp_path / "images" / name).write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(DatasetError, match=name):
        load_dataset(tmp_path, "all")


class _Records(list):
    """(id, record) pairs with the dict interface the writers use, so an id can repeat."""

    def items(self):
        return iter(self)


@pytest.mark.parametrize("fmt", ["bin", "txt"])
def test_colmap_ids_and_names_listed_twice_are_refused(tmp_path, fmt):
    """A model listing one image id, one image name or one camera id twice is damaged:
    the loader names the file and the id or name instead of keeping either record."""
    cams, images, points, pix = make_colmap(tmp_path, n=5, fmt=fmt)
    sparse = tmp_path / "sparse" / "0"
    writer = write_colmap_bin if fmt == "bin" else write_colmap_txt
    first_id, first = next(iter(images.items()))
    other_id = max(images) + 1
    cases = [(_Records(list(images.items()) + [(first_id, first)]), cams, f"image id {first_id} is listed twice"),
             (_Records(list(images.items()) + [(other_id, first)]), cams,
              f"image {first[3]!r} is listed twice (ids {first_id} and {other_id})"),
             (images, _Records(list(cams.items()) + [next(iter(cams.items()))]),
              f"camera id {next(iter(cams))} is listed twice")]
    for listed, cam_records, words in cases:
        writer(sparse, cam_records, listed, points)
        with pytest.raises(DatasetError) as info:
            load_dataset(tmp_path, "all")
        msg = str(info.value)
        assert words in msg and ("images." if "image" in words else "cameras.") + fmt in msg, msg
    writer(sparse, cams, images, points)
    assert len(load_dataset(tmp_path, "all")) == 5


def test_colmap_split_of_too_few_images_says_how_to_train_on_all(tmp_path):
    make_colmap(tmp_path, n=1)
    with pytest.raises(DatasetError, match=r'the train split is empty \(1 image, one in every 8 held out for '
                                           r'test\) \(\[data\] train_split = "all"'):
        load_dataset(tmp_path, "train")
    assert len(load_dataset(tmp_path, "all")) == 1


def test_dataset_validation():
    cam = Camera(np.eye(4, dtype=np.float32), 10.0, 10.0, 4.0, 3.0, 8, 6)
    img = rng.integers(0, 256, size=(1, 6, 8, 3), dtype=np.uint8)
    ds = Dataset([cam], img, ["a"])
    assert ds.scene_extent == 1.0 and ds.background == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="images"):
        Dataset([cam], img.astype(np.float32), ["a"])
    with pytest.raises(ValueError, match="names"):
        Dataset([cam], img, ["a", "b"])
    with pytest.raises(ValueError, match="cameras"):
        Dataset([cam], rng.integers(0, 256, size=(1, 5, 8, 3), dtype=np.uint8), ["a"])
    with pytest.raises(ValueError, match="points"):
        Dataset([cam], img, ["a"], points=np.zeros((4, 2), np.float32))


@pytest.mark.slow
def test_loads_100_images_quickly(tmp_path):
    """100 RGBA images load in a few seconds on the thread pool."""
    import time
    (tmp_path / "train").mkdir()
    frames = []
    base = random_rgba(256, 256)
    for i in range(100):
        Image.fromarray(np.roll(base, i, axis=1)).save(tmp_path / "train" / f"r_{i}.png", compress_level=1)
        frames.append({"file_path": f"./train/r_{i}", "transform_matrix": look_at_c2w_opengl(random_eye()).tolist()})
    (tmp_path / "transforms_train.json").write_text(json.dumps({"camera_angle_x": 0.7, "frames": frames}))
    t = time.perf_counter()
    ds = load_dataset(tmp_path)
    assert len(ds) == 100
    assert time.perf_counter() - t < 10.0
