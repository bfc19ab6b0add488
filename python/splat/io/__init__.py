"""File input/output: atomic writes and the standard 3DGS PLY format."""
from __future__ import annotations

from .atomic import atomic_write, atomic_write_bytes, atomic_write_text
from .ply import load_ply, save_ply

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "load_ply", "save_ply"]
