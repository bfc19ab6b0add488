"""Small captures made on the fly: COLMAP text models and nerfstudio
transforms.json folders, and an independent numpy implementation of the
COLMAP camera models (written from COLMAP's formulas, not from splat's) to
render distorted images of a known pattern."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.spatial.transform import Rotation

# --------------------------------------------------------------------------- camera models


def split_params(model, params):
    """(fx, fy, cx, cy, coefficient dict) of COLMAP parameters."""
    p = list(map(float, params))
    if model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        fx = fy = p[0]
        cx, cy, rest = p[1], p[2], p[3:]
    else:
        fx, fy, cx, cy, rest = p[0], p[1], p[2], p[3], p[4:]
    names = {"SIMPLE_PINHOLE": [], "PINHOLE": [], "SIMPLE_RADIAL": ["k1"], "RADIAL": ["k1", "k2"],
             "OPENCV": ["k1", "k2", "p1", "p2"],
             "FULL_OPENCV": ["k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6"],
             "OPENCV_FISHEYE": ["k1", "k2", "k3", "k4"]}[model]
    c = {n: 0.0 for n in ("k1", "k2", "k3", "k4", "k5", "k6", "p1", "p2")}
    c.update(dict(zip(names, rest)))
    return fx, fy, cx, cy, c


def ref_distort(model, c, u, v):
    """COLMAP's forward model on normalized coordinates (u, v)."""
    if model == "OPENCV_FISHEYE":
        r = np.hypot(u, v)
        th = np.arctan(r)
        t2 = th * th
        thd = th * (1 + c["k1"] * t2 + c["k2"] * t2 ** 2 + c["k3"] * t2 ** 3 + c["k4"] * t2 ** 4)
        s = np.where(r > 1e-15, thd / np.maximum(r, 1e-300), 1.0)
        return u * s, v * s
    r2 = u * u + v * v
    num = 1 + c["k1"] * r2 + c["k2"] * r2 ** 2 + c["k3"] * r2 ** 3
    den = 1 + c["k4"] * r2 + c["k5"] * r2 ** 2 + c["k6"] * r2 ** 3
    rad = num / den
    du = u * rad + 2 * c["p1"] * u * v + c["p2"] * (r2 + 2 * u * u)
    dv = v * rad + c["p1"] * (r2 + 2 * v * v) + 2 * c["p2"] * u * v
    return du, dv


def ref_undistort_points(model, c, xd, yd, iters=60):
    """Ideal normalized coordinates of distorted ones: Newton iterations with a
    finite-difference Jacobian (fisheye: on the angle). Returns (x, y, ok)."""
    if model == "OPENCV_FISHEYE":
        rd = np.hypot(xd, yd)
        th = np.minimum(rd, 1.5)
        for _ in range(iters):
            t2 = th * th
            f = th * (1 + c["k1"] * t2 + c["k2"] * t2 ** 2 + c["k3"] * t2 ** 3 + c["k4"] * t2 ** 4) - rd
            df = 1 + 3 * c["k1"] * t2 + 5 * c["k2"] * t2 ** 2 + 7 * c["k3"] * t2 ** 3 + 9 * c["k4"] * t2 ** 4
            th = th - f / df
        ok = (th < np.pi / 2 - 1e-3) & (th >= 0)
        r = np.tan(np.clip(th, 0, np.pi / 2 - 1e-3))
        s = np.where(rd > 1e-15, r / np.maximum(rd, 1e-300), 1.0)
        x, y = xd * s, yd * s
    else:
        x, y = xd.copy(), yd.copy()
        h = 1e-7
        for _ in range(iters):
            fx_, fy_ = ref_distort(model, c, x, y)
            ex, ey = fx_ - xd, fy_ - yd
            ax, ay = ref_distort(model, c, x + h, y)
            bx, by = ref_distort(model, c, x, y + h)
            j11, j21 = (ax - fx_) / h, (ay - fy_) / h
            j12, j22 = (bx - fx_) / h, (by - fy_) / h
            det = j11 * j22 - j12 * j21
            x = x - (j22 * ex - j12 * ey) / det
            y = y - (-j21 * ex + j11 * ey) / det
    gx, gy = ref_distort(model, c, x, y)
    ok_res = (np.abs(gx - xd) < 1e-9) & (np.abs(gy - yd) < 1e-9)
    return x, y, (ok & ok_res) if model == "OPENCV_FISHEYE" else ok_res


def pattern(x, y, phase, freq=1.0):
    """A smooth colour pattern on the ideal image plane (normalized coordinates)."""
    x, y = x * freq, y * freq
    return np.stack([0.5 + 0.35 * np.sin(9.0 * x + 4.0 * y + phase[0]),
                     0.5 + 0.35 * np.cos(6.0 * x - 8.0 * y + phase[1]),
                     0.5 + 0.3 * np.sin(5.0 * x * y + 7.0 * y + phase[2])], axis=-1)


def distorted_render(model, params, w, h, phase, freq=1.0):
    """The pattern as the camera (model, params, w x h) sees it: float [h,w,3], valid [h,w]."""
    fx, fy, cx, cy, c = split_params(model, params)
    u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    x, y, ok = ref_undistort_points(model, c, (u - cx) / fx, (v - cy) / fy)
    img = pattern(x, y, phase, freq)
    img[~ok] = 0.0
    return img, ok


def pinhole_render(fx, fy, cx, cy, w, h, phase, freq=1.0):
    u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    return pattern((u - cx) / fx, (v - cy) / fy, phase, freq)


# --------------------------------------------------------------------------- poses


def random_w2c(rng, dist=3.0):
    """A world-to-camera 4x4 (OpenCV axes) looking roughly at the origin."""
    eye = rng.normal(size=3)
    eye = eye / np.linalg.norm(eye) * dist
    fwd = -eye / np.linalg.norm(eye)
    tmp = np.array([0.0, 0.0, 1.0]) if abs(fwd[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    right = np.cross(tmp, fwd)
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    rot = np.stack([right, down, fwd])          # rows: camera axes in world
    w2c = np.eye(4)
    w2c[:3, :3] = rot
    w2c[:3, 3] = -rot @ eye
    return w2c


def qvec_of(rot):
    x, y, z, w = Rotation.from_matrix(rot).as_quat()
    return (w, x, y, z)


# --------------------------------------------------------------------------- writers


def save_image(path, img):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = img if img.dtype == np.uint8 else np.clip(np.rint(img * 255), 0, 255).astype(np.uint8)
    Image.fromarray(arr).save(path)


def write_colmap_text(root, cameras, images, points=None):
    """cameras: {id: (model, w, h, params)}; images: [(name, cam_id, w2c 4x4)];
    points: float [N,3] (colours random)."""
    sparse = Path(root) / "sparse" / "0"
    sparse.mkdir(parents=True, exist_ok=True)
    lines = [f"{cid} {m} {w} {h} " + " ".join(repr(float(p)) for p in ps) for cid, (m, w, h, ps) in cameras.items()]
    (sparse / "cameras.txt").write_text("\n".join(lines) + "\n")
    lines = []
    for k, (name, cid, w2c) in enumerate(images):
        q = qvec_of(w2c[:3, :3])
        t = w2c[:3, 3]
        lines.append(f"{k + 1} " + " ".join(repr(float(v)) for v in (*q, *t)) + f" {cid} {name}")
        lines.append("")
    (sparse / "images.txt").write_text("\n".join(lines) + "\n")
    pts = np.zeros((0, 3)) if points is None else np.asarray(points)
    lines = [f"{i + 1} {p[0]!r} {p[1]!r} {p[2]!r} 128 64 32 0.5" for i, p in enumerate(pts.tolist())]
    (sparse / "points3D.txt").write_text("\n".join(lines) + ("\n" if lines else ""))


def c2w_opengl(w2c):
    """nerfstudio's transform_matrix of an OpenCV world-to-camera matrix."""
    return np.linalg.inv(w2c) @ np.diag([1.0, -1.0, -1.0, 1.0])


def write_ascii_ply(path, points, colors_u8):
    lines = ["ply", "format ascii 1.0", f"element vertex {len(points)}", "property float x",
             "property float y", "property float z", "property uchar red", "property uchar green",
             "property uchar blue", "end_header"]
    lines += [f"{p[0]:.8f} {p[1]:.8f} {p[2]:.8f} {c[0]} {c[1]} {c[2]}" for p, c in zip(points, colors_u8)]
    Path(path).write_text("\n".join(lines) + "\n")


def write_transforms(root, meta):
    (Path(root) / "transforms.json").write_text(json.dumps(meta, indent=1))
