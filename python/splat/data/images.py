"""Image decoding, box downscaling, compositing and parallel loading.

Pipeline for one image (all in float32 in [0, 1] unless nothing changes):
decode with Pillow -> box-average by the integer `downscale` (on the stored
straight RGBA values, before compositing: this reproduces the released
lego_400 images from the 800x800 originals) -> composite
rgb * a + bg * (1 - a) -> round to uint8.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from .dataset import DatasetError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")

# Decoding releases the GIL, so a couple of threads overlap file reads and decoding.
LOAD_WORKERS = max(1, min(2, os.cpu_count() or 1))


def read_image(path) -> np.ndarray:
    """Decode an image file into uint8 [H,W,3] (opaque) or [H,W,4] (with alpha)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DatasetError(f"[splat] {path}: image file not found")
    try:
        with Image.open(path) as im:
            im.load()
            mode = im.mode
            has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info
            if mode in ("I;16", "I;16B", "I;16L", "I"):
                arr = np.asarray(im, dtype=np.float64)
                peak = 65535.0 if arr.max(initial=0) > 255 else 255.0
                gray = np.clip(np.rint(arr / peak * 255.0), 0, 255).astype(np.uint8)
                return np.repeat(gray[..., None], 3, axis=2)
            if mode == "RGBA":
                arr = np.asarray(im)
            elif mode == "RGB":
                arr = np.asarray(im)
            else:
                arr = np.asarray(im.convert("RGBA" if has_alpha else "RGB"))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DatasetError(f"[splat] {path}: cannot decode image ({exc})") from None
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.dtype != np.uint8:
        raise DatasetError(f"[splat] {path}: unsupported image layout {arr.dtype} {list(arr.shape)}")
    return np.ascontiguousarray(arr)


def box_downscale(img: np.ndarray, factor: int) -> np.ndarray:
    """Average `factor` x `factor` blocks (float32 result). Rows/columns that do
    not fill a whole block at the bottom/right edge are dropped."""
    if factor == 1:
        return img.astype(np.float32, copy=False)
    h, w = img.shape[0] // factor, img.shape[1] // factor
    if h == 0 or w == 0:
        raise ValueError(f"[splat] downscale: factor {factor} is larger than the image "
                         f"({img.shape[1]}x{img.shape[0]})")
    crop = img[: h * factor, : w * factor].astype(np.float32)
    return crop.reshape(h, factor, w, factor, *img.shape[2:]).mean(axis=(1, 3), dtype=np.float32)


def to_uint8(x: np.ndarray) -> np.ndarray:
    """float in [0, 255] -> uint8 with round-half-to-even and clamping."""
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def prepare_image(raw: np.ndarray, factor: int, background) -> tuple[np.ndarray, np.ndarray | None]:
    """Downscale (box average) and composite a decoded image.

    Returns (rgb float32 [h,w,3] in [0,1] or uint8 if untouched, alpha float32 [h,w] in [0,1]
    or None for opaque images). The caller decides when to round.
    """
    if raw.shape[2] == 3:
        if factor == 1:
            return raw, None
        return box_downscale(raw, factor) * np.float32(1.0 / 255.0), None
    x = box_downscale(raw, factor) * np.float32(1.0 / 255.0)
    rgb, a = x[..., :3], x[..., 3:]
    bg = np.asarray(background, dtype=np.float32)
    out = rgb * a + bg * (np.float32(1.0) - a)
    return out, a[..., 0]


def finish_rgb(rgb: np.ndarray) -> np.ndarray:
    """rgb from prepare_image (uint8 or float [0,1]) -> uint8."""
    if rgb.dtype == np.uint8:
        return rgb
    return to_uint8(rgb * np.float32(255.0))


def load_all(paths: Sequence, load_one: Callable, *, keep_alpha: bool = False,
             workers: int = LOAD_WORKERS):
    """Run `load_one(i, path) -> (rgb uint8 [h,w,3], alpha uint8 [h,w] | None)` over
    `paths` on a small thread pool, writing into one preallocated [V,h,w,3] array.

    Every image must have the size of the first one (else DatasetError naming
    the file). Returns (images, alphas or None).
    """
    paths = list(paths)
    first_rgb, first_a = load_one(0, paths[0])
    h, w = first_rgb.shape[:2]
    images = np.empty((len(paths), h, w, 3), dtype=np.uint8)
    alphas = np.empty((len(paths), h, w), dtype=np.uint8) if keep_alpha else None

    def store(i, rgb, a):
        if rgb.shape != (h, w, 3):
            raise DatasetError(f"[splat] {os.fspath(paths[i])}: image is {rgb.shape[1]}x{rgb.shape[0]} "
                               f"but {os.fspath(paths[0])} is {w}x{h}; all images of a split must "
                               f"share one size")
        images[i] = rgb
        if alphas is not None:
            alphas[i] = 255 if a is None else a

    store(0, first_rgb, first_a)

    def job(i):
        rgb, a = load_one(i, paths[i])
        store(i, rgb, a)

    if len(paths) > 1:
        if workers <= 1:
            for i in range(1, len(paths)):
                job(i)
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(job, i) for i in range(1, len(paths))]
                errors = []
                for fut in futures:
                    exc = fut.exception()
                    if exc is not None:
                        errors.append(exc)
                if errors:
                    raise errors[0]
    return images, alphas
