"""Scene file formats: round trips within each format's quantisation, and every
written file decoded by an independent reader written here from the format's
description (byte level for .splat and .spz, plyfile for the PLY variants)."""
from __future__ import annotations

import gzip
import os
import struct
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import splat  # noqa: E402,F401

from splat import formats  # noqa: E402
from splat.formats import compressed_ply  # noqa: E402
from splat.gaussians import Gaussians  # noqa: E402

plyfile = pytest.importorskip("plyfile")
rng = np.random.default_rng()
C0 = 0.28209479177387814


def random_gaussians(n, degree, spread=1.0):
    """Values inside each format's representable range (colours in [0, 1], SH in
    [-0.9, 0.9], log-scales in [-9, 5], positions well inside +-2048)."""
    k = (degree + 1) ** 2
    sh = rng.uniform(-0.9, 0.9, size=(n, k, 3))
    sh[:, 0, :] = (rng.uniform(0.02, 0.98, size=(n, 3)) - 0.5) / C0
    return Gaussians(
        means=(rng.normal(size=(n, 3)) * spread).astype(np.float32),
        log_scales=rng.uniform(-9, 5, size=(n, 3)).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        opacity_logits=rng.uniform(-5, 5, size=n).astype(np.float32),
        sh=sh.astype(np.float32),
    )


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def unit_quats(q):
    """Normalized, sign fixed so that the largest-magnitude component is positive
    (q and -q are one rotation)."""
    q = np.asarray(q, np.float64)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    big = np.take_along_axis(q, np.argmax(np.abs(q), axis=1)[:, None], 1)
    return q * np.where(big < 0, -1.0, 1.0)


def assert_quats_close(a, b, atol):
    """Rotations equal up to the sign of the quaternion."""
    qa, qb = unit_quats(a), unit_quats(b)
    d = np.minimum(np.abs(qa - qb).max(axis=1), np.abs(qa + qb).max(axis=1))
    assert d.max() <= atol, d.max()


# --------------------------------------------------------------------------- .splat


def read_splat_by_hand(data: bytes):
    """antimatter15 .splat: 32-byte records, 6 little-endian float32 then 8 bytes."""
    assert len(data) % 32 == 0
    rows = []
    for off in range(0, len(data), 32):
        x, y, z, sx, sy, sz = struct.unpack_from("<6f", data, off)
        r, g, b, a, qw, qx, qy, qz = data[off + 24:off + 32]
        rows.append((x, y, z, sx, sy, sz, r, g, b, a, qw, qx, qy, qz))
    return np.array(rows, np.float64)


def test_splat_round_trip_and_independent_reader(tmp_path):
    n = int(rng.integers(50, 400))
    g = random_gaussians(n, int(rng.integers(0, 4)))
    path = tmp_path / "scene.splat"
    formats.save(path, g)
    data = path.read_bytes()
    assert len(data) == 32 * n
    rows = read_splat_by_hand(data)
    order = np.argsort(-np.exp(g.log_scales.astype(np.float64).sum(1)) * sigmoid(g.opacity_logits),
                       kind="stable")
    np.testing.assert_array_equal(rows[:, 0:3], g.means[order].astype(np.float64))
    np.testing.assert_allclose(rows[:, 3:6], np.exp(g.log_scales[order].astype(np.float64)), rtol=1e-6)
    colour = 0.5 + C0 * g.sh[order, 0, :].astype(np.float64)
    assert np.abs(rows[:, 6:9] / 255 - colour).max() <= 0.5 / 255 + 1e-6
    assert np.abs(rows[:, 9] / 255 - sigmoid(g.opacity_logits[order])).max() <= 0.5 / 255 + 1e-6
    assert_quats_close((rows[:, 10:14] - 128) / 128, g.quats[order], atol=0.012)

    back = formats.load(path)
    assert back.sh.shape == (n, 1, 3)
    np.testing.assert_array_equal(back.means, g.means[order])
    np.testing.assert_allclose(back.log_scales, g.log_scales[order], atol=1e-5)
    assert np.abs(sigmoid(back.opacity_logits) - sigmoid(g.opacity_logits[order])).max() <= 0.5 / 255 + 1e-5
    assert np.abs(C0 * (back.sh[:, 0] - g.sh[order, 0])).max() <= 0.5 / 255 + 1e-5
    assert_quats_close(back.quats, g.quats[order], atol=0.012)


def test_splat_bad_size(tmp_path):
    p = tmp_path / "bad.splat"
    p.write_bytes(b"\0" * 33)
    with pytest.raises(ValueError, match=r"\[splat\] .*bad.splat.*32-byte"):
        formats.load(p)


# --------------------------------------------------------------------------- .spz


def read_spz_by_hand(data: bytes):
    """Niantic .spz v2/v3 from its description: gzip, 16-byte header, then
    positions, alphas, colours, scales, rotations, SH."""
    raw = gzip.decompress(data)
    magic, version, n, degree, frac, flags, reserved = struct.unpack_from("<3I4B", raw, 0)
    assert magic == 0x5053474E and version in (2, 3) and reserved == 0 and flags == 0
    dim = (degree + 1) ** 2 - 1
    off = 16
    pos = np.zeros((n, 3))
    for i in range(n):
        for c in range(3):
            v = int.from_bytes(raw[off:off + 3], "little", signed=True)
            pos[i, c] = v / 2.0 ** frac
            off += 3
    alpha = np.frombuffer(raw, np.uint8, n, off) / 255.0
    off += n
    colour = np.frombuffer(raw, np.uint8, 3 * n, off).reshape(n, 3).astype(np.float64)
    off += 3 * n
    dc = (colour / 255.0 - 0.5) / 0.15
    log_scale = np.frombuffer(raw, np.uint8, 3 * n, off).reshape(n, 3) / 16.0 - 10.0
    off += 3 * n
    quats = np.zeros((n, 4))          # w, x, y, z
    for i in range(n):
        if version == 3:
            word = int.from_bytes(raw[off:off + 4], "little")
            off += 4
            largest = word >> 30
            xyzw = [0.0] * 4
            others = [j for j in range(4) if j != largest]
            for slot, j in enumerate(others):
                field = (word >> (10 * (2 - slot))) & 0x3FF
                mag = (field & 0x1FF) / 511.0 * np.sqrt(0.5)
                xyzw[j] = -mag if field >> 9 else mag
            xyzw[largest] = np.sqrt(max(0.0, 1.0 - sum(v * v for v in xyzw)))
        else:
            x, y, z = (b / 127.5 - 1.0 for b in raw[off:off + 3])
            off += 3
            xyzw = [x, y, z, np.sqrt(max(0.0, 1.0 - x * x - y * y - z * z))]
        quats[i] = [xyzw[3], xyzw[0], xyzw[1], xyzw[2]]
    sh = (np.frombuffer(raw, np.uint8, 3 * dim * n, off).reshape(n, dim, 3) - 128.0) / 128.0
    off += 3 * dim * n
    assert off == len(raw)
    return dict(version=version, degree=degree, frac=frac, means=pos, opacity=alpha, dc=dc,
                log_scales=log_scale, quats=quats, sh=sh)


@pytest.mark.parametrize("version", [3, 2])
def test_spz_round_trip_and_independent_reader(tmp_path, version):
    n = int(rng.integers(50, 300))
    degree = int(rng.integers(0, 4))
    g = random_gaussians(n, degree)
    path = tmp_path / "scene.spz"
    formats.spz.save_spz(path, g, version=version)
    ref = read_spz_by_hand(path.read_bytes())
    assert ref["version"] == version and ref["degree"] == degree and ref["frac"] == 12

    def check_quats(quats):
        if version == 3:
            assert_quats_close(quats, g.quats, 3e-3)
            return
        # Version 2 keeps x, y, z (w >= 0) at 8 bits and derives w, which is
        # ill-conditioned near w = 0: check x, y, z and w^2 = 1 - |xyz|^2.
        q = g.quats.astype(np.float64)
        q = q / np.linalg.norm(q, axis=1, keepdims=True) * np.where(q[:, :1] < 0, -1.0, 1.0)
        assert np.abs(quats[:, 1:] - q[:, 1:]).max() <= 0.5 / 127.5 + 1e-6
        assert np.abs(quats[:, 0] ** 2 - q[:, 0] ** 2).max() <= 6 * 0.5 / 127.5 + 1e-6

    def check(means, log_scales, opacity, dc, quats, sh, slack):
        assert np.abs(means - g.means).max() <= 0.5 / 4096 + slack
        assert np.abs(log_scales - g.log_scales).max() <= 0.5 / 16 + slack
        assert np.abs(opacity - sigmoid(g.opacity_logits)).max() <= 0.5 / 255 + slack
        assert np.abs(dc - g.sh[:, 0]).max() <= 0.5 / (0.15 * 255) + slack
        check_quats(np.asarray(quats, np.float64))
        if degree:
            assert np.abs(sh[:, :3] - g.sh[:, 1:4]).max() <= 4.5 / 128 + slack     # 5 bits
            if degree > 1:
                assert np.abs(sh[:, 3:] - g.sh[:, 4:]).max() <= 8.5 / 128 + slack  # 4 bits

    check(ref["means"], ref["log_scales"], ref["opacity"], ref["dc"], ref["quats"], ref["sh"], 1e-6)
    back = formats.load(path)
    assert back.sh.shape == g.sh.shape
    check(back.means, back.log_scales, sigmoid(back.opacity_logits), back.sh[:, 0], back.quats,
          back.sh[:, 1:], 1e-5)
    np.testing.assert_allclose(back.means, ref["means"], atol=1e-6)
    np.testing.assert_allclose(back.sh[:, 1:], ref["sh"], atol=1e-6)


def test_spz_large_coordinates_lower_fractional_bits(tmp_path):
    g = random_gaussians(64, 0, spread=3000.0)
    path = tmp_path / "far.spz"
    formats.save(path, g)
    ref = read_spz_by_hand(path.read_bytes())
    assert ref["frac"] < 12
    assert np.abs(ref["means"] - g.means).max() <= 0.5 / 2 ** ref["frac"] + 1e-3


def test_spz_bad_input(tmp_path):
    p = tmp_path / "x.spz"
    p.write_bytes(gzip.compress(b"NOPE" + b"\0" * 12))
    with pytest.raises(ValueError, match=r"\[splat\] .*x.spz.*magic"):
        formats.load(p)
    p.write_bytes(gzip.compress(struct.pack("<3I4B", 0x5053474E, 3, 1000, 0, 12, 0, 0)))
    with pytest.raises(ValueError, match="truncated"):
        formats.load(p)


# --------------------------------------------------------------------------- compressed PLY


def read_compressed_ply_by_hand(path):
    """PlayCanvas compressed PLY through plyfile, decoded from the format's description."""
    ply = plyfile.PlyData.read(str(path))
    chunk, vertex = ply["chunk"].data, ply["vertex"].data
    n = len(vertex)
    out = dict(means=np.zeros((n, 3)), log_scales=np.zeros((n, 3)), colour=np.zeros((n, 3)),
               opacity=np.zeros(n), quats=np.zeros((n, 4)))
    for i in range(n):
        c = chunk[i // 256]
        for key, lo, hi, word in (("means", ("min_x", "min_y", "min_z"), ("max_x", "max_y", "max_z"),
                                   vertex["packed_position"][i]),
                                  ("log_scales", ("min_scale_x", "min_scale_y", "min_scale_z"),
                                   ("max_scale_x", "max_scale_y", "max_scale_z"), vertex["packed_scale"][i])):
            word = int(word)
            t = ((word >> 21) / 2047.0, ((word >> 11) & 1023) / 1023.0, (word & 2047) / 2047.0)
            out[key][i] = [c[lo[a]] + (c[hi[a]] - c[lo[a]]) * t[a] for a in range(3)]
        word = int(vertex["packed_color"][i])
        for a, (lo, hi) in enumerate((("min_r", "max_r"), ("min_g", "max_g"), ("min_b", "max_b"))):
            t = ((word >> (24 - 8 * a)) & 255) / 255.0
            out["colour"][i, a] = c[lo] + (c[hi] - c[lo]) * t
        out["opacity"][i] = (word & 255) / 255.0
        word = int(vertex["packed_rotation"][i])
        largest = word >> 30
        vals = [(((word >> s) & 1023) / 1023.0 - 0.5) * np.sqrt(2.0) for s in (20, 10, 0)]
        q = [0.0] * 4
        rest = iter(vals)
        for j in range(4):
            if j != largest:
                q[j] = next(rest)
        q[largest] = np.sqrt(max(0.0, 1.0 - sum(v * v for v in vals)))
        out["quats"][i] = q
    if "sh" in ply:
        sh = ply["sh"].data
        count = len(sh.dtype.names)
        vals = np.stack([sh[f"f_rest_{j}"].astype(np.float64) for j in range(count)], axis=1)
        out["sh_rest"] = vals * 8.0 / 255.0 - 4.0           # PLY order: channel-major
    return out


def test_compressed_ply_round_trip_and_plyfile(tmp_path):
    n = int(rng.integers(300, 900))           # several chunks, the last one partial
    degree = int(rng.integers(1, 4))
    g = random_gaussians(n, degree)
    path = tmp_path / "scene.compressed.ply"
    assert formats.save(path, g) == "compressed-ply"
    ref = read_compressed_ply_by_hand(path)
    order = compressed_ply.morton_order(g.means)
    o = g.means[order].astype(np.float64)
    chunk_of = np.arange(n) // 256

    def per_chunk_range(v):
        lo = np.array([v[chunk_of == c].min(0) for c in range(chunk_of.max() + 1)])[chunk_of]
        hi = np.array([v[chunk_of == c].max(0) for c in range(chunk_of.max() + 1)])[chunk_of]
        return hi - lo

    bits = np.array([2047.0, 1023.0, 2047.0])
    assert np.all(np.abs(ref["means"] - o) <= per_chunk_range(o) * 0.5 / bits + 1e-5)
    ls = g.log_scales[order].astype(np.float64)
    assert np.all(np.abs(ref["log_scales"] - ls) <= per_chunk_range(ls) * 0.5 / bits + 1e-5)
    col = 0.5 + C0 * g.sh[order, 0].astype(np.float64)
    assert np.all(np.abs(ref["colour"] - col) <= per_chunk_range(col) * 0.5 / 255 + 1e-5)
    assert np.abs(ref["opacity"] - sigmoid(g.opacity_logits[order])).max() <= 0.5 / 255 + 1e-6
    assert_quats_close(ref["quats"], g.quats[order], atol=2e-3)
    k = (degree + 1) ** 2
    rest = g.sh[order, 1:].astype(np.float64).transpose(0, 2, 1).reshape(n, 3 * (k - 1))
    assert np.abs(ref["sh_rest"] - rest).max() <= 8.0 / 255 + 1e-6 + 8.0 / 256

    back = formats.load(path)
    assert back.sh.shape == (n, k, 3)
    np.testing.assert_allclose(back.means, ref["means"], atol=1e-5)
    np.testing.assert_allclose(back.log_scales, ref["log_scales"], atol=1e-5)
    np.testing.assert_allclose(0.5 + C0 * back.sh[:, 0], ref["colour"], atol=1e-5)
    np.testing.assert_allclose(sigmoid(back.opacity_logits), ref["opacity"], atol=1e-5)
    assert_quats_close(back.quats, ref["quats"], atol=1e-5)
    np.testing.assert_allclose(back.sh[:, 1:].transpose(0, 2, 1).reshape(n, -1), ref["sh_rest"], atol=1e-5)


def test_compressed_ply_degree0_has_no_sh_element(tmp_path):
    g = random_gaussians(10, 0)
    path = tmp_path / "s.compressed.ply"
    formats.save(path, g)
    ply = plyfile.PlyData.read(str(path))
    assert [e.name for e in ply.elements] == ["chunk", "vertex"]
    assert len(ply["chunk"].data) == 1
    assert formats.load(path).sh.shape == (10, 1, 3)


# --------------------------------------------------------------------------- dispatch, cameras.json


def test_format_from_name_and_content(tmp_path):
    g = random_gaussians(20, 1)
    for name, fmt in (("a.ply", "ply"), ("a.compressed.ply", "compressed-ply"), ("a.splat", "splat"),
                      ("a.spz", "spz")):
        assert formats.format_for_path(name) == fmt
        formats.save(tmp_path / name, g)
        assert formats.detect_format(tmp_path / name) == fmt
    # The content decides, not the name: a compressed PLY under a plain .ply name.
    formats.save(tmp_path / "plain_name.ply", g, "compressed-ply")
    assert formats.detect_format(tmp_path / "plain_name.ply") == "compressed-ply"
    with pytest.raises(ValueError, match=r"\[splat\] .*a.txt"):
        formats.format_for_path(tmp_path / "a.txt")
    with pytest.raises(ValueError, match="format"):
        formats.save(tmp_path / "a.ply", g, "obj")
    (tmp_path / "scene.spz").mkdir()
    with pytest.raises(IsADirectoryError, match=r"scene\.spz: is a folder, not a scene file"):
        formats.load(tmp_path / "scene.spz")


def test_cameras_json_layout_and_round_trip(tmp_path):
    from splat.camera import Camera
    cams, names = [], []
    for i in range(5):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        w, x, y, z = q
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                      [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                      [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
        w2c = np.eye(4)
        w2c[:3, :3], w2c[:3, 3] = r, rng.normal(size=3)
        wdt, hgt = int(rng.integers(20, 90)), int(rng.integers(20, 90))
        cams.append(Camera(w2c.astype(np.float32), rng.uniform(20, 80), rng.uniform(20, 80),
                           0.5 * wdt, 0.5 * hgt + (3.0 if i == 2 else 0.0), wdt, hgt))
        names.append(f"view_{i}")
    path = tmp_path / "cameras.json"
    formats.save_cameras_json(path, cams, names)
    import json
    data = json.loads(path.read_text())
    for i, (e, cam) in enumerate(zip(data, cams)):
        assert {"id", "img_name", "width", "height", "position", "rotation", "fx", "fy"} <= set(e)
        assert e["id"] == i and e["img_name"] == names[i]
        assert (e["width"], e["height"]) == (cam.width, cam.height)
        # position = camera centre, rotation = camera-to-world (its columns: camera axes in world).
        np.testing.assert_allclose(e["position"], cam.center, atol=1e-5)
        r_w2c = cam.world_to_camera[:3, :3].astype(np.float64)
        np.testing.assert_allclose(np.array(e["rotation"]), r_w2c.T, atol=1e-5)
        assert ("cy" in e) == (i == 2)
    back = formats.load_cameras_json(path)
    for (name, cam), ref, ref_name in zip(back, cams, names):
        assert name == ref_name
        np.testing.assert_allclose(cam.world_to_camera, ref.world_to_camera, atol=1e-5)
        assert (cam.fx, cam.fy, cam.cx, cam.cy) == pytest.approx((ref.fx, ref.fy, ref.cx, ref.cy), rel=1e-6)
    path.write_text('[{"id": 0, "width": 3}]')
    with pytest.raises(ValueError, match=r"cameras.json\[0\].*missing key"):
        formats.load_cameras_json(path)
