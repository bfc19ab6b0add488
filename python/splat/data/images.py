"""Image decoding and box downscaling (the per-view pipeline is splat.data.views).

Decoding (Pillow; tifffile for TIFFs where installed) gives the 0..255 scale:
uint8 for 8-bit sources, float32 for 16-bit and float ones, scaled by the
format's range (65535 for 16-bit, [0, 1] for float), never by the data.
"""
from __future__ import annotations

import os

import numpy as np
from PIL import Image

from .dataset import DatasetError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")

# Decoding and the numpy resampling release the GIL: threads overlap them (up to 8).
LOAD_WORKERS = max(1, min(8, os.cpu_count() or 1))


# Pillow modes decoded through Image.convert (8 bits a channel, or fewer that
# Pillow scales to 0..255: bilevel, 2- and 4-bit grey, palettes).
_CONVERTED_MODES = ("1", "L", "P", "RGB", "RGBA", "RGBX", "RGBa", "LA", "La", "PA", "CMYK", "YCbCr", "HSV")
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
# 16-bit PNG colour: Pillow keeps the high byte of each sample; decoding the
# same stream through the little-endian unpacker yields the low bytes.
_PNG16_LOW_BYTES = {"RGB;16B": "RGB;16L", "RGBA;16B": "RGBA;16L"}
_GRAY16_RAW = ("I;16", "I;16B", "I;16L", "I;16N")
_TIFF_EXTENSIONS = (".tif", ".tiff")
SCALE_16BIT = 255.0 / 65535.0


def read_image(path) -> np.ndarray:
    """Decode an image file into [H,W,3] (opaque) or [H,W,4] (with alpha) on the
    0..255 scale: uint8 for 8-bit sources, float32 for deeper ones.

    The scale is the format's, never the data's: 16-bit samples are v * 255 /
    65535; float samples (TIFF) must lie in [0, 1] and are v * 255. Anything
    else (32-bit integer pixels, LAB, values outside [0, 1]) is a DatasetError
    naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DatasetError(f"[splat] {path}: image file not found")
    try:
        if path.lower().endswith(_TIFF_EXTENSIONS):
            arr = _read_tiff(path)
            if arr is not None:
                return arr
        arr = _read_pillow(path)
    except DatasetError:
        raise
    except MemoryError:
        raise DatasetError(f"[splat] {path}: not enough memory to decode the image") from None
    except Exception as exc:  # Pillow raises many types on corrupt files; all mean: cannot decode
        reason = " ".join(str(exc).split()) or type(exc).__name__
        hint = ("; float and multi-sample TIFFs need tifffile (pip install tifffile)"
                if path.lower().endswith(_TIFF_EXTENSIONS) else "")
        raise DatasetError(f"[splat] {path}: cannot decode image ({reason}){hint}") from None
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.dtype not in (np.uint8, np.float32):
        raise DatasetError(f"[splat] {path}: unsupported image layout {arr.dtype} {list(arr.shape)}")
    return np.ascontiguousarray(arr)


def _tile_rawmode(im) -> str | None:
    if not getattr(im, "tile", None):
        return None
    args = im.tile[0][3]
    rawmode = args[0] if isinstance(args, tuple) and args else args
    return rawmode if isinstance(rawmode, str) else None


def _with_rawmode(im, rawmode: str) -> None:
    t = im.tile[0]
    args = t[3]
    args = (rawmode,) + tuple(args[1:]) if isinstance(args, tuple) else rawmode
    im.tile = [t._replace(args=args) if hasattr(t, "_replace") else (t[0], t[1], t[2], args)]


def _gray_to_rgb(gray: np.ndarray, alpha: np.ndarray | None = None) -> np.ndarray:
    planes = [gray] * 3 + ([] if alpha is None else [alpha])
    return np.stack(planes, axis=2)


def _read_pillow(path: str) -> np.ndarray:
    with Image.open(path) as im:
        mode, rawmode = im.mode, _tile_rawmode(im)
        info = dict(im.info)
        if im.format == "PNG" and rawmode in _PNG16_LOW_BYTES:
            high = np.asarray(im).astype(np.uint16)
            with Image.open(path) as again:
                _with_rawmode(again, _PNG16_LOW_BYTES[rawmode])
                low = np.asarray(again).astype(np.uint16)
            v = (high << 8) | low
            if mode == "RGB" and isinstance(info.get("transparency"), tuple):
                key = np.asarray(info["transparency"], dtype=np.uint16)
                a = np.where(np.all(v == key, axis=2), 0, 65535).astype(np.uint16)
                v = np.concatenate([v, a[..., None]], axis=2)
            return v.astype(np.float32) * np.float32(SCALE_16BIT)
        if im.format == "PNG" and rawmode == "LA;16B":
            # 16-bit grey + alpha: 4 bytes a pixel, read as 8-bit RGBA = (L hi, L lo, A hi, A lo).
            _with_rawmode(im, "RGBA")
            b = np.asarray(im).astype(np.uint16)
            gray = (b[..., 0] << 8) | b[..., 1]
            alpha = (b[..., 2] << 8) | b[..., 3]
            return _gray_to_rgb(gray, alpha).astype(np.float32) * np.float32(SCALE_16BIT)
        if mode in ("RGB", "RGBA") and rawmode and ";16" in rawmode:  # Pillow would keep the high bytes
            raise DatasetError(f"[splat] {path}: 16-bit colour {im.format} images need tifffile "
                               f"(pip install tifffile)")
        if mode in _GRAY16_RAW or (mode == "I" and rawmode in _GRAY16_RAW):
            gray = np.asarray(im).astype(np.uint16)
            alpha = None
            if isinstance(info.get("transparency"), int):
                alpha = np.where(gray == info["transparency"], 0, 65535).astype(np.uint16)
            return _gray_to_rgb(gray, alpha).astype(np.float32) * np.float32(SCALE_16BIT)
        if mode == "F":
            return _gray_to_rgb(_unit_float(path, np.asarray(im))) * np.float32(255.0)
        if mode not in _CONVERTED_MODES:
            raise DatasetError(f"[splat] {path}: unsupported image mode {mode!r} (splat reads 1-, 8- and "
                               f"16-bit grey / RGB(A) / palette images and float images in [0, 1])")
        has_alpha = mode in _ALPHA_MODES or "transparency" in info
        if mode in ("RGB", "RGBA") and (mode == "RGBA") == has_alpha:
            return np.asarray(im)
        return np.asarray(im.convert("RGBA" if has_alpha else "RGB"))


def _unit_float(path: str, arr: np.ndarray) -> np.ndarray:
    """Float samples as float32, checked to be finite and in [0, 1]."""
    arr = np.asarray(arr, dtype=np.float32)
    if not np.all(np.isfinite(arr)):
        raise DatasetError(f"[splat] {path}: float image has NaN or Inf samples")
    lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
    if lo < 0.0 or hi > 1.0:
        raise DatasetError(f"[splat] {path}: float image samples must lie in [0, 1], found "
                           f"[{lo:.6g}, {hi:.6g}]")
    return arr


def _read_tiff(path: str) -> np.ndarray | None:
    """A grey or RGB TIFF through tifffile (exact 16-bit and float samples);
    None (Pillow decides) without tifffile or for other photometric kinds
    (palette, min-is-white, CIELAB, YCbCr, ...)."""
    try:
        import tifffile
    except ImportError:
        return None
    with tifffile.TiffFile(path) as tf:
        page = tf.pages[0]
        if int(page.photometric) not in (1, 2):  # MINISBLACK, RGB
            return None
        arr = page.asarray()
        axes = page.axes
        extra = tuple(int(e) for e in getattr(page, "extrasamples", ()) or ())
    if axes == "SYX":
        arr = np.moveaxis(arr, 0, -1)
    elif axes == "YX":
        arr = arr[..., None]
    elif axes != "YXS":
        raise DatasetError(f"[splat] {path}: unsupported TIFF layout {axes} {list(arr.shape)}")
    if arr.shape[2] not in (1, 2, 3, 4) or len(extra) > 1:
        raise DatasetError(f"[splat] {path}: unsupported TIFF layout: {arr.shape[2]} samples per pixel "
                           f"(expected grey, grey + alpha, RGB or RGBA)")
    if arr.dtype == np.uint8:
        x = arr
    elif arr.dtype == np.uint16:
        x = arr.astype(np.float32) * np.float32(SCALE_16BIT)
    elif arr.dtype.kind == "f":
        x = _unit_float(path, arr) * np.float32(255.0)
    elif arr.dtype == np.bool_:
        x = arr.astype(np.uint8) * np.uint8(255)
    else:
        raise DatasetError(f"[splat] {path}: unsupported TIFF sample type {arr.dtype} (splat reads 1-, 8- and "
                           f"16-bit unsigned integer and float samples)")
    if extra == (1,) and x.shape[2] in (2, 4):  # associated (premultiplied) alpha -> straight
        xf = x.astype(np.float32)
        a = xf[..., -1:]
        xf[..., :-1] = np.where(a > 0, np.minimum(xf[..., :-1] * np.float32(255.0) / np.maximum(a, 1e-12), 255.0), 0.0)
        x = xf
    if x.shape[2] in (1, 2):  # grey (+ alpha) -> RGB (+ alpha)
        x = np.concatenate([x[..., :1]] * 3 + ([x[..., 1:2]] if x.shape[2] == 2 else []), axis=2)
    return np.ascontiguousarray(x)


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
