"""An independent PNG writer for the image tests: every bit depth and colour
type of the PNG specification, each row with its own filter, so the decoder
under test is checked against values the test chose (Pillow cannot write
16-bit colour PNGs)."""
from __future__ import annotations

import struct
import zlib

import numpy as np

GRAY, RGB, PALETTE, GRAY_ALPHA, RGBA = 0, 2, 3, 4, 6
CHANNELS = {GRAY: 1, RGB: 3, PALETTE: 1, GRAY_ALPHA: 2, RGBA: 4}


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
    return np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))


def _pack_row(row: np.ndarray, depth: int) -> bytes:
    """One row of samples (ints < 2^depth) as PNG bytes."""
    if depth == 16:
        return row.astype(">u2").tobytes()
    if depth == 8:
        return row.astype(np.uint8).tobytes()
    per = 8 // depth
    flat = row.reshape(-1).astype(np.uint8)
    pad = (-len(flat)) % per
    flat = np.concatenate([flat, np.zeros(pad, np.uint8)]).reshape(-1, per)
    shifts = (8 - depth * (np.arange(per) + 1)).astype(np.uint8)
    return np.bitwise_or.reduce(flat << shifts, axis=1).astype(np.uint8).tobytes()


def encode_png(samples: np.ndarray, depth: int, color: int, *, rng=None, palette=None, trns=None) -> bytes:
    """PNG bytes of `samples` ([H,W] or [H,W,C] ints below 2^depth), rows filtered
    with filter types drawn from `rng` (all five kinds appear on tall images)."""
    rng = rng or np.random.default_rng()
    s = np.asarray(samples)
    if s.ndim == 2:
        s = s[..., None]
    h, w, ch = s.shape
    assert ch == CHANNELS[color], (ch, color)
    bpp = max(1, ch * depth // 8)
    rows = [np.frombuffer(_pack_row(s[y], depth), np.uint8).astype(np.int32) for y in range(h)]
    out = bytearray()
    prev = np.zeros_like(rows[0])
    for y, x in enumerate(rows):
        kind = int(rng.integers(0, 5))
        a = np.concatenate([np.zeros(bpp, np.int32), x[:-bpp]])
        c = np.concatenate([np.zeros(bpp, np.int32), prev[:-bpp]])
        pred = [0, a, prev, (a + prev) // 2, _paeth(a, prev, c)][kind]
        out.append(kind)
        out += ((x - pred) % 256).astype(np.uint8).tobytes()
        prev = x
    data = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0))
    if palette is not None:
        data += _chunk(b"PLTE", np.asarray(palette, np.uint8).tobytes())
    if trns is not None:
        data += _chunk(b"tRNS", trns)
    return data + _chunk(b"IDAT", zlib.compress(bytes(out))) + _chunk(b"IEND", b"")


def write_png(path, samples, depth: int, color: int, **kw) -> None:
    with open(path, "wb") as f:
        f.write(encode_png(samples, depth, color, **kw))
