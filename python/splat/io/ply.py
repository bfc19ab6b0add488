"""The standard 3D Gaussian Splatting PLY layout, written and read with numpy.

One ``vertex`` element, binary little endian, every property a float32::

    x y z nx ny nz f_dc_0 f_dc_1 f_dc_2 f_rest_0 .. f_rest_{3(K-1)-1}
    opacity scale_0 scale_1 scale_2 rot_0 rot_1 rot_2 rot_3

- ``f_dc_c`` is the degree-0 SH coefficient of colour channel c.
- ``f_rest`` is channel-major: all higher-order coefficients of red
  (k = 1..K-1), then green, then blue, i.e. ``f_rest_{c*(K-1) + k-1} = sh[:, k, c]``.
- ``opacity`` is the logit, ``scale_i`` the log-scales, ``rot`` the quaternion
  (w, x, y, z) as stored (not normalized); the normals are zero.

This is the layout the reference 3DGS implementation and the common viewers
read. `load_ply` accepts these properties in any order and of any numeric type,
in binary (either endianness) or ASCII files, and ignores extra properties.
"""
from __future__ import annotations

import os
import re

import numpy as np

from .._validate import integer
from ..gaussians import Gaussians, sh_coeffs
from .atomic import atomic_write

_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
_MAX_HEADER = 1 << 20


def _property_names(num_rest: int) -> list[str]:
    return (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
            + [f"f_rest_{i}" for i in range(num_rest)]
            + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def save_ply(path, gaussians: Gaussians, sh_degree: int | None = None) -> None:
    """Write `gaussians` to `path` (atomically) in the standard 3DGS PLY layout.

    `sh_degree` (0..3) selects how many SH coefficients are written: fewer than
    stored truncates, more pads with zeros (some viewers expect degree 3).
    Default: the degree the stored coefficients support.
    """
    if not isinstance(gaussians, Gaussians):
        raise TypeError(f"[splat] gaussians: expected splat.Gaussians, got {type(gaussians).__name__}")
    if sh_degree is None:
        sh_degree = gaussians.sh_degree
    sh_degree = integer("sh_degree", sh_degree)
    if not 0 <= sh_degree <= 3:
        raise ValueError(f"[splat] sh_degree: expected an integer in 0..3, got {sh_degree!r}")
    n = len(gaussians)
    k = sh_coeffs(int(sh_degree))
    sh = np.zeros((n, k, 3), dtype=np.float32)
    kk = min(k, gaussians.sh.shape[1])
    sh[:, :kk] = gaussians.sh[:, :kk]

    names = _property_names(3 * (k - 1))
    cols = np.empty((n, len(names)), dtype="<f4")
    cols[:, 0:3] = gaussians.means
    cols[:, 3:6] = 0.0
    cols[:, 6:9] = sh[:, 0, :]
    r = 9 + 3 * (k - 1)
    cols[:, 9:r] = sh[:, 1:, :].transpose(0, 2, 1).reshape(n, 3 * (k - 1))
    cols[:, r] = gaussians.opacity_logits
    cols[:, r + 1:r + 4] = gaussians.log_scales
    cols[:, r + 4:r + 8] = gaussians.quats

    header = ["ply", "format binary_little_endian 1.0", f"element vertex {n}"]
    header += [f"property float {name}" for name in names]
    header += ["end_header"]
    # A [n, P] float32 C array is byte-identical to the packed structured record layout.
    with atomic_write(path, "wb") as f:
        f.write(("\n".join(header) + "\n").encode("ascii"))
        f.write(np.ascontiguousarray(cols).tobytes())


class _Element:
    def __init__(self, name: str, count: int):
        self.name = name
        self.count = count
        self.props: list[tuple[str, str]] = []   # (name, numpy type) for scalars
        self.has_list = False


def _parse_header(path: str, data: bytes):
    m = re.search(rb"\nend_header[ \t]*\r?\n", data[:_MAX_HEADER])
    if not re.match(rb"ply[ \t]*\r?\n", data) or m is None:
        raise ValueError(f"[splat] {path}: not a PLY file (no 'ply' magic or no 'end_header' line)")
    end = m.start()
    body_start = m.end()
    try:
        text = data[:end].decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"[splat] {path}: PLY header is not ASCII") from None
    fmt = None
    elements: list[_Element] = []
    for lineno, raw in enumerate(text.splitlines()[1:], start=2):
        parts = raw.split()
        if not parts or parts[0] in ("comment", "obj_info"):
            continue
        kw = parts[0]
        if kw == "format":
            if len(parts) != 3 or parts[1] not in ("binary_little_endian", "binary_big_endian", "ascii"):
                raise ValueError(f"[splat] {path}: unsupported PLY format line {raw!r}")
            fmt = parts[1]
        elif kw == "element":
            if len(parts) != 3 or not re.fullmatch(r"\d+", parts[2]):
                raise ValueError(f"[splat] {path}: bad PLY element line {lineno}: {raw!r}")
            elements.append(_Element(parts[1], int(parts[2])))
        elif kw == "property":
            if not elements:
                raise ValueError(f"[splat] {path}: PLY property before any element (line {lineno})")
            el = elements[-1]
            if len(parts) == 5 and parts[1] == "list":
                if parts[2] not in _PLY_TYPES or parts[3] not in _PLY_TYPES:
                    raise ValueError(f"[splat] {path}: unknown PLY type in line {lineno}: {raw!r}")
                el.has_list = True
                el.props.append((parts[4], "list"))
            elif len(parts) == 3 and parts[1] in _PLY_TYPES:
                el.props.append((parts[2], _PLY_TYPES[parts[1]]))
            else:
                raise ValueError(f"[splat] {path}: bad PLY property line {lineno}: {raw!r}")
        else:
            raise ValueError(f"[splat] {path}: unknown PLY header keyword {kw!r} (line {lineno})")
    if fmt is None:
        raise ValueError(f"[splat] {path}: PLY header has no 'format' line")
    return fmt, elements, body_start


def _find_rest(path: str, names: list[str]) -> list[str]:
    rest = {}
    for name in names:
        m = re.fullmatch(r"f_rest_(\d+)", name)
        if m:
            rest[int(m.group(1))] = name
    count = len(rest)
    if sorted(rest) != list(range(count)):
        raise ValueError(f"[splat] {path}: f_rest_* properties are not numbered 0..{count - 1}")
    if count % 3 or (count // 3 + 1) not in (1, 4, 9, 16):
        raise ValueError(f"[splat] {path}: {count} f_rest_* properties is not 3*((degree+1)^2-1) "
                         f"for an SH degree 0..3")
    return [rest[i] for i in range(count)]


def _vertex_columns(path: str):
    """(property names, {name: column array}, vertex count, {name: declared numpy type})
    of a PLY file's vertex element."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise FileNotFoundError(f"[splat] {path}: cannot read PLY file ({exc.strerror})") from None
    fmt, elements, offset = _parse_header(path, data)
    vertex = None
    for el in elements:
        if el.name == "vertex":
            vertex = el
            break
        if fmt == "ascii":
            # Skip this element's lines.
            for _ in range(el.count):  # bounded by the lines the file has, not by the count it claims
                nl = data.find(b"\n", offset)
                if nl < 0:
                    offset = len(data)
                    break
                offset = nl + 1
            continue
        if el.has_list:
            raise ValueError(f"[splat] {path}: element {el.name!r} with list properties precedes "
                             f"'vertex'; not supported")
        offset += el.count * sum(np.dtype(t).itemsize for _, t in el.props)
    if vertex is None:
        raise ValueError(f"[splat] {path}: no 'vertex' element")
    if vertex.has_list:
        raise ValueError(f"[splat] {path}: list properties in 'vertex' are not supported")
    names = [p for p, _ in vertex.props]
    if not names:
        raise ValueError(f"[splat] {path}: the 'vertex' element has no properties")
    if len(set(names)) != len(names):
        raise ValueError(f"[splat] {path}: duplicate vertex property names")
    n = vertex.count

    if fmt == "ascii":
        # Each row takes at least one byte, so a count beyond the body's length is a truncated file;
        # checking first also keeps a huge claimed count away from bytes.split's index type.
        if n > len(data) - offset:
            raise ValueError(f"[splat] {path}: truncated: expected {n} vertices, the ASCII body has "
                             f"{len(data) - offset} bytes")
        lines = data[offset:].split(b"\n", n)[:n]
        if len(lines) < n:
            raise ValueError(f"[splat] {path}: truncated: expected {n} vertices, found {len(lines)}")
        try:
            table = np.array([ln.split() for ln in lines], dtype=np.float64)
        except ValueError:
            raise ValueError(f"[splat] {path}: malformed ASCII vertex data") from None
        if n and table.shape != (n, len(names)):
            raise ValueError(f"[splat] {path}: ASCII vertex rows do not have {len(names)} values")
        table = table.reshape(n, len(names))
        col = {name: table[:, i] for i, name in enumerate(names)}
    else:
        order = "<" if fmt == "binary_little_endian" else ">"
        dtype = np.dtype([(p, order + t) for p, t in vertex.props])
        need = n * dtype.itemsize
        if len(data) - offset < need:
            raise ValueError(f"[splat] {path}: truncated: vertex data needs {need} bytes, "
                             f"file has {max(0, len(data) - offset)}")
        rec = np.frombuffer(data, dtype=dtype, count=n, offset=offset)
        col = {name: rec[name] for name in names}
    return names, col, n, dict(vertex.props)


def load_ply(path) -> Gaussians:
    """Read a 3DGS PLY file (as written by `save_ply` or other 3DGS tools)."""
    path = os.fspath(path)
    names, col, n, _ = _vertex_columns(path)
    rest = _find_rest(path, names)
    required = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
                "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    missing = [p for p in required if p not in names]
    if missing:
        raise ValueError(f"[splat] {path}: missing vertex properties {', '.join(missing)}")

    def stack(keys):
        return np.stack([np.asarray(col[k], dtype=np.float32) for k in keys], axis=1) if keys \
            else np.zeros((n, 0), np.float32)

    k = len(rest) // 3 + 1
    sh = np.empty((n, k, 3), dtype=np.float32)
    sh[:, 0, :] = stack(["f_dc_0", "f_dc_1", "f_dc_2"])
    if k > 1:
        sh[:, 1:, :] = stack(rest).reshape(n, 3, k - 1).transpose(0, 2, 1)
    try:
        return Gaussians(
            means=stack(["x", "y", "z"]),
            log_scales=stack(["scale_0", "scale_1", "scale_2"]),
            quats=stack(["rot_0", "rot_1", "rot_2", "rot_3"]),
            opacity_logits=np.asarray(col["opacity"], dtype=np.float32),
            sh=sh,
        )
    except (TypeError, ValueError) as exc:
        msg = str(exc).removeprefix("[splat] ")
        raise ValueError(f"[splat] {path}: {msg}") from None


def load_point_cloud(path) -> tuple[np.ndarray, np.ndarray | None]:
    """A plain point cloud PLY (x, y, z and optionally red, green, blue):
    (float32 [N,3] positions, float32 [N,3] colours in [0, 1] or None)."""
    path = os.fspath(path)
    names, col, n, types = _vertex_columns(path)
    missing = [p for p in ("x", "y", "z") if p not in names]
    if missing:
        raise ValueError(f"[splat] {path}: missing vertex properties {', '.join(missing)}")
    xyz = np.stack([np.asarray(col[k], dtype=np.float32) for k in ("x", "y", "z")], axis=1).reshape(n, 3)
    rgb = None
    if all(k in names for k in ("red", "green", "blue")):
        raw = [np.asarray(col[k]) for k in ("red", "green", "blue")]
        scale = 1.0 if np.issubdtype(np.dtype(types["red"]), np.floating) else 1.0 / 255.0
        rgb = np.clip(np.stack(raw, axis=1).astype(np.float32) * np.float32(scale), 0.0, 1.0).reshape(n, 3)
    if not np.all(np.isfinite(xyz)):
        raise ValueError(f"[splat] {path}: non-finite point coordinates")
    return xyz, rgb
