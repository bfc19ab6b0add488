"""COLMAP scenes: sparse/0/{cameras,images,points3D}.{bin,txt} + images/.

Both the binary and the text model formats are read (binary preferred when
both exist). COLMAP stores, per registered image, the world-to-camera rotation
as a unit quaternion (w, x, y, z) and the translation, in the OpenCV camera
convention, which is splat's. Cameras PINHOLE and SIMPLE_PINHOLE are used as
they are; SIMPLE_RADIAL, RADIAL, OPENCV, FULL_OPENCV and OPENCV_FISHEYE images
are undistorted to a pinhole camera cropped to the region the source covers
(splat.data.lens); the other models are rejected.

A `masks/` folder beside `images/` holds one mask per image, named like the
image with `.png` appended or replacing its extension (white = use, black =
ignore); with it, every image needs its mask.

Downscale d: images come from `images_d/` when that folder exists (the
intrinsics are scaled by the actual image size over the camera size), else the
full images are box-averaged over d x d blocks (intrinsics / d).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetError, select_frames
from .lens import SUPPORTED_MODELS, Lens
from .paths import check_inside
from .views import ViewSource, find_mask, load_views

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


def _add_once(out: dict, key: int, record, path) -> None:
    """out[key] = record; a model listing an id twice is damaged, and keeping either
    record would train on a pose or lens nobody chose."""
    if key in out:
        kind = "image" if isinstance(record, ColmapImage) else "camera"
        raise DatasetError(f"[splat] {path}: {kind} id {key} is listed twice")
    out[key] = record


def _names_once(images: dict, path) -> dict:
    """`images`, after checking that no image name is listed twice (two poses of one photo)."""
    seen = {}
    for im in images.values():
        if im.name in seen:
            raise DatasetError(f"[splat] {path}: image {im.name!r} is listed twice (ids {seen[im.name]} and {im.id})")
        seen[im.name] = im.id
    return images


def read_cameras_binary(path) -> dict[int, ColmapCamera]:
    r = _BinReader(Path(path))
    out = {}
    for _ in range(r.count("the camera count", _CAM_HEAD.size)):
        cam_id, model_id, width, height = r.read(_CAM_HEAD, "a camera record")
        if model_id not in CAMERA_MODELS:
            raise DatasetError(f"[splat] {path}: camera {cam_id} has unknown camera model id {model_id}")
        name, nparams = CAMERA_MODELS[model_id]
        params = r.read(struct.Struct(f"<{nparams}d"), f"camera {cam_id} parameters")
        _add_once(out, cam_id, _check_camera(path, ColmapCamera(cam_id, name, width, height, params)), path)
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
        image = ColmapImage(image_id, (qw, qx, qy, qz), (tx, ty, tz), cam_id, name)
        _add_once(out, image_id, _check_image(path, image), path)
    r.finish()
    return _names_once(out, path)


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
        _add_once(out, cam_id, _check_camera(path, ColmapCamera(cam_id, model, width, height, params)), path)
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
        _add_once(out, image_id, _check_image(path, ColmapImage(image_id, q, t, cam_id, parts[9].strip())), path)
        i += 1  # the POINTS2D line
    return _names_once(out, path)


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
        p = list(cam.params)
        fx, fy = (p[0], p[0]) if cam.model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL") else (p[0], p[1])
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


# --------------------------------------------------------------------------- loader


def load_colmap(root, split: str = "train", *, background=(0.0, 0.0, 0.0), downscale: int = 1,
                frames=None, test_every: int = 8, keep_alpha: bool = False,
                alpha_mode: str = "composite", allow_outside_paths: bool = False) -> Dataset:
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
    for im in imgs.values():     # names are relative to images/ (or images_d/)
        check_inside(_pick(sparse, "images"), f"image {im.id} name", im.name, root, allow=allow_outside_paths,
                     under="images")

    ordered = sorted(imgs.values(), key=lambda im: im.name)
    if split == "all":
        chosen = ordered
    else:
        want_test = split == "test"
        chosen = [im for k, im in enumerate(ordered) if (k % test_every == 0) == want_test]
        if not chosen:
            n = len(ordered)
            hint = ' ([data] train_split = "all" trains on every image)' if split == "train" else ""
            raise DatasetError(f"[splat] {sparse}: the {split} split is empty ({n} image{'s' if n != 1 else ''}, "
                               f"one in every {test_every} held out for test){hint}")
    chosen = [chosen[i] for i in select_frames(len(chosen), frames)]

    lenses = {}
    for im in chosen:
        cam = cams[im.camera_id]
        if cam.model not in SUPPORTED_MODELS:
            raise DatasetError(f"[splat] {sparse}: camera {cam.id} (used by {im.name}) has model "
                               f"{cam.model}; supported: {', '.join(SUPPORTED_MODELS)} (undistort the "
                               f"images with COLMAP's image_undistorter first)")
        if cam.id not in lenses:
            try:
                lenses[cam.id] = Lens.from_colmap(cam.model, cam.width, cam.height, cam.params)
            except ValueError as exc:
                raise DatasetError(f"[splat] {sparse}: camera {cam.id}: "
                                   f"{str(exc).removeprefix('[splat] ')}") from None

    prescaled = False
    image_dir = root / "images"
    if downscale > 1 and (root / f"images_{downscale}").is_dir():
        image_dir = root / f"images_{downscale}"
        prescaled = True
    if not image_dir.is_dir():
        raise DatasetError(f"[splat] {image_dir}: image folder not found")
    mask_dir = root / "masks"
    if prescaled and (root / f"masks_{downscale}").is_dir():
        mask_dir = root / f"masks_{downscale}"
    has_masks = mask_dir.is_dir()
    views = []
    for im in chosen:
        w2c = np.eye(4)
        w2c[:3, :3] = qvec_to_rotmat(im.qvec)
        w2c[:3, 3] = im.tvec
        mask = None
        if has_masks:
            mask = find_mask(mask_dir, im.name)
            if mask is None:
                raise DatasetError(f"[splat] {mask_dir}: no mask for {im.name} (looked for "
                                   f"{im.name}.png and {Path(im.name).with_suffix('.png')})")
        views.append(ViewSource(name=im.name, image_path=image_dir / im.name, lens=lenses[im.camera_id],
                                world_to_camera=w2c, mask_path=mask, prescaled=prescaled))
    bg = tuple(float(b) for b in background)
    loaded = load_views(views, downscale=downscale, background=bg, alpha_mode=alpha_mode,
                        keep_alpha=keep_alpha)
    return Dataset(cameras=loaded.cameras, images=loaded.images, names=[im.name for im in chosen],
                   points=points, point_colors=colors, background=bg, alphas=loaded.alphas,
                   masks=loaded.masks, path=str(root), format="colmap", split=split)
