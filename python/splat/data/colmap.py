"""COLMAP scenes: sparse/0/{cameras,images,points3D}.{bin,txt} + images/.

Both the binary and the text model formats are read (binary preferred when
both exist). COLMAP stores, per registered image, the world-to-camera rotation
as a unit quaternion (w, x, y, z) and the translation, in the OpenCV camera
convention, which is splat's. Cameras PINHOLE and SIMPLE_PINHOLE are used as
they are; SIMPLE_RADIAL, RADIAL and OPENCV images are resampled to the ideal
pinhole camera with the same focal lengths and principal point: each target
pixel centre is pushed through the distortion model and the source image is
sampled bilinearly there; samples outside the source image take the
background colour (and alpha 0).

Downscale d: images come from `images_d/` when that folder exists (the
intrinsics are scaled by the actual image size over the camera size), else the
full images are box-averaged over d x d blocks (intrinsics / d).
"""
from __future__ import annotations

import math
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..camera import Camera
from .dataset import Dataset, DatasetError, select_frames
from .images import finish_rgb, load_all, prepare_image, read_image, to_uint8

SPLITS = ("train", "test", "all")

# COLMAP camera model id -> (name, number of parameters).
CAMERA_MODELS = {
    0: ("SIMPLE_PINHOLE", 3),
    1: ("PINHOLE", 4),
    2: ("SIMPLE_RADIAL", 4),
    3: ("RADIAL", 5),
    4: ("OPENCV", 8),
    5: ("OPENCV_FISHEYE", 8),
    6: ("FULL_OPENCV", 12),
    7: ("FOV", 5),
    8: ("SIMPLE_RADIAL_FISHEYE", 4),
    9: ("RADIAL_FISHEYE", 5),
    10: ("THIN_PRISM_FISHEYE", 12),
    11: ("RAD_TAN_THIN_PRISM_FISHEYE", 16),
}
_MODEL_PARAMS = {name: count for name, count in CAMERA_MODELS.values()}
SUPPORTED_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV")


@dataclass(frozen=True)
class ColmapCamera:
    id: int
    model: str
    width: int
    height: int
    params: tuple


@dataclass(frozen=True)
class ColmapImage:
    id: int
    qvec: tuple      # w, x, y, z (world-to-camera rotation)
    tvec: tuple      # world-to-camera translation
    camera_id: int
    name: str


# --------------------------------------------------------------------------- binary


class _BinReader:
    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = path.read_bytes()
        except OSError as exc:
            raise DatasetError(f"[splat] {path}: cannot read ({exc.strerror})") from None
        self.pos = 0

    def truncated(self, what: str):
        return DatasetError(f"[splat] {self.path}: truncated or corrupt file (reading {what} at byte "
                            f"{self.pos} of {len(self.data)})")

    def read(self, st: struct.Struct, what: str):
        if self.pos + st.size > len(self.data):
            raise self.truncated(what)
        out = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return out

    def skip(self, nbytes: int, what: str):
        if nbytes < 0 or self.pos + nbytes > len(self.data):
            raise self.truncated(what)
        self.pos += nbytes

    def count(self, what: str, min_record: int) -> int:
        (n,) = self.read(_U64, what)
        if n * min_record > len(self.data) - self.pos:
            raise self.truncated(what)
        return n

    def cstring(self, what: str) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise self.truncated(what)
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DatasetError(f"[splat] {self.path}: {what} is not valid UTF-8") from None

    def finish(self):
        if self.pos != len(self.data):
            raise DatasetError(f"[splat] {self.path}: {len(self.data) - self.pos} unexpected bytes after "
                               f"the last record (corrupt file?)")


_U64 = struct.Struct("<Q")
_CAM_HEAD = struct.Struct("<iiQQ")
_IMG_HEAD = struct.Struct("<i4d3di")
_PT_HEAD = struct.Struct("<Q3d3BdQ")


def read_cameras_binary(path) -> dict[int, ColmapCamera]:
    r = _BinReader(Path(path))
    out = {}
    for _ in range(r.count("the camera count", _CAM_HEAD.size)):
        cam_id, model_id, width, height = r.read(_CAM_HEAD, "a camera record")
        if model_id not in CAMERA_MODELS:
            raise DatasetError(f"[splat] {path}: camera {cam_id} has unknown camera model id {model_id}")
        name, nparams = CAMERA_MODELS[model_id]
        params = r.read(struct.Struct(f"<{nparams}d"), f"camera {cam_id} parameters")
        out[cam_id] = _check_camera(path, ColmapCamera(cam_id, name, width, height, params))
    r.finish()
    return out


def read_images_binary(path) -> dict[int, ColmapImage]:
    r = _BinReader(Path(path))
    out = {}
    for _ in range(r.count("the image count", _IMG_HEAD.size + 9)):
        image_id, qw, qx, qy, qz, tx, ty, tz, cam_id = r.read(_IMG_HEAD, "an image record")
        name = r.cstring(f"image {image_id} name")
        (npts,) = r.read(_U64, f"image {image_id} point count")
        r.skip(24 * npts, f"image {image_id} 2D points")
        out[image_id] = _check_image(path, ColmapImage(image_id, (qw, qx, qy, qz), (tx, ty, tz), cam_id, name))
    r.finish()
    return out


def read_points3d_binary(path) -> tuple[np.ndarray, np.ndarray]:
    r = _BinReader(Path(path))
    n = r.count("the point count", _PT_HEAD.size)
    xyz = np.empty((n, 3), dtype=np.float64)
    rgb = np.empty((n, 3), dtype=np.uint8)
    data, unpack, size = r.data, _PT_HEAD.unpack_from, _PT_HEAD.size
    pos, end = r.pos, len(r.data)
    for i in range(n):
        if pos + size > end:
            r.pos = pos
            raise r.truncated(f"point {i}")
        rec = unpack(data, pos)
        xyz[i] = rec[1:4]
        rgb[i] = rec[4:7]
        pos += size + 8 * rec[8]
        if pos > end:
            r.pos = pos - 8 * rec[8]
            raise r.truncated(f"point {i} track")
    r.pos = pos
    r.finish()
    return _check_points(path, xyz, rgb)


# --------------------------------------------------------------------------- text


def _text_lines(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"[splat] {path}: cannot read ({exc})") from None
    return [(i + 1, ln.strip()) for i, ln in enumerate(text.splitlines()) if not ln.lstrip().startswith("#")]


def _bad_line(path, lineno, what):
    return DatasetError(f"[splat] {path}: line {lineno}: {what}")


def read_cameras_text(path) -> dict[int, ColmapCamera]:
    path = Path(path)
    out = {}
    for lineno, ln in _text_lines(path):
        if not ln:
            continue
        parts = ln.split()
        if len(parts) < 4:
            raise _bad_line(path, lineno, "expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS...")
        model = parts[1]
        if model not in _MODEL_PARAMS:
            raise _bad_line(path, lineno, f"unknown camera model {model!r}")
        try:
            cam_id, width, height = int(parts[0]), int(parts[2]), int(parts[3])
            params = tuple(float(p) for p in parts[4:])
        except ValueError:
            raise _bad_line(path, lineno, "malformed number") from None
        if len(params) != _MODEL_PARAMS[model]:
            raise _bad_line(path, lineno, f"{model} takes {_MODEL_PARAMS[model]} parameters, got {len(params)}")
        out[cam_id] = _check_camera(path, ColmapCamera(cam_id, model, width, height, params))
    return out


def read_images_text(path) -> dict[int, ColmapImage]:
    """Two lines per image: the pose line, then its 2D points (possibly empty)."""
    path = Path(path)
    lines = _text_lines(path)
    out = {}
    i = 0
    while i < len(lines):
        lineno, ln = lines[i]
        i += 1
        if not ln:
            continue
        parts = ln.split(maxsplit=9)
        if len(parts) < 10:
            raise _bad_line(path, lineno, "expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME")
        try:
            image_id = int(parts[0])
            q = tuple(float(p) for p in parts[1:5])
            t = tuple(float(p) for p in parts[5:8])
            cam_id = int(parts[8])
        except ValueError:
            raise _bad_line(path, lineno, "malformed number") from None
        out[image_id] = _check_image(path, ColmapImage(image_id, q, t, cam_id, parts[9].strip()))
        i += 1  # the POINTS2D line
    return out


def read_points3d_text(path) -> tuple[np.ndarray, np.ndarray]:
    path = Path(path)
    xyz, rgb = [], []
    for lineno, ln in _text_lines(path):
        if not ln:
            continue
        parts = ln.split()
        if len(parts) < 8:
            raise _bad_line(path, lineno, "expected POINT3D_ID X Y Z R G B ERROR TRACK...")
        try:
            xyz.append((float(parts[1]), float(parts[2]), float(parts[3])))
            c = (int(parts[4]), int(parts[5]), int(parts[6]))
        except ValueError:
            raise _bad_line(path, lineno, "malformed number") from None
        if not all(0 <= v <= 255 for v in c):
            raise _bad_line(path, lineno, "colour outside 0..255")
        rgb.append(c)
    return _check_points(path, np.array(xyz, dtype=np.float64).reshape(-1, 3),
                         np.array(rgb, dtype=np.uint8).reshape(-1, 3))


# --------------------------------------------------------------------------- checks


def _check_camera(path, cam: ColmapCamera) -> ColmapCamera:
    if cam.width <= 0 or cam.height <= 0 or cam.width > 1 << 20 or cam.height > 1 << 20:
        raise DatasetError(f"[splat] {path}: camera {cam.id} has invalid size {cam.width}x{cam.height}")
    if not all(math.isfinite(p) for p in cam.params):
        raise DatasetError(f"[splat] {path}: camera {cam.id} has non-finite parameters")
    if cam.model in SUPPORTED_MODELS:  # the others are refused where an image uses them
        (fx, fy, _, _), _ = pinhole_intrinsics(cam.model, cam.params)
        if not (fx > 0 and fy > 0):
            raise DatasetError(f"[splat] {path}: camera {cam.id} ({cam.model}) has focal length "
                               f"{fx:g}, {fy:g}; focal lengths must be positive")
    return cam


def _check_image(path, im: ColmapImage) -> ColmapImage:
    if not all(math.isfinite(v) for v in im.qvec + im.tvec):
        raise DatasetError(f"[splat] {path}: image {im.id} ({im.name}) has a non-finite pose")
    if sum(v * v for v in im.qvec) == 0.0:
        raise DatasetError(f"[splat] {path}: image {im.id} ({im.name}) has a zero quaternion")
    if not im.name:
        raise DatasetError(f"[splat] {path}: image {im.id} has an empty name")
    return im


def _check_points(path, xyz, rgb):
    if not np.all(np.isfinite(xyz)):
        raise DatasetError(f"[splat] {path}: non-finite point coordinates")
    return xyz.astype(np.float32), rgb.astype(np.float32) / np.float32(255.0)


# --------------------------------------------------------------------------- model


def find_sparse_dir(root) -> Path | None:
    root = Path(root)
    for cand in (root / "sparse" / "0", root / "sparse"):
        if cand.is_dir() and any((cand / f"cameras.{ext}").is_file() for ext in ("bin", "txt")):
            return cand
    return None


def _pick(sparse: Path, stem: str) -> Path:
    for ext in ("bin", "txt"):
        p = sparse / f"{stem}.{ext}"
        if p.is_file():
            return p
    raise DatasetError(f"[splat] {sparse / (stem + '.bin')}: file not found (nor {stem}.txt)")


def read_model(sparse):
    """(cameras, images, (points float32 [M,3], colours float32 [M,3] in [0,1])) of a sparse folder."""
    sparse = Path(sparse)
    cp, ip, pp = _pick(sparse, "cameras"), _pick(sparse, "images"), _pick(sparse, "points3D")
    cams = read_cameras_binary(cp) if cp.suffix == ".bin" else read_cameras_text(cp)
    imgs = read_images_binary(ip) if ip.suffix == ".bin" else read_images_text(ip)
    pts = read_points3d_binary(pp) if pp.suffix == ".bin" else read_points3d_text(pp)
    for im in imgs.values():
        if im.camera_id not in cams:
            raise DatasetError(f"[splat] {ip}: image {im.id} ({im.name}) refers to camera "
                               f"{im.camera_id}, which {cp} does not define")
    if not imgs:
        raise DatasetError(f"[splat] {ip}: no registered images")
    return cams, imgs, pts


def qvec_to_rotmat(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(np.asarray(q, dtype=np.float64))
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def pinhole_intrinsics(model: str, params) -> tuple[tuple[float, float, float, float], tuple]:
    """((fx, fy, cx, cy), distortion coefficients) of a supported model."""
    p = tuple(float(v) for v in params)
    if model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        return (p[0], p[0], p[1], p[2]), p[3:]
    if model in ("PINHOLE", "OPENCV"):
        return (p[0], p[1], p[2], p[3]), p[4:]
    raise ValueError(f"[splat] model: unsupported camera model {model}")


def distort(model: str, coeffs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Apply a COLMAP distortion model to normalized image coordinates."""
    if model in ("SIMPLE_PINHOLE", "PINHOLE"):
        return x, y
    r2 = x * x + y * y
    if model == "SIMPLE_RADIAL":
        (k,) = coeffs
        radial = k * r2
        return x + x * radial, y + y * radial
    if model == "RADIAL":
        k1, k2 = coeffs
        radial = k1 * r2 + k2 * r2 * r2
        return x + x * radial, y + y * radial
    if model == "OPENCV":
        k1, k2, p1, p2 = coeffs
        radial = k1 * r2 + k2 * r2 * r2
        xy = x * y
        dx = x * radial + 2.0 * p1 * xy + p2 * (r2 + 2.0 * x * x)
        dy = y * radial + 2.0 * p2 * xy + p1 * (r2 + 2.0 * y * y)
        return x + dx, y + dy
    raise ValueError(f"[splat] model: unsupported camera model {model}")


class _SampleMap:
    """Bilinear taps (flat indices into the 1-pixel padded source) and weights."""

    def __init__(self, model, intrinsics, coeffs, width, height):
        fx, fy, cx, cy = intrinsics
        u = np.arange(width, dtype=np.float64) + 0.5
        v = np.arange(height, dtype=np.float64) + 0.5
        x, y = np.meshgrid((u - cx) / fx, (v - cy) / fy)
        xd, yd = distort(model, coeffs, x, y)
        # source pixel-index coordinates (pixel i has its centre at i + 0.5)
        sx = fx * xd + cx - 0.5
        sy = fy * yd + cy - 0.5
        sx = np.clip(np.nan_to_num(sx, nan=-2.0), -2.0, width + 1.0)
        sy = np.clip(np.nan_to_num(sy, nan=-2.0), -2.0, height + 1.0)
        x0 = np.floor(sx)
        y0 = np.floor(sy)
        wx = (sx - x0).astype(np.float32)
        wy = (sy - y0).astype(np.float32)
        pw = width + 2
        # padded coordinates: source index -1 and width/height are the fill border
        x0i = np.clip(x0.astype(np.int64) + 1, 0, width + 1)
        x1i = np.clip(x0.astype(np.int64) + 2, 0, width + 1)
        y0i = np.clip(y0.astype(np.int64) + 1, 0, height + 1)
        y1i = np.clip(y0.astype(np.int64) + 2, 0, height + 1)
        self.taps = [(y0i * pw + x0i).ravel(), (y0i * pw + x1i).ravel(),
                     (y1i * pw + x0i).ravel(), (y1i * pw + x1i).ravel()]
        self.weights = [((1 - wx) * (1 - wy)).ravel()[:, None], (wx * (1 - wy)).ravel()[:, None],
                        ((1 - wx) * wy).ravel()[:, None], (wx * wy).ravel()[:, None]]
        self.shape = (height, width)


def undistort_image(image: np.ndarray, model: str, params, fill) -> np.ndarray:
    """Resample `image` (float [H,W,C]) taken with a COLMAP camera to the ideal
    pinhole camera with the same focal lengths and principal point.

    `params` are the COLMAP parameters of `model` for this image size; `fill`
    (C values) is used where a target pixel maps outside the source image.
    """
    intr, coeffs = pinhole_intrinsics(model, params)
    h, w = image.shape[:2]
    return _undistort(image, _SampleMap(model, intr, coeffs, w, h), fill)


def _undistort(image: np.ndarray, smap: _SampleMap, fill) -> np.ndarray:
    h, w, c = image.shape
    padded = np.empty((h + 2, w + 2, c), dtype=np.float32)
    padded[...] = np.asarray(fill, dtype=np.float32)
    padded[1:-1, 1:-1] = image
    flat = padded.reshape(-1, c)
    out = flat[smap.taps[0]] * smap.weights[0]
    for t, wt in zip(smap.taps[1:], smap.weights[1:]):
        out += flat[t] * wt
    return out.reshape(h, w, c)


# --------------------------------------------------------------------------- loader


def load_colmap(root, split: str = "train", *, background=(1.0, 1.0, 1.0), downscale: int = 1,
                frames=None, test_every: int = 8, keep_alpha: bool = False) -> Dataset:
    root = Path(root)
    if split not in SPLITS:
        raise ValueError(f"[splat] split: COLMAP scenes have splits {', '.join(SPLITS)}; got {split!r}")
    if isinstance(test_every, bool) or not isinstance(test_every, (int, np.integer)) or test_every < 2:
        raise ValueError(f"[splat] test_every: expected an integer >= 2, got {test_every!r}")
    sparse = find_sparse_dir(root)
    if sparse is None:
        raise DatasetError(f"[splat] {root}: no COLMAP model (looked for sparse/0/cameras.bin|txt "
                           f"and sparse/cameras.bin|txt)")
    cams, imgs, (points, colors) = read_model(sparse)

    ordered = sorted(imgs.values(), key=lambda im: im.name)
    if split == "all":
        chosen = ordered
    else:
        want_test = split == "test"
        chosen = [im for k, im in enumerate(ordered) if (k % test_every == 0) == want_test]
        if not chosen:
            raise DatasetError(f"[splat] {sparse}: the {split} split is empty ({len(ordered)} images, "
                               f"every {test_every}th held out for test)")
    chosen = [chosen[i] for i in select_frames(len(chosen), frames)]

    for im in chosen:
        cam = cams[im.camera_id]
        if cam.model not in SUPPORTED_MODELS:
            raise DatasetError(f"[splat] {sparse}: camera {cam.id} (used by {im.name}) has model "
                               f"{cam.model}; supported: {', '.join(SUPPORTED_MODELS)} (undistort the "
                               f"images with COLMAP's image_undistorter first)")

    own_scale = True
    image_dir = root / "images"
    if downscale > 1 and (root / f"images_{downscale}").is_dir():
        image_dir = root / f"images_{downscale}"
        own_scale = False
    if not image_dir.is_dir():
        raise DatasetError(f"[splat] {image_dir}: image folder not found")
    paths = [image_dir / im.name for im in chosen]
    bg = tuple(float(b) for b in background)
    intrinsics: list = [None] * len(chosen)
    maps: dict = {}
    maps_lock = threading.Lock()

    def load_one(i, p):
        im = chosen[i]
        cam = cams[im.camera_id]
        raw = read_image(p)
        rh, rw = raw.shape[:2]
        if own_scale:
            if (rw, rh) != (cam.width, cam.height):
                raise DatasetError(f"[splat] {p}: image is {rw}x{rh} but its camera {cam.id} in {sparse} "
                                   f"is {cam.width}x{cam.height}")
            try:
                rgb, a = prepare_image(raw, downscale, bg)
            except ValueError as exc:
                raise DatasetError(f"[splat] {p}: {str(exc).removeprefix('[splat] ')}") from None
            sx = sy = 1.0 / downscale
        else:
            if abs(rw - cam.width / downscale) > 1.0 or abs(rh - cam.height / downscale) > 1.0:
                raise DatasetError(f"[splat] {p}: image is {rw}x{rh}, expected about {cam.width}/"
                                   f"{downscale} x {cam.height}/{downscale} for camera {cam.id}")
            rgb, a = prepare_image(raw, 1, bg)
            sx, sy = rw / cam.width, rh / cam.height
        (fx, fy, cx, cy), coeffs = pinhole_intrinsics(cam.model, cam.params)
        fx, fy, cx, cy = fx * sx, fy * sy, cx * sx, cy * sy
        intrinsics[i] = (fx, fy, cx, cy)
        if any(c != 0.0 for c in coeffs):
            h, w = rgb.shape[:2]
            key = (cam.id, w, h, sx, sy)
            with maps_lock:
                smap = maps.get(key)
                if smap is None:
                    smap = maps[key] = _SampleMap(cam.model, (fx, fy, cx, cy), coeffs, w, h)
            x = rgb.astype(np.float32) * np.float32(1.0 / 255.0) if rgb.dtype == np.uint8 else rgb
            if a is None:
                a = np.ones((h, w), dtype=np.float32)
            both = _undistort(np.concatenate([x, a[..., None]], axis=2), smap, bg + (0.0,))
            rgb, a = both[..., :3], both[..., 3]
        alpha = None
        if keep_alpha and a is not None:
            alpha = to_uint8(a * np.float32(255.0))
        return finish_rgb(rgb), alpha

    images, alphas = load_all(paths, load_one, keep_alpha=keep_alpha)
    h, w = images.shape[1:3]
    cameras = []
    for im, (fx, fy, cx, cy) in zip(chosen, intrinsics):
        w2c = np.eye(4)
        w2c[:3, :3] = qvec_to_rotmat(im.qvec)
        w2c[:3, 3] = im.tvec
        try:
            cameras.append(Camera(w2c.astype(np.float32), fx, fy, cx, cy, w, h))
        except (TypeError, ValueError) as exc:  # intrinsics beyond float32 (a focal length of 1e-320, say)
            raise DatasetError(f"[splat] {sparse}: camera {im.camera_id} (used by {im.name}): "
                               f"{str(exc).removeprefix('[splat] ')}") from None
    return Dataset(cameras=cameras, images=images, names=[im.name for im in chosen], points=points,
                   point_colors=colors, background=bg, alphas=alphas, path=str(root), format="colmap",
                   split=split)
