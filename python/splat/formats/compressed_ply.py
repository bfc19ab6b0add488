"""The compressed PLY that PlayCanvas and SuperSplat read and write.

A binary little-endian PLY with three elements:

- ``chunk`` (one per 256 Gaussians), 18 floats: ``min_x min_y min_z max_x
  max_y max_z`` (position bounds), ``min_scale_x .. max_scale_z`` (log-scale
  bounds, clamped to [-20, 20]) and ``min_r min_g min_b max_r max_g max_b``
  (bounds of the base colour 0.5 + C0 * SH DC);
- ``vertex``, four uints: ``packed_position`` and ``packed_scale`` (x 11 bits
  at bit 21, y 10 bits at bit 11, z 11 bits at bit 0, each a fraction of the
  chunk's range), ``packed_rotation`` (2 bits at bit 30: the index of the
  largest component of the normalized (w, x, y, z) quaternion, made
  positive; the other three in order, 10 bits each from bit 20 down, as
  q * sqrt(1/2) + 0.5) and ``packed_color`` (r, g, b as fractions of the
  chunk's colour range and the opacity sigmoid, 8 bits each from bit 24 down);
- ``sh`` (when degree > 0), uchar ``f_rest_i`` in the standard PLY order,
  trunc((x / 8 + 0.5) * 256) clamped to 0..255, a value on a bin edge (0) rounded
  up or down by a hash so the errors cancel (quantize_sh_rest); read back as
  q * 8 / 255 - 4.

Gaussians are written in Morton order of their positions (so each chunk is
compact and its 11/10-bit grid fine); loading returns them in file order.
"""
from __future__ import annotations

import os

import numpy as np

from ..gaussians import Gaussians
from ..io.atomic import atomic_write
from ..io.ply import _parse_header

CHUNK = 256
SH_C0 = 0.28209479177387814
CHUNK_PROPS = ["min_x", "min_y", "min_z", "max_x", "max_y", "max_z",
               "min_scale_x", "min_scale_y", "min_scale_z", "max_scale_x", "max_scale_y", "max_scale_z",
               "min_r", "min_g", "min_b", "max_r", "max_g", "max_b"]
VERTEX_PROPS = ["packed_position", "packed_rotation", "packed_scale", "packed_color"]


def _spread_bits(v: np.ndarray) -> np.ndarray:
    """10-bit integers with two zero bits inserted between their bits."""
    v = v.astype(np.uint64) & np.uint64(0x3FF)
    v = (v | (v << np.uint64(16))) & np.uint64(0x030000FF)
    v = (v | (v << np.uint64(8))) & np.uint64(0x0300F00F)
    v = (v | (v << np.uint64(4))) & np.uint64(0x030C30C3)
    v = (v | (v << np.uint64(2))) & np.uint64(0x09249249)
    return v


def morton_order(means: np.ndarray) -> np.ndarray:
    """The order in which `save_compressed_ply` writes Gaussians at `means`."""
    m = means.astype(np.float64)
    lo, hi = m.min(axis=0), m.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    cells = np.clip(np.floor((m - lo) / span * 1023.0 + 0.5), 0, 1023).astype(np.uint64)
    code = _spread_bits(cells[:, 0]) | (_spread_bits(cells[:, 1]) << np.uint64(1)) \
        | (_spread_bits(cells[:, 2]) << np.uint64(2))
    return np.argsort(code, kind="stable")


def _unorm(x, bits):
    top = (1 << bits) - 1
    return np.clip(np.floor(x * top + 0.5), 0, top).astype(np.uint32)


def _fractions(v, lo, hi):
    """(v - lo) / (hi - lo) per chunk, 0 where the range is (nearly) empty."""
    span = hi - lo
    safe = np.where(span < 1e-5, 1.0, span)
    return np.where(span < 1e-5, 0.0, np.clip((v - lo) / safe, 0.0, 1.0))


def _pack_111011(f):
    return (_unorm(f[..., 0], 11) << np.uint32(21)) | (_unorm(f[..., 1], 10) << np.uint32(11)) \
        | _unorm(f[..., 2], 11)


def _unpack_111011(v):
    v = v.astype(np.uint32)
    return np.stack([(v >> np.uint32(21)) / 2047.0, ((v >> np.uint32(11)) & np.uint32(0x3FF)) / 1023.0,
                     (v & np.uint32(0x7FF)) / 2047.0], axis=-1)


def encode_compressed_ply(g: Gaussians) -> bytes:
    n = len(g)
    if n == 0:
        raise ValueError("[splat] gaussians: a compressed PLY needs at least one Gaussian")
    order = morton_order(g.means)
    chunks = -(-n // CHUNK)
    pad = chunks * CHUNK - n
    # The last chunk is filled up with its last Gaussian (bounds unchanged).
    idx = np.concatenate([order, np.full(pad, order[-1], order.dtype)]).reshape(chunks, CHUNK)

    pos = g.means.astype(np.float64)[idx]
    ls = np.clip(g.log_scales.astype(np.float64)[idx], -20.0, 20.0)
    col = 0.5 + SH_C0 * g.sh[:, 0, :].astype(np.float64)[idx]
    q = g.quats.astype(np.float64)[idx]
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    opacity = 1.0 / (1.0 + np.exp(-g.opacity_logits.astype(np.float64)[idx]))

    bounds = []
    packed = []
    for v in (pos, ls, col):
        lo, hi = v.min(axis=1, keepdims=True), v.max(axis=1, keepdims=True)
        bounds += [lo[:, 0], hi[:, 0]]
        packed.append(_fractions(v, lo, hi))
    chunk_data = np.concatenate(bounds, axis=1).astype("<f4")           # [chunks, 18]

    largest = np.argmax(np.abs(q), axis=-1)
    sign = np.where(np.take_along_axis(q, largest[..., None], -1) < 0, -1.0, 1.0)
    q = q * sign
    rot = largest.astype(np.uint32)
    for i in range(4):
        keep = largest != i
        rot = np.where(keep, (rot << np.uint32(10)) | _unorm(q[..., i] * SQRT1_2 + 0.5, 10), rot)
    color = (_unorm(packed[2][..., 0], 8) << np.uint32(24)) | (_unorm(packed[2][..., 1], 8) << np.uint32(16)) \
        | (_unorm(packed[2][..., 2], 8) << np.uint32(8)) | _unorm(opacity, 8)
    vertex = np.stack([_pack_111011(packed[0]), rot, _pack_111011(packed[1]), color], axis=-1)
    vertex = vertex.reshape(chunks * CHUNK, 4)[:n].astype("<u4")

    degree = g.sh_degree
    rest = 3 * ((degree + 1) ** 2 - 1)
    header = ["ply", "format binary_little_endian 1.0", "comment written by splat",
              f"element chunk {chunks}"] + [f"property float {p}" for p in CHUNK_PROPS]
    header += [f"element vertex {n}"] + [f"property uint {p}" for p in VERTEX_PROPS]
    parts = [chunk_data.tobytes(), vertex.tobytes()]
    if rest:
        header += [f"element sh {n}"] + [f"property uchar f_rest_{i}" for i in range(rest)]
        # Standard PLY order: channel-major, f_rest_{c*(K-1) + k-1} = sh[:, k, c].
        sh = g.sh[order, 1:, :].astype(np.float64).transpose(0, 2, 1).reshape(n, rest)
        parts.append(quantize_sh_rest(sh).tobytes())
    header.append("end_header")
    return ("\n".join(header) + "\n").encode("ascii") + b"".join(parts)


SQRT1_2 = 0.7071067811865476


def quantize_sh_rest(sh: np.ndarray) -> np.ndarray:
    """uint8 codes of the SH rest coefficients [n, K] (rows in file order): the bin of
    x / 8 + 0.5 among 256 (SuperSplat's trunc((x / 8 + 0.5) * 256)), each decoded near
    its centre. A value exactly on a bin edge -- 0 above all, what every coefficient of
    degrees not yet trained holds -- is equally far from the two centres (+-1/64), and
    a fixed choice gave every such coefficient the same +1/64: an error of one sign in
    every Gaussian, summed in every pixel (0.7-1.2 dB of a capture run). Ties go up or
    down by a hash of (row, coefficient) instead, so they cancel as rounding errors do."""
    u = (sh / 8.0 + 0.5) * 256.0
    q = np.floor(u)
    rows = np.arange(len(u), dtype=np.uint64)[:, None]
    cols = np.arange(u.shape[1], dtype=np.uint64)[None, :]
    down = (((rows * np.uint64(0x9E3779B1)) ^ (cols * np.uint64(0x85EBCA77))) >> np.uint64(15)) & np.uint64(1)
    q = np.where(u == q, q - down.astype(np.float64), q)
    return np.clip(q, 0, 255).astype(np.uint8)


def save_compressed_ply(path, g: Gaussians) -> None:
    """Write `g` as a compressed PLY (atomically)."""
    data = encode_compressed_ply(g)
    with atomic_write(path, "wb") as f:
        f.write(data)


def is_compressed_ply(elements) -> bool:
    names = {el.name: el for el in elements}
    return "chunk" in names and "vertex" in names and \
        {p for p, _ in names["vertex"].props} >= set(VERTEX_PROPS)


def decode_compressed_ply(data: bytes, name: str = "compressed PLY") -> Gaussians:
    fmt, elements, offset = _parse_header(name, data)
    if fmt != "binary_little_endian":
        raise ValueError(f"[splat] {name}: a compressed PLY is binary little endian, this one is {fmt}")
    if not is_compressed_ply(elements):
        raise ValueError(f"[splat] {name}: not a compressed PLY (needs 'chunk' and packed 'vertex' elements)")
    tables = {}
    for el in elements:
        if el.has_list:
            raise ValueError(f"[splat] {name}: list property in element {el.name!r}")
        dtype = np.dtype([(p, "<" + t) for p, t in el.props])
        need = el.count * dtype.itemsize
        if len(data) - offset < need:
            raise ValueError(f"[splat] {name}: truncated in element {el.name!r}")
        tables[el.name] = np.frombuffer(data, dtype, el.count, offset)
        offset += need
    chunk, vertex = tables["chunk"], tables["vertex"]
    n = len(vertex)
    if len(chunk) != -(-n // CHUNK):
        raise ValueError(f"[splat] {name}: {len(chunk)} chunks for {n} Gaussians (expected {-(-n // CHUNK)})")
    missing = [p for p in CHUNK_PROPS[:12] if p not in chunk.dtype.names]
    if missing:
        raise ValueError(f"[splat] {name}: chunk element lacks {', '.join(missing)}")
    ci = np.arange(n) // CHUNK

    def lerp(prefix_lo, prefix_hi, axes, t):
        lo = np.stack([chunk[f"{prefix_lo}{a}"].astype(np.float64) for a in axes], axis=1)[ci]
        hi = np.stack([chunk[f"{prefix_hi}{a}"].astype(np.float64) for a in axes], axis=1)[ci]
        return lo * (1.0 - t) + hi * t

    means = lerp("min_", "max_", "xyz", _unpack_111011(vertex["packed_position"]))
    log_scales = lerp("min_scale_", "max_scale_", "xyz", _unpack_111011(vertex["packed_scale"]))
    c = vertex["packed_color"].astype(np.uint32)
    rgba = np.stack([(c >> np.uint32(s)) & np.uint32(0xFF) for s in (24, 16, 8, 0)], axis=1) / 255.0
    rgb = rgba[:, :3]
    if "min_r" in chunk.dtype.names:
        rgb = lerp("min_", "max_", "rgb", rgb)
    r = vertex["packed_rotation"].astype(np.uint32)
    largest = (r >> np.uint32(30)).astype(np.int64)
    three = np.stack([((r >> np.uint32(s)) & np.uint32(0x3FF)) / 1023.0 for s in (20, 10, 0)], axis=1)
    three = (three - 0.5) / SQRT1_2
    m = np.sqrt(np.maximum(0.0, 1.0 - np.sum(three * three, axis=1)))
    q = np.empty((n, 4))
    for i in range(4):
        # Component i is the largest (m) or the j-th of the stored three.
        j = i - (largest < i)
        q[:, i] = np.where(largest == i, m, three[np.arange(n), np.clip(j, 0, 2)])
    a = np.clip(rgba[:, 3], 1e-6, 1.0 - 1e-6)
    k = 1
    sh_rest = None
    if "sh" in tables:
        sh_t = tables["sh"]
        names = [p for p in sh_t.dtype.names if p.startswith("f_rest_")]
        count = len(names)
        if count not in (9, 24, 45) or len(sh_t) != n:
            raise ValueError(f"[splat] {name}: 'sh' element has {count} f_rest properties for {len(sh_t)} rows")
        k = count // 3 + 1
        vals = np.stack([sh_t[f"f_rest_{i}"].astype(np.float64) for i in range(count)], axis=1)
        sh_rest = (vals * 8.0 / 255.0 - 4.0).reshape(n, 3, k - 1).transpose(0, 2, 1)
    sh = np.zeros((n, k, 3), np.float32)
    sh[:, 0, :] = (rgb - 0.5) / SH_C0
    if sh_rest is not None:
        sh[:, 1:, :] = sh_rest
    return Gaussians(means=means.astype(np.float32), log_scales=log_scales.astype(np.float32),
                     quats=q.astype(np.float32), opacity_logits=np.log(a / (1.0 - a)).astype(np.float32), sh=sh)


def load_compressed_ply(path) -> Gaussians:
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return decode_compressed_ply(data, path)
