"""Argument checking shared by the Python surface.

Every public entry point converts its numpy inputs here: float32 C-contiguous
arrays pass through untouched, anything that converts losslessly (a
non-contiguous float32 view, a float16 array, an integer array whose values a
float32 holds exactly) is copied, and everything else raises an error that
names the argument.
"""
from __future__ import annotations

import numpy as np

_LOSSLESS_TO_F32 = (np.float16, np.float32, np.int8, np.uint8, np.int16, np.uint16, np.bool_)


def as_float32(name: str, value, shape: tuple | None = None, *, finite: bool = True) -> np.ndarray:
    """Return `value` as a C-contiguous float32 array, or raise naming `name`.

    `shape` entries may be None (any length). Conversion is allowed only when
    it cannot change a value; float64 is accepted when every element
    round-trips through float32 exactly.
    """
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"[splat] {name}: cannot be read as an array ({exc})") from None
    if arr.dtype == np.float32:
        out = np.ascontiguousarray(arr)
    elif arr.dtype.type in _LOSSLESS_TO_F32:
        out = np.ascontiguousarray(arr, dtype=np.float32)
    elif arr.dtype.kind in "fiu":
        out = np.ascontiguousarray(arr, dtype=np.float32)
        with np.errstate(invalid="ignore"):
            back = out.astype(arr.dtype)
        same = (back == arr) | (np.isnan(arr) & np.isnan(out)) if arr.dtype.kind == "f" else back == arr
        if not np.all(same):
            raise TypeError(
                f"[splat] {name}: dtype {arr.dtype} cannot be converted to float32 without loss; "
                f"pass float32"
            )
    else:
        raise TypeError(f"[splat] {name}: expected a float32 array, got dtype {arr.dtype}")
    if shape is not None:
        ok = out.ndim == len(shape) and all(s is None or s == d for s, d in zip(shape, out.shape))
        if not ok:
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"[splat] {name}: expected shape {want}, got {list(out.shape)}")
    if finite and out.size and not np.all(np.isfinite(out)):
        bad = int(np.count_nonzero(~np.isfinite(out)))
        raise ValueError(f"[splat] {name}: contains {bad} NaN or Inf value(s)")
    return out


def positive_float(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"[splat] {name}: expected a number, got {type(value).__name__}") from None
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"[splat] {name}: must be a positive finite number, got {value!r}")
    return v


def finite_float(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"[splat] {name}: expected a number, got {type(value).__name__}") from None
    if not np.isfinite(v):
        raise ValueError(f"[splat] {name}: must be finite, got {value!r}")
    return v


def positive_int(name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"[splat] {name}: expected an integer, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"[splat] {name}: must be positive, got {value}")
    return int(value)


def backend_config(name: str, value):
    """A splat.BackendConfig from None (defaults), a dict (a TOML [backend] table) or itself."""
    from ._backend_notice import warn_auto_fallback
    from ._core import BackendConfig
    if value is None:
        value = BackendConfig()
    elif isinstance(value, dict):
        value = BackendConfig(value)
    elif not isinstance(value, BackendConfig):
        raise TypeError(f"[splat] {name}: expected a BackendConfig, got {type(value).__name__}")
    warn_auto_fallback(value.backend, stacklevel=3)   # the caller's caller: user code
    return value
