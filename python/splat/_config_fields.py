"""The field machinery of the run configuration (splat/config.py): field specs with
their kinds and ranges, the one coercion rule for numbers, and the `_Section` base that
checks every value at construction and lists every problem."""
from __future__ import annotations

import difflib
import math
import os
import struct
from dataclasses import MISSING, field, fields
from typing import ClassVar

from ._validate import FLOAT32_MAX, real_scalar


class ConfigError(ValueError):
    """One or more configuration errors; `.errors` lists them as 'section.key: message'."""

    def __init__(self, errors: list[str], source: str | None = None):
        self.errors = list(errors)
        where = f"{source}: " if source else ""
        if len(self.errors) == 1:
            msg = f"[splat] {where}{self.errors[0]}"
        else:
            msg = f"[splat] {where}{len(self.errors)} configuration errors:\n" + "\n".join(
                f"  {e}" for e in self.errors)
        super().__init__(msg)


# --------------------------------------------------------------------------- field specs


def _f(default, kind: str, *, lo=None, hi=None, lo_open=False, hi_open=False, choices=None, doc=""):
    """A config field: `kind` is int, float, bool, str, ints, color, optcolor (a colour or
    None), frames or optpath."""
    meta = {"kind": kind, "lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open,
            "choices": choices, "doc": doc}
    if isinstance(default, list):
        return field(default_factory=lambda d=default: list(d), metadata=meta)
    return field(default=default, metadata=meta)


def _printable(name) -> str:
    """A key as it can be shown on one line (control or separator characters quoted)."""
    name = str(name)
    return name if name.isprintable() and name.strip() == name and name else repr(name)


def _type_name(v) -> str:
    return type(v).__name__


def _as_number(v):
    """v as a Python int or float under the package's one scalar rule
    (splat._validate.real_scalar: bool, str and the like are not numbers), or None."""
    try:
        return real_scalar("value", v)
    except TypeError:
        return None


def _as_int(v):
    """v as an int when it is a number with an integral value (3, 3.0, numpy integers), else None."""
    n = _as_number(v)
    if isinstance(n, float):
        return int(n) if math.isfinite(n) and n == int(n) else None
    return n


def _is_int(v) -> bool:
    return _as_int(v) is not None


def _is_num(v) -> bool:
    return _as_number(v) is not None


def _range_error(meta, v) -> str | None:
    lo, hi = meta["lo"], meta["hi"]
    if lo is not None and (v <= lo if meta["lo_open"] else v < lo):
        op = ">" if meta["lo_open"] else ">="
        if hi is not None:
            return f"must be in {'(' if meta['lo_open'] else '['}{lo}, {hi}{')' if meta['hi_open'] else ']'}, got {v!r}"
        return f"must be {op} {lo}, got {v!r}"
    if hi is not None and (v >= hi if meta["hi_open"] else v > hi):
        if lo is not None:
            return f"must be in {'(' if meta['lo_open'] else '['}{lo}, {hi}{')' if meta['hi_open'] else ']'}, got {v!r}"
        return f"must be {'<' if meta['hi_open'] else '<='} {hi}, got {v!r}"
    return None


def _coerce(meta, v):
    """(value, error message or None) for one field value."""
    kind = meta["kind"]
    if kind == "int":
        n = _as_int(v)
        if n is None:
            return v, f"expected an integer, got {_type_name(v)} {v!r}"
        return n, _range_error(meta, n)
    if kind == "float":
        n = _as_number(v)
        if n is None:
            return v, f"expected a number, got {_type_name(v)} {v!r}"
        v = float(n)
        if not math.isfinite(v):
            return v, f"must be finite, got {v!r}"
        err = _range_error(meta, v)
        if err:
            return v, err
        # The native core holds these as float32: beyond its range a value
        # becomes Inf, and a tiny one can round onto an open bound (0 or 1).
        if abs(v) > FLOAT32_MAX:
            return v, f"{v!r} is beyond the float32 range (|x| <= {FLOAT32_MAX:.4g})"
        v32 = float(struct.unpack("f", struct.pack("f", v))[0])
        err = _range_error(meta, v32)
        if err:
            return v, f"{v!r} rounds to {v32!r} in float32, which " + err.replace(f", got {v32!r}", "")
        return v, None
    if kind == "bool":
        if not isinstance(v, bool):
            return v, f"expected true or false, got {_type_name(v)} {v!r}"
        return v, None
    if kind == "str":
        if not isinstance(v, str):
            return v, f"expected a string, got {_type_name(v)} {v!r}"
        if meta["choices"] and v not in meta["choices"]:
            return v, f"expected one of {', '.join(repr(c) for c in meta['choices'])}, got {v!r}"
        return v, None
    if kind == "optpath":
        if v is None:
            return None, None
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        if not isinstance(v, str) or not v:
            return v, f"expected a path string, got {_type_name(v)} {v!r}"
        return v, None
    if kind == "ints":
        if not isinstance(v, (list, tuple)) or not all(_is_int(x) for x in v):
            return v, f"expected a list of integers, got {v!r}"
        v = [_as_int(x) for x in v]
        bad = [x for x in v if x < (meta["lo"] or 0)]
        if bad:
            return list(v), f"steps must be >= {meta['lo'] or 0}, got {bad[0]}"
        return sorted(set(v)), None
    if kind == "optcolor" and v is None:
        return None, None
    if kind in ("color", "optcolor"):
        if not isinstance(v, (list, tuple)) or len(v) != 3 or not all(_is_num(x) for x in v):
            return v, f"expected 3 numbers (r, g, b) in [0, 1], got {v!r}"
        v = tuple(float(_as_number(x)) for x in v)
        if not all(0.0 <= x <= 1.0 for x in v):
            return v, f"values must be in [0, 1], got {list(v)!r}"
        return v, None
    if kind == "frames":
        if v is None:
            return None, None
        from .data.dataset import parse_frames
        try:
            parse_frames(v)
        except (TypeError, ValueError) as exc:
            return v, str(exc).removeprefix("[splat] frames: ")
        if isinstance(v, str):
            return v, None
        if isinstance(v, (list, tuple)):
            return [int(x) for x in v], None
        return v, f"expected a string like '0::2' or a list of indices, got {_type_name(v)}"
    raise AssertionError(kind)


class _Section:
    """Keyword-only construction with every value checked; unknown keys rejected."""

    SECTION: ClassVar[str] = ""

    def __init__(self, **kwargs):
        values, errors = type(self)._collect(kwargs)
        if errors:
            raise ConfigError(errors)
        for k, v in values.items():
            setattr(self, k, v)
        self._given = frozenset(kwargs)   # the keys set explicitly (TrainConfig.for_random_start)

    @classmethod
    def _collect(cls, kwargs: dict) -> tuple[dict, list[str]]:
        values, errors, _ = cls._collect_bad(kwargs)
        return values, errors

    @classmethod
    def _collect_bad(cls, kwargs: dict) -> tuple[dict, list[str], set]:
        """(values, errors, names of fields whose value is bad)."""
        sec = cls.SECTION
        errors = []
        bad = set()
        known = {f.name: f for f in fields(cls)}
        for k in kwargs:
            if k not in known:
                close = difflib.get_close_matches(str(k), list(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                errors.append(f"{sec}.{_printable(k)}: unknown key{hint}")
        values = {}
        for name, f in known.items():
            if name in kwargs:
                v, err = _coerce(f.metadata, kwargs[name])
                if err:
                    errors.append(f"{sec}.{name}: {err}")
                    bad.add(name)
            else:
                v = f.default_factory() if f.default is MISSING else f.default
            values[name] = v
        errors += cls._cross_check(values, bad)
        return values, errors, bad

    @classmethod
    def _cross_check(cls, values: dict, bad: set) -> list[str]:
        """Checks between fields; a check is skipped when one of its fields is in `bad`."""
        return []

    def errors(self) -> list[str]:
        """Re-check the current values (after attribute assignment, say)."""
        return type(self)._collect(self.to_dict())[1]

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else (list(v) if isinstance(v, list) else v)
        return out

    @classmethod
    def docs(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("doc", "") for f in fields(cls)}
