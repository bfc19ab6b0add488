"""Small pieces shared by the command-line programs (splat/cli, splat/bench)."""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

_PREFIX = re.compile(r"^\[[A-Za-z_ ]+\]\s*")


def warn(msg: str) -> None:
    print(f"splat: warning: {msg}", file=sys.stderr, flush=True)


def one_line(msg) -> str:
    """One line: no '[splat] '-style prefixes, lines joined."""
    lines = [_PREFIX.sub("", ln.strip()) for ln in str(msg).strip().splitlines()]
    return " ".join(ln for ln in lines if ln)


def finite(v):
    """JSON-safe copy: non-finite floats become None, numpy scalars plain numbers."""
    if isinstance(v, dict):
        return {str(k): finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return v if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


def write_json(path, obj) -> None:
    """Atomically, creating the folder."""
    from ..io.atomic import atomic_write_text
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(finite(obj), indent=2, allow_nan=False) + "\n")


def _int_at_least(text: str, lo: int, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}") from None
    if v < lo:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
    return v


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1, "positive")


def count(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0, "non-negative")
