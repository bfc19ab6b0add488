"""Standard 3DGS PLY files and atomic writes."""
from __future__ import annotations

import os
import stat
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import splat  # noqa: E402,F401

from splat.gaussians import Gaussians  # noqa: E402
from splat.io import atomic_write, atomic_write_bytes, atomic_write_text, load_ply, save_ply  # noqa: E402

plyfile = pytest.importorskip("plyfile")
rng = np.random.default_rng()


def random_gaussians(n, degree):
    k = (degree + 1) ** 2
    return Gaussians(
        means=rng.normal(size=(n, 3)).astype(np.float32),
        log_scales=rng.uniform(-5, -1, size=(n, 3)).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        opacity_logits=rng.normal(size=n).astype(np.float32),
        sh=rng.normal(size=(n, k, 3)).astype(np.float32),
    )


def expected_names(degree):
    k = (degree + 1) ** 2
    return (["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
            + [f"f_rest_{i}" for i in range(3 * (k - 1))]
            + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def assert_same(a: Gaussians, b: Gaussians):
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == np.float32
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_round_trip_and_layout(tmp_path, degree):
    n = int(rng.integers(1, 200))
    g = random_gaussians(n, degree)
    p = tmp_path / "g.ply"
    save_ply(p, g)
    assert_same(load_ply(p), g)

    data = p.read_bytes()
    names = expected_names(degree)
    header = ("ply\nformat binary_little_endian 1.0\n" f"element vertex {n}\n"
              + "".join(f"property float {x}\n" for x in names) + "end_header\n").encode()
    assert data.startswith(header)
    assert len(data) == len(header) + n * len(names) * 4
    body = np.frombuffer(data[len(header):], dtype="<f4").reshape(n, len(names))
    np.testing.assert_array_equal(body[:, :3], g.means)
    np.testing.assert_array_equal(body[:, 3:6], 0.0)

    # an independent reader sees the standard property names and values
    ply = plyfile.PlyData.read(str(p))
    v = ply["vertex"]
    assert [prop.name for prop in v.properties] == names
    assert all(v.data.dtype[x] == np.dtype("<f4") for x in names)
    k = (degree + 1) ** 2
    for c in range(3):
        np.testing.assert_array_equal(v[f"f_dc_{c}"], g.sh[:, 0, c])
        for j in range(1, k):   # channel-major: all of R's rest coefficients, then G's, then B's
            np.testing.assert_array_equal(v[f"f_rest_{c * (k - 1) + j - 1}"], g.sh[:, j, c])
    np.testing.assert_array_equal(v["opacity"], g.opacity_logits)
    for i in range(3):
        np.testing.assert_array_equal(v[f"scale_{i}"], g.log_scales[:, i])
    for i in range(4):
        np.testing.assert_array_equal(v[f"rot_{i}"], g.quats[:, i])

    # saving what was loaded reproduces the bytes
    p2 = tmp_path / "g2.ply"
    save_ply(p2, load_ply(p))
    assert p2.read_bytes() == data


def test_sh_degree_truncates_and_pads(tmp_path):
    g = random_gaussians(17, 2)
    save_ply(tmp_path / "a.ply", g, sh_degree=1)
    a = load_ply(tmp_path / "a.ply")
    np.testing.assert_array_equal(a.sh, g.sh[:, :4])
    save_ply(tmp_path / "b.ply", g, sh_degree=3)
    b = load_ply(tmp_path / "b.ply")
    assert b.sh.shape == (17, 16, 3)
    np.testing.assert_array_equal(b.sh[:, :9], g.sh)
    np.testing.assert_array_equal(b.sh[:, 9:], 0.0)
    with pytest.raises(ValueError, match="sh_degree"):
        save_ply(tmp_path / "c.ply", g, sh_degree=4)
    with pytest.raises(TypeError, match="gaussians"):
        save_ply(tmp_path / "c.ply", {"means": 1})


def test_empty(tmp_path):
    g = random_gaussians(0, 3)
    save_ply(tmp_path / "e.ply", g)
    e = load_ply(tmp_path / "e.ply")
    assert len(e) == 0 and e.sh.shape == (0, 16, 3)


@pytest.mark.parametrize("variant", ["shuffled", "big_endian", "ascii"])
def test_loads_files_from_other_tools(tmp_path, variant):
    """Any property order, double/float types, extra properties, other encodings."""
    n, degree = 23, 3
    g = random_gaussians(n, degree)
    k = (degree + 1) ** 2
    cols = {"x": g.means[:, 0], "y": g.means[:, 1], "z": g.means[:, 2],
            "opacity": g.opacity_logits}
    for c in range(3):
        cols[f"f_dc_{c}"] = g.sh[:, 0, c]
        for j in range(1, k):
            cols[f"f_rest_{c * (k - 1) + j - 1}"] = g.sh[:, j, c]
    for i in range(3):
        cols[f"scale_{i}"] = g.log_scales[:, i]
    for i in range(4):
        cols[f"rot_{i}"] = g.quats[:, i]
    names = list(cols)
    rng.shuffle(names)
    dtype = [(x, "f8" if x in ("x", "opacity", "rot_2") else "f4") for x in names] + [("red", "u1")]
    arr = np.empty(n, dtype=dtype)
    for x in names:
        arr[x] = cols[x]
    arr["red"] = rng.integers(0, 256, size=n)
    el = plyfile.PlyElement.describe(arr, "vertex")
    extra = plyfile.PlyElement.describe(np.zeros(2, dtype=[("a", "i4")]), "camera")
    kwargs = {"text": variant == "ascii"}
    if variant == "big_endian":
        kwargs["byte_order"] = ">"
    path = tmp_path / "other.ply"
    plyfile.PlyData([el, extra] if variant != "shuffled" else [el], comments=["made elsewhere"],
                    **kwargs).write(str(path))
    assert_same(load_ply(path), g)


def test_vertex_after_another_element(tmp_path):
    g = random_gaussians(5, 1)
    src = tmp_path / "g.ply"
    save_ply(src, g)
    v = plyfile.PlyData.read(str(src))["vertex"]
    cam = plyfile.PlyElement.describe(np.zeros(3, dtype=[("a", "f8"), ("b", "u1")]), "camera")
    out = tmp_path / "h.ply"
    plyfile.PlyData([cam, plyfile.PlyElement.describe(v.data, "vertex")]).write(str(out))
    assert_same(load_ply(out), g)


def test_bad_files_name_the_path(tmp_path):
    g = random_gaussians(10, 1)
    p = tmp_path / "g.ply"
    save_ply(p, g)
    data = p.read_bytes()
    bad = tmp_path / "bad.ply"
    bad.write_bytes(data[:-5])
    with pytest.raises(ValueError, match="bad.ply.*truncated"):
        load_ply(bad)
    bad.write_bytes(b"not a ply file at all")
    with pytest.raises(ValueError, match="bad.ply"):
        load_ply(bad)
    bad.write_bytes(data.replace(b"property float opacity\n", b"property float opacityx\n"))
    with pytest.raises(ValueError, match="opacity"):
        load_ply(bad)
    bad.write_bytes(data.replace(b"property float f_rest_8\n", b"property float other\n"))
    with pytest.raises(ValueError, match="f_rest"):
        load_ply(bad)
    with pytest.raises(FileNotFoundError, match="missing.ply"):
        load_ply(tmp_path / "missing.ply")
    # non-finite values are rejected by Gaussians, with the file named
    arr = np.frombuffer(data[data.index(b"end_header\n") + 11:], dtype="<f4").copy()
    arr[0] = np.nan
    bad.write_bytes(data[: data.index(b"end_header\n") + 11] + arr.tobytes())
    with pytest.raises(ValueError, match="bad.ply.*means"):
        load_ply(bad)


def test_atomic_write_replaces_or_keeps(tmp_path):
    p = tmp_path / "out.bin"
    payload = rng.bytes(1000)
    atomic_write_bytes(p, payload)
    assert p.read_bytes() == payload
    mode = stat.S_IMODE(os.stat(p).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask

    with pytest.raises(RuntimeError):
        with atomic_write(p) as f:
            f.write(b"partial")
            raise RuntimeError("boom")
    assert p.read_bytes() == payload                 # old content intact
    assert sorted(os.listdir(tmp_path)) == ["out.bin"]  # temp file removed

    atomic_write_text(tmp_path / "t.txt", "héllo\nworld\n")
    assert (tmp_path / "t.txt").read_bytes() == "héllo\nworld\n".encode()
    with atomic_write(tmp_path / "t.txt", "w") as f:
        f.write("replaced")
    assert (tmp_path / "t.txt").read_text() == "replaced"
    os.chmod(p, 0o600)
    atomic_write_bytes(p, b"x")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600    # keeps the replaced file's mode

    with pytest.raises(FileExistsError):
        with atomic_write(p, "xb") as f:
            f.write(b"no")
    with atomic_write(tmp_path / "new.bin", "xb") as f:
        f.write(b"yes")
    assert (tmp_path / "new.bin").read_bytes() == b"yes"
    with pytest.raises(ValueError, match="mode"):
        with atomic_write(p, "rb"):
            pass
    with pytest.raises(FileNotFoundError):
        atomic_write_bytes(tmp_path / "no" / "such" / "dir.bin", b"")
    assert sorted(os.listdir(tmp_path)) == ["new.bin", "out.bin", "t.txt"]


def test_save_ply_is_atomic_on_error(tmp_path, monkeypatch):
    p = tmp_path / "g.ply"
    g = random_gaussians(8, 0)
    save_ply(p, g)
    before = p.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", boom)   # fails after the data is written, before the rename
    with pytest.raises(OSError):
        save_ply(p, random_gaussians(8, 0))
    monkeypatch.undo()
    assert p.read_bytes() == before
    assert os.listdir(tmp_path) == ["g.ply"]
