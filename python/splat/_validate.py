"""Argument checking shared by the Python surface: one rule for numbers.

Arrays: anything numpy reads as a real numeric array (Python numbers and
sequences, float64 / float16 / integer arrays, array-likes such as CPU torch
tensors) is converted to C-contiguous float32, rounding to nearest; a float32
C-contiguous array passes through uncopied. Rounding is not an error. What
is rejected, with the argument named: non-numeric element types (bool, str,
bytes, object, complex, dates), a wrong shape, and non-finite values
(including finite float64 values beyond the float32 range, which would
become Inf).

Scalars: a real number is a Python int or float, a numpy integer or floating
scalar, or a 0-d real array (a torch scalar tensor); bool, str, complex and
None are not. An integer argument takes any real number with an integral
value (64, 64.0, np.int64(64), np.float32(64)); a fractional value (64.5) is
a ValueError, not silently truncated. Float arguments that reach the native
core as float32 must be finite in float32.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

UINT32_MAX = 2 ** 32 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array of dtype {value.dtype}"
    return type(value).__name__


def real_array(name: str, value, shape: tuple | None = None) -> np.ndarray:
    """`value` as a numpy array of a real numeric dtype (not converted), its
    shape checked; TypeError / ValueError naming `name` otherwise."""
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (str, bytes)):
        raise TypeError(f"[splat] {name}: expected a numeric array, got {type(value).__name__}")
    else:
        try:
            arr = np.asarray(value)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"[splat] {name}: cannot be read as an array ({' '.join(str(exc).split())})") from None
    kind = arr.dtype.kind
    if kind == "O":  # e.g. Python ints beyond int64: convert only if every element is a real number
        if not all(isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) for x in arr.flat):
            raise TypeError(f"[splat] {name}: expected a numeric array, got non-numeric elements "
                            f"(dtype object)")
        arr = np.array([_to_float(x) for x in arr.flat], dtype=np.float64).reshape(arr.shape)
        kind = "f"
    if kind not in "fiu":
        what = {"b": "bool", "c": "complex", "U": "str", "S": "bytes", "M": "datetime",
                "m": "timedelta", "V": "structured"}.get(kind, str(arr.dtype))
        raise TypeError(f"[splat] {name}: expected a real numeric array, got {what} (dtype {arr.dtype})")
    if shape is not None:
        ok = arr.ndim == len(shape) and all(s is None or s == d for s, d in zip(shape, arr.shape))
        if not ok:
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"[splat] {name}: expected shape {want}, got {list(arr.shape)}")
    return arr


def _to_float(x) -> float:
    try:
        return float(x)
    except OverflowError:  # an int beyond float64: Inf, which the finiteness check reports
        return math.inf if x > 0 else -math.inf


def as_float32(name: str, value, shape: tuple | None = None, *, finite: bool = True) -> np.ndarray:
    """Return `value` as a C-contiguous float32 array, or raise naming `name`.

    `shape` entries may be None (any length). Real numeric input of any
    dtype is rounded to float32; see the module docstring for what is
    rejected. `finite=False` lets NaN / Inf through (values beyond the float32
    range still become Inf then).
    """
    arr = real_array(name, value, shape)
    if arr.dtype == np.float32:
        out = np.ascontiguousarray(arr)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.ascontiguousarray(arr, dtype=np.float32)
    if finite and out.size and not np.all(np.isfinite(out)):
        bad = int(np.count_nonzero(~np.isfinite(out)))
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)):
            raise ValueError(f"[splat] {name}: {bad} value(s) beyond the float32 range "
                             f"(|x| > {FLOAT32_MAX:.4g})")
        raise ValueError(f"[splat] {name}: contains {bad} NaN or Inf value(s)")
    return out


def real_scalar(name: str, value) -> int | float:
    """A real number as a Python int or float (the one scalar rule), else TypeError naming `name`."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"[splat] {name}: expected a number, got bool")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, numbers.Real):  # fractions.Fraction and other registered reals
        return float(value)
    if value is None or isinstance(value, (str, bytes, complex, np.complexfloating, list, tuple, dict)):
        raise TypeError(f"[splat] {name}: expected a number, got {_describe(value)}")
    try:  # 0-d arrays and array-likes such as torch scalar tensors
        arr = np.asarray(value)
    except Exception:
        arr = None
    if arr is None or arr.ndim != 0 or arr.dtype.kind not in "fiu":
        raise TypeError(f"[splat] {name}: expected a number, got {_describe(value)}")
    return arr.item()


def finite_float(name: str, value) -> float:
    """A real number, finite as float32 (what the native core receives)."""
    v = float(real_scalar(name, value))
    if not np.isfinite(v):
        raise ValueError(f"[splat] {name}: must be finite, got {value!r}")
    if abs(v) > FLOAT32_MAX:
        raise ValueError(f"[splat] {name}: {value!r} is beyond the float32 range (|x| <= {FLOAT32_MAX:.4g})")
    return v


def positive_float(name: str, value) -> float:
    v = finite_float(name, value)
    if v <= 0 or np.float32(v) == 0:
        raise ValueError(f"[splat] {name}: must be a positive finite number, got {value!r}")
    return v


def integer(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """A real number with an integral value, as an int in [lo, hi]."""
    v = real_scalar(name, value)
    if isinstance(v, float):
        if not np.isfinite(v) or v != int(v):
            raise ValueError(f"[splat] {name}: expected an integer, got {value!r}")
        v = int(v)
    if lo is not None and v < lo:
        raise ValueError(f"[splat] {name}: must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"[splat] {name}: must be <= {hi}, got {v}")
    return v


def positive_int(name: str, value, hi: int = UINT32_MAX) -> int:
    v = integer(name, value, hi=hi)
    if v <= 0:
        raise ValueError(f"[splat] {name}: must be positive, got {v}")
    return v


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
