"""Image decoding and box downscaling (the per-view pipeline is splat.data.views)."""
from __future__ import annotations

import os

import numpy as np
from PIL import Image, UnidentifiedImageError

from .dataset import DatasetError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")

# Decoding and the numpy resampling release the GIL: threads overlap them (up to 8).
LOAD_WORKERS = max(1, min(8, os.cpu_count() or 1))


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
