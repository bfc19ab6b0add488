"""The image pipeline every loader shares: decode, downscale, mask, composite,
undistort and crop, one view at a time on a small thread pool.

For one view (float32 in [0, 1] between the steps):

1. decode the image (RGB or RGBA) and, when given, its mask file
   (grey levels >= 128 count; white = use, black = ignore; a mask whose
   values are only 0 and 1, 8- or 16-bit, is a label mask: 1 = use, with one
   warning per dataset);
2. box-average by the integer `downscale` (unless the file is already a
   downscaled copy), on straight RGBA as the released NeRF-synthetic
   low-resolution images were made; a downscaled pixel of a mask counts only
   when every pixel under it counted;
3. alpha: "composite" puts the RGB on the background (rgb a + bg (1 - a));
   "mask" keeps the colour (alpha-weighted average when downscaled) and lets a
   pixel count only where the coverage is >= 0.5 (transparent pixels are
   ignored, not painted with the background);
4. a distorted lens is resampled to the cropped pinhole camera of
   `lens.plan_undistortion` (no pixel of the result comes from outside the
   source); colour, alpha and mask go through the same resampling, and a mask
   pixel counts only when its four source taps all counted.

Masks that end up all-true are None (see `Dataset.masks`). Views whose mask
keeps no pixel are named in a warning (they add nothing to training), or in a
DatasetError when no view keeps a pixel.
"""
from __future__ import annotations

import contextlib
import contextvars
import mmap
import os
import threading
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..camera import Camera
from .dataset import DatasetError
from .images import LOAD_WORKERS, box_downscale, read_image, to_uint8
from .lens import Lens, plan_undistortion

ALPHA_MODES = ("composite", "mask")
MASK_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")

# A resampled or averaged mask value counts as "all taps counted" above this.
_MASK_FULL = 1.0 - 1e-4


@dataclass(frozen=True)
class ViewSource:
    """Where one view comes from.

    lens: the intrinsics for the full-resolution image; world_to_camera: 4x4
    (OpenCV axes); prescaled: `image_path` is an already downscaled copy (its
    intrinsics are the lens scaled by its actual size over the lens size).
    """

    name: str
    image_path: Path
    lens: Lens
    world_to_camera: np.ndarray
    mask_path: Path | None = None
    prescaled: bool = False


@dataclass
class LoadedViews:
    cameras: list
    images: list
    masks: list | None
    alphas: list | None


def read_mask(path) -> np.ndarray:
    """A mask file -> float32 [H, W] of 0 (ignore) and 1 (use)."""
    return _decode_mask(path)[0]


def _label_values(raw: np.ndarray) -> bool:
    """Whether integer samples are only 0 and 1, with at least one 1 (a label mask)."""
    return raw.dtype.kind in "ui" and raw.size > 0 and int(raw.max()) == 1 and int(raw.min()) >= 0


def _decode_mask(path) -> tuple[np.ndarray, bool]:
    """(float32 [H, W] of 0 and 1, whether the file is a 0/1 label mask)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DatasetError(f"[splat] {path}: mask file not found")
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info:
                # a mask drawn as transparency: opaque white counts
                rgba = np.asarray(im.convert("RGBA"), dtype=np.uint16)
                grey = (rgba[..., :3].mean(axis=2) * rgba[..., 3] / 255.0)
            elif im.mode in ("L", "RGB", "I;16", "I;16B", "I;16L", "I") and _label_values(raw := np.asarray(im)):
                # only 0 and 1: a label mask (1 = use), not a near-black grey one
                grey = raw.astype(np.float64).mean(axis=2) if raw.ndim == 3 else raw.astype(np.float64)
                return (grey >= 0.5).astype(np.float32), True
            elif im.mode in ("I;16", "I;16B", "I;16L", "I"):
                arr = np.asarray(im, dtype=np.float64)
                grey = arr / (65535.0 if arr.max(initial=0) > 255 else 255.0) * 255.0
            else:
                grey = np.asarray(im.convert("L"), dtype=np.float64)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DatasetError(f"[splat] {path}: cannot decode mask ({exc})") from None
    return (grey >= 128.0).astype(np.float32), False


def find_mask(mask_dir: Path, image_name: str) -> Path | None:
    """The mask of `image_name` in `mask_dir`: `<name>.png` or the name with its
    extension replaced by .png (or another image extension); None if absent."""
    rel = Path(image_name)
    cands = [mask_dir / (rel.as_posix() + ".png")]
    cands += [mask_dir / rel.with_suffix(ext) for ext in MASK_EXTENSIONS]
    cands.append(mask_dir / rel)
    for c in cands:
        if c.is_file():
            return c
    return None


def _fit_mask(mask: np.ndarray, shape, path, image_path) -> np.ndarray:
    """A mask at the image's size, or at an integer multiple of it (box, all-or-nothing)."""
    h, w = shape
    mh, mw = mask.shape
    if (mh, mw) == (h, w):
        return mask
    fy, fx = mh / h, mw / w
    f = int(round(fx))
    if f >= 2 and abs(fx - f) * w <= f and abs(fy - f) * h <= f:
        small = box_downscale(mask[: h * f, : w * f], f)
        if small.shape == (h, w):
            return (small >= _MASK_FULL).astype(np.float32)
    raise DatasetError(f"[splat] {path}: mask is {mw}x{mh} but its image {image_path} is {w}x{h}")


def _prepare(raw: np.ndarray, mask: np.ndarray | None, factor: int, background, alpha_mode: str):
    """Steps 2-3 of the module doc: (rgb float [h,w,3], alpha float [h,w] | None,
    mask float [h,w] | None)."""
    inv = np.float32(1.0 / 255.0)
    if raw.shape[2] == 3:
        rgb = box_downscale(raw, factor) * inv
        a = None
    else:
        x = raw.astype(np.float32) * inv
        straight, cov = x[..., :3], x[..., 3]
        a = box_downscale(cov, factor)
        if alpha_mode == "mask":
            pre = box_downscale(straight * cov[..., None], factor)
            safe = np.where(a > 0, a, 1.0)[..., None]
            rgb = np.where(a[..., None] > 0, pre / safe, np.asarray(background, np.float32))
        else:
            rgb = box_downscale(straight, factor) * a[..., None] + \
                np.asarray(background, np.float32) * (np.float32(1.0) - a[..., None])
    if mask is not None and factor > 1:
        mask = (box_downscale(mask, factor) >= _MASK_FULL).astype(np.float32)
    if alpha_mode == "mask" and a is not None:
        cover = (a >= 0.5).astype(np.float32)
        mask = cover if mask is None else np.minimum(mask, cover)
    return rgb.astype(np.float32, copy=False), a, mask


# Set by headers_only(): load_views reads the image headers and raises HeaderSizes.
_HEADERS_ONLY = contextvars.ContextVar("splat_headers_only", default=False)


class HeaderSizes(Exception):
    """What load_views raises under headers_only() instead of decoding: `sizes`, the
    (width, height, may_have_mask) every view would load at, and `poses`, each view's
    4x4 world-to-camera."""

    def __init__(self, sizes: list, poses: list):
        super().__init__("view sizes from the image headers")
        self.sizes = sizes
        self.poses = poses


@contextlib.contextmanager
def headers_only():
    """Within it, a loader stops at load_views with HeaderSizes (nothing decoded)."""
    token = _HEADERS_ONLY.set(True)
    try:
        yield
    finally:
        _HEADERS_ONLY.reset(token)


def _header(path: Path) -> tuple[int, int, bool]:
    """(width, height, has alpha) of an image from its header; decoded only when
    Pillow cannot read the header (some TIFFs)."""
    try:
        with Image.open(path) as im:
            alpha = im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info
            return im.size[0], im.size[1], alpha
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raw = read_image(path)   # its error names the file
        return raw.shape[1], raw.shape[0], raw.shape[2] == 4


def _header_sizes(views: list, downscale: int, alpha_mode: str) -> list:
    """(width, height, may_have_mask) of every view as load_one would load it."""
    out, plans = [], {}
    for v in views:
        rw, rh, alpha = _header(v.image_path)
        full = v.lens
        if v.prescaled:
            lens = full.scaled(rw / full.width, rh / full.height, rw, rh)
        else:
            if (rw, rh) != (full.width, full.height):
                raise DatasetError(f"[splat] {v.image_path}: image is {rw}x{rh} but its camera is "
                                   f"{full.width}x{full.height}")
            w, h = rw // downscale, rh // downscale
            if w == 0 or h == 0:
                raise DatasetError(f"[splat] {v.image_path}: downscale {downscale} is larger than the "
                                   f"image ({rw}x{rh})")
            lens = full.scaled(1.0 / downscale, 1.0 / downscale, w, h)
        w, h = lens.width, lens.height
        if not lens.is_pinhole:
            if lens not in plans:
                plans[lens] = plan_undistortion(lens)
            w, h = plans[lens].width, plans[lens].height
        out.append((w, h, v.mask_path is not None or (alpha and alpha_mode == "mask")))
    return out


def own_pages(a: np.ndarray) -> np.ndarray:
    """`a` copied (C-contiguous) into an anonymous memory mapping of its own, given back
    to the system as soon as the array is dropped (Dataset.release_images): a block
    from malloc may stay in the allocator's heap, between the decode's temporaries."""
    if a.nbytes < (1 << 16):
        return np.ascontiguousarray(a)
    try:
        pages = mmap.mmap(-1, a.nbytes)
    except OSError:   # out of mappings (vm.max_map_count): the allocator's memory then
        return np.ascontiguousarray(a)
    out = np.frombuffer(pages, dtype=a.dtype, count=a.size).reshape(a.shape)
    out[...] = a
    return out


def load_views(views: list, *, downscale: int = 1, background=(0.0, 0.0, 0.0),
               alpha_mode: str = "composite", keep_alpha: bool = False,
               workers: int = LOAD_WORKERS) -> LoadedViews:
    """Load every view (see the module doc); errors name the file."""
    if alpha_mode not in ALPHA_MODES:
        raise ValueError(f"[splat] alpha: expected one of {', '.join(ALPHA_MODES)}, got {alpha_mode!r}")
    if _HEADERS_ONLY.get():
        raise HeaderSizes(_header_sizes(views, downscale, alpha_mode), [v.world_to_camera for v in views])
    bg = tuple(float(b) for b in background)
    n = len(views)
    cameras: list = [None] * n
    images: list = [None] * n
    masks: list = [None] * n
    alphas: list = [None] * n
    labelled: list = [False] * n     # the view's mask file is a 0/1 label mask
    empty: list = [False] * n        # the view's mask keeps no pixel
    # One plan per camera, shared by its views and dropped after its last one
    # (captures with a camera per image would otherwise hold a plan per image).
    plans: dict = {}
    uses = Counter((v.lens, v.prescaled) for v in views)
    plans_lock = threading.Lock()

    def plan_for(key, lens: Lens):
        with plans_lock:
            plan = plans.get(key)
        if plan is None or plan.source_size != (lens.width, lens.height) or \
                plan.intrinsics_source != lens.intrinsics:
            plan = plan_undistortion(lens)
        with plans_lock:
            uses[key] -= 1
            if uses[key] > 0:
                plans[key] = plan
            else:
                plans.pop(key, None)
        return plan

    def load_one(i: int):
        v = views[i]
        raw = read_image(v.image_path)
        rh, rw = raw.shape[:2]
        full = v.lens
        if v.prescaled:
            if abs(rw - full.width / downscale) > 1.0 or abs(rh - full.height / downscale) > 1.0:
                raise DatasetError(f"[splat] {v.image_path}: image is {rw}x{rh}, expected about "
                                   f"{full.width}/{downscale} x {full.height}/{downscale}")
            factor = 1
            lens = full.scaled(rw / full.width, rh / full.height, rw, rh)
        else:
            if (rw, rh) != (full.width, full.height):
                raise DatasetError(f"[splat] {v.image_path}: image is {rw}x{rh} but its camera is "
                                   f"{full.width}x{full.height}")
            factor = downscale
            w, h = rw // factor, rh // factor
            if w == 0 or h == 0:
                raise DatasetError(f"[splat] {v.image_path}: downscale {factor} is larger than the "
                                   f"image ({rw}x{rh})")
            lens = full.scaled(1.0 / factor, 1.0 / factor, w, h)
        mask = None
        if v.mask_path is not None:
            decoded, labelled[i] = _decode_mask(v.mask_path)
            mask = _fit_mask(decoded, (rh, rw), v.mask_path, v.image_path)
        rgb, a, mask = _prepare(raw, mask, factor, bg, alpha_mode)
        intr = lens.intrinsics
        if not lens.is_pinhole:
            plan = plan_for((v.lens, v.prescaled), lens)
            chans = [rgb] + ([a[..., None]] if a is not None else []) + \
                ([mask[..., None]] if mask is not None else [])
            out = plan.apply(np.concatenate(chans, axis=2) if len(chans) > 1 else rgb)
            rgb = out[..., :3]
            k = 3
            if a is not None:
                a, k = out[..., k], k + 1
            if mask is not None:
                mask = (out[..., k] >= _MASK_FULL).astype(np.float32)
            intr = plan.intrinsics
        h, w = rgb.shape[:2]
        images[i] = own_pages(to_uint8(rgb * np.float32(255.0)))
        if keep_alpha:
            alphas[i] = np.full((h, w), 255, np.uint8) if a is None else to_uint8(a * np.float32(255.0))
        if mask is not None:
            m = mask >= 0.5
            masks[i] = None if m.all() else own_pages(m)
            empty[i] = not m.any()
        fx, fy, cx, cy = intr
        cameras[i] = Camera(np.asarray(v.world_to_camera, np.float32), fx, fy, cx, cy, w, h)

    if n:
        load_one(0)     # the first error comes from the first file, and the plan cache is warm
    if n > 1:
        if workers <= 1:
            for i in range(1, n):
                load_one(i)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(load_one, i) for i in range(1, n)]
                errors = [f.exception() for f in futures if f.exception() is not None]
                if errors:
                    raise errors[0]
    _report_masks(views, labelled, empty)
    any_mask = any(m is not None for m in masks)
    return LoadedViews(cameras=cameras, images=images, masks=masks if any_mask else None,
                       alphas=alphas if keep_alpha else None)


def _listed(names: list, shown: int = 6) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _report_masks(views: list, labelled: list, empty: list) -> None:
    """One warning for the 0/1 label masks of a dataset (the same text for each of its
    splits, so it is shown once); one naming the views whose mask keeps no pixel, or
    a DatasetError when that is every view."""
    if any(labelled):
        first = next(v for v, lab in zip(views, labelled) if lab)
        warnings.warn(f"[splat] {first.mask_path.parent}: masks holding only the values 0 and 1 are read as "
                      f"label masks (1 = use, 0 = ignore)", stacklevel=4)
    if not any(empty):
        return
    gone = [v for v, e in zip(views, empty) if e]
    first = gone[0]
    where = first.mask_path.parent if first.mask_path is not None else first.image_path.parent
    what = "masks" if first.mask_path is not None else "alpha masks (alpha = \"mask\")"
    names = _listed([v.name for v in gone])
    if len(gone) == len(views):
        raise DatasetError(f"[splat] {where}: the {what} keep no pixel of any view ({names}): nothing to "
                           f"train or evaluate on (a mask is white, or 1 in a 0/1 label mask, where a "
                           f"pixel counts)")
    warnings.warn(f"[splat] {where}: the {what} of {len(gone)} of {len(views)} views ({names}) keep no pixel; "
                  f"those views add nothing to training or evaluation", stacklevel=4)
