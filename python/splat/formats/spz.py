"""Niantic's `.spz` format (versions 2 and 3 read, 3 written by default).

A gzip stream holding a 16-byte little-endian header and then one array per
attribute, in this order (N Gaussians, D = (degree+1)^2 - 1 SH coefficients)::

    uint32 magic 0x5053474e ("NGSP"), uint32 version, uint32 N,
    uint8 sh_degree, uint8 fractional_bits, uint8 flags, uint8 reserved
    positions  N x 3 x 24-bit signed fixed point (fractional_bits fractional bits)
    alphas     N x uint8        sigmoid(opacity logit) * 255
    colours    N x 3 x uint8    SH DC * (0.15 * 255) + 127.5
    scales     N x 3 x uint8    (log-scale + 10) * 16
    rotations  version 3: N x uint32, the quaternion (x, y, z, w order) as the
               index of its largest component (2 bits) and the other three,
               each a sign bit and 9 bits of |q_i| / sqrt(1/2), first one highest;
               version 2: N x 3 x uint8, (x, y, z) * 127.5 + 127.5 with w >= 0
    sh         N x D x 3 x uint8 (coefficient-major, colour inner), q = x * 128 + 128,
               degree-1 coefficients on a grid of 8, higher ones of 16 (5 and 4 bits)

Coordinates are stored as given, like the reference converter (ply_to_spz) and
PlayCanvas's splat-transform do: the file holds the PLY's frame, so `.spz` and
`.ply` exports of a scene load the same way in viewers.
"""
from __future__ import annotations

import gzip
import os
import struct
import zlib

import numpy as np

from ..gaussians import Gaussians
from ..io.atomic import atomic_write

MAGIC = 0x5053474E
HEADER = struct.Struct("<IIIBBBB")
COLOR_SCALE = 0.15
SQRT1_2 = 0.7071067811865476
FLAG_ANTIALIASED = 0x1
FLAG_EXTENSIONS = 0x2
MAX_FRACTIONAL_BITS = 12
_MAX_POINTS = 1 << 28


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def _u8(x):
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def fractional_bits_for(means: np.ndarray) -> int:
    """The most fractional bits (up to 12, ~0.25 mm in metres) that keep every
    coordinate inside the 24-bit signed range."""
    m = float(np.max(np.abs(means))) if means.size else 0.0
    bits = MAX_FRACTIONAL_BITS
    while bits > 0 and m * (1 << bits) >= (1 << 23) - 1:
        bits -= 1
    if m * (1 << bits) >= (1 << 23) - 1:
        raise ValueError(f"[splat] means: a coordinate of {m:g} is beyond the .spz range (+-8388607)")
    return bits


def _pack_rotations_v3(q_wxyz: np.ndarray) -> np.ndarray:
    q = q_wxyz[:, [1, 2, 3, 0]].astype(np.float64)          # x, y, z, w
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    n = len(q)
    largest = np.argmax(np.abs(q), axis=1)
    negate = q[np.arange(n), largest] < 0
    comp = largest.astype(np.uint32)
    for i in range(4):
        keep = largest != i
        negbit = ((q[:, i] < 0) ^ negate).astype(np.uint32)
        mag = np.floor(511.0 * np.abs(q[:, i]) / SQRT1_2 + 0.5).astype(np.uint32)
        mag = np.minimum(mag, 511)
        comp = np.where(keep, (comp << np.uint32(10)) | (negbit << np.uint32(9)) | mag, comp)
    return comp.astype("<u4")


def _unpack_rotations_v3(comp: np.ndarray) -> np.ndarray:
    comp = comp.astype(np.uint32)
    n = len(comp)
    largest = (comp >> np.uint32(30)).astype(np.int64)
    q = np.zeros((n, 4), np.float64)
    rest = comp.copy()
    for i in (3, 2, 1, 0):
        keep = largest != i
        mag = (rest & np.uint32(511)).astype(np.float64)
        neg = ((rest >> np.uint32(9)) & np.uint32(1)).astype(bool)
        v = SQRT1_2 * mag / 511.0
        q[:, i] = np.where(keep, np.where(neg, -v, v), 0.0)
        rest = np.where(keep, rest >> np.uint32(10), rest)
    q[np.arange(n), largest] = np.sqrt(np.maximum(0.0, 1.0 - np.sum(q * q, axis=1)))
    return q[:, [3, 0, 1, 2]]                                  # w, x, y, z


def _pack_rotations_v2(q_wxyz: np.ndarray) -> np.ndarray:
    q = q_wxyz.astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q *= np.where(q[:, :1] < 0, -1.0, 1.0)
    return _u8(q[:, 1:] * 127.5 + 127.5)


def _unpack_rotations_v2(r: np.ndarray) -> np.ndarray:
    xyz = r.astype(np.float64) / 127.5 - 1.0
    w = np.sqrt(np.maximum(0.0, 1.0 - np.sum(xyz * xyz, axis=1)))
    return np.concatenate([w[:, None], xyz], axis=1)


def _quantize_sh(x: np.ndarray, bucket: int) -> np.ndarray:
    q = np.rint(x.astype(np.float64) * 128.0).astype(np.int64) + 128
    q = (q + bucket // 2) // bucket * bucket
    return np.clip(q, 0, 255).astype(np.uint8)


def encode_spz(g: Gaussians, version: int = 3) -> bytes:
    """The gzip-compressed file for `g`."""
    if version not in (2, 3):
        raise ValueError(f"[splat] version: .spz versions 2 and 3 can be written, got {version!r}")
    n = len(g)
    degree = g.sh_degree
    bits = fractional_bits_for(g.means)
    fixed = np.rint(g.means.astype(np.float64) * (1 << bits)).astype(np.int64).reshape(-1)
    fixed &= 0xFFFFFF
    pos = np.stack([fixed & 0xFF, (fixed >> 8) & 0xFF, (fixed >> 16) & 0xFF], axis=1).astype(np.uint8)
    alphas = _u8(_sigmoid(g.opacity_logits) * 255.0)
    colors = _u8(g.sh[:, 0, :].astype(np.float64) * (COLOR_SCALE * 255.0) + 127.5)
    scales = _u8((g.log_scales.astype(np.float64) + 10.0) * 16.0)
    rot = _pack_rotations_v3(g.quats) if version == 3 else _pack_rotations_v2(g.quats)
    parts = [HEADER.pack(MAGIC, version, n, degree, bits, 0, 0), pos.tobytes(), alphas.tobytes(),
             colors.tobytes(), scales.tobytes(), rot.tobytes()]
    if degree > 0:
        rest = g.sh[:, 1:, :]
        sh = np.empty(rest.shape, np.uint8)
        sh[:, :3] = _quantize_sh(rest[:, :3], 8)
        if rest.shape[1] > 3:
            sh[:, 3:] = _quantize_sh(rest[:, 3:], 16)
        parts.append(sh.tobytes())
    return gzip.compress(b"".join(parts), compresslevel=6, mtime=0)


def save_spz(path, g: Gaussians, version: int = 3) -> None:
    """Write `g` as a .spz file (atomically)."""
    data = encode_spz(g, version)
    with atomic_write(path, "wb") as f:
        f.write(data)


def decode_spz(data: bytes, name: str = ".spz data") -> Gaussians:
    try:
        raw = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"[splat] {name}: not a gzip stream, so not a .spz file ({exc})") from None
    if len(raw) < HEADER.size:
        raise ValueError(f"[splat] {name}: .spz header is truncated")
    magic, version, n, degree, bits, flags, _ = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise ValueError(f"[splat] {name}: bad .spz magic {magic:#x} (expected {MAGIC:#x})")
    if version not in (2, 3):
        raise ValueError(f"[splat] {name}: .spz version {version} is not supported (2 and 3 are)")
    if n > _MAX_POINTS:
        raise ValueError(f"[splat] {name}: .spz header claims {n} Gaussians")
    if degree > 4:
        raise ValueError(f"[splat] {name}: .spz SH degree {degree} is not 0..4")
    if bits > 23:
        raise ValueError(f"[splat] {name}: .spz fractional bits {bits} is not 0..23")
    if flags & FLAG_EXTENSIONS:
        raise ValueError(f"[splat] {name}: .spz extensions (flags {flags:#x}) are not supported")
    dim = (degree + 1) ** 2 - 1
    rot_bytes = 4 if version == 3 else 3
    sizes = [9 * n, n, 3 * n, 3 * n, rot_bytes * n, 3 * dim * n]
    if len(raw) < HEADER.size + sum(sizes):
        raise ValueError(f"[splat] {name}: .spz data is truncated ({len(raw) - HEADER.size} bytes "
                         f"after the header, {sum(sizes)} needed for {n} Gaussians)")
    off = HEADER.size
    arrays = []
    for size in sizes:
        arrays.append(np.frombuffer(raw, np.uint8, size, off))
        off += size
    pos, alphas, colors, scales, rot, sh = arrays
    p = pos.reshape(n * 3, 3).astype(np.int64)
    fixed = p[:, 0] | (p[:, 1] << 8) | (p[:, 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    means = (fixed.astype(np.float64) / (1 << bits)).reshape(n, 3)
    if version == 3:
        quats = _unpack_rotations_v3(rot.view("<u4"))
    else:
        quats = _unpack_rotations_v2(rot.reshape(n, 3))
    a = np.clip(alphas.astype(np.float64) / 255.0, 1e-6, 1.0 - 1e-6)
    k = (min(degree, 3) + 1) ** 2
    out_sh = np.zeros((n, k, 3), np.float32)
    out_sh[:, 0, :] = (colors.reshape(n, 3).astype(np.float64) / 255.0 - 0.5) / COLOR_SCALE
    if k > 1:
        coeffs = (sh.reshape(n, dim, 3).astype(np.float64) - 128.0) / 128.0
        out_sh[:, 1:, :] = coeffs[:, :k - 1, :]        # degree 4 is dropped: splat renders up to 3
    return Gaussians(means=means.astype(np.float32),
                     log_scales=(scales.reshape(n, 3).astype(np.float64) / 16.0 - 10.0).astype(np.float32),
                     quats=quats.astype(np.float32),
                     opacity_logits=np.log(a / (1.0 - a)).astype(np.float32), sh=out_sh)


def load_spz(path) -> Gaussians:
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return decode_spz(data, path)
