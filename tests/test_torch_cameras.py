"""splat.torch checks its cameras as splat.Camera does: a non-finite viewmat or K, a
focal length <= 0 or a viewmat that is not rigid is a ValueError naming the argument and
the camera index (rasterize and gsplat's rasterization), where it used to render black;
rigid cameras made in float32 (an inverted camera-to-world) still render."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE  # noqa: E402

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch: the torch extra)")
pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

W, H = 16, 12


def rotation(rng) -> np.ndarray:
    q = rng.normal(size=4)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def cameras(rng, c, reach=1.0):
    """c rigid viewmats (float32 inverses of camera-to-world matrices, translations up
    to `reach`) and Ks."""
    c2w = np.tile(np.eye(4), (c, 1, 1))
    for i in range(c):
        c2w[i, :3, :3] = rotation(rng)
        c2w[i, :3, 3] = rng.uniform(-reach, reach, 3)
    viewmats = torch.linalg.inv(torch.tensor(c2w, dtype=torch.float32))
    f = rng.uniform(5, 40, (c, 2))
    Ks = torch.tensor([[[fx, 0, W / 2], [0, fy, H / 2], [0, 0, 1]] for fx, fy in f], dtype=torch.float32)
    return viewmats, Ks


def gaussians(n=6):
    g = torch.Generator().manual_seed(0)
    return dict(means=torch.randn(n, 3, generator=g), quats=torch.randn(n, 4, generator=g),
                log_scales=torch.full((n, 3), -2.0), opacity_logits=torch.zeros(n),
                sh=torch.rand(n, 1, 3, generator=g))


def render(viewmats, Ks, gsplat=False):
    import splat.torch as st_
    g = gaussians()
    if gsplat:
        return st_.rasterization(g["means"], g["quats"], g["log_scales"].exp(), torch.sigmoid(g["opacity_logits"]),
                                 g["sh"][:, 0], viewmats, Ks, W, H)
    return st_.rasterize(g["means"], g["quats"], g["log_scales"], g["opacity_logits"], g["sh"], viewmats, Ks,
                         W, H, sh_degree=0)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), c=st.integers(1, 4), data=st.data())
def test_bad_cameras_are_a_value_error_naming_the_argument_and_camera(seed, c, data):
    rng = np.random.default_rng(seed)
    viewmats, Ks = cameras(rng, c)
    i = data.draw(st.integers(0, c - 1), label="camera")
    kind = data.draw(st.sampled_from(["viewmats value", "Ks value", "focal", "scale", "shear", "reflection",
                                      "last row"]), label="kind")
    if kind in ("viewmats value", "Ks value"):
        value = data.draw(st.sampled_from([float("nan"), float("inf"), float("-inf")]), label="value")
        r, col = rng.integers(0, 4 if kind == "viewmats value" else 3, 2)
        (viewmats if kind == "viewmats value" else Ks)[i, r, col] = value
        name = kind.split()[0]
    elif kind == "focal":
        axis = data.draw(st.integers(0, 1), label="axis")
        Ks[i, axis, axis] = data.draw(st.floats(-1e6, 0.0), label="f")
        name = "Ks"
    else:
        m = torch.eye(4)
        if kind == "scale":
            m[:3, :3] *= data.draw(st.floats(1.01, 100.0) | st.floats(1e-3, 0.99), label="scale")
        elif kind == "shear":
            m[0, 1] = data.draw(st.floats(0.01, 10.0), label="shear")
        elif kind == "reflection":
            m[rng.integers(0, 3)] *= -1
        viewmats[i] = m @ viewmats[i]
        if kind == "last row":
            viewmats[i] = viewmats[i].T.clone()   # a transposed matrix: the translation in the last row
            viewmats[i, :3, 3] = 0.0
            if not viewmats[i, 3, :3].abs().max() > 1e-2:
                viewmats[i, 3, 0] = 0.5
        name = "viewmats"
    gsplat = data.draw(st.booleans(), label="gsplat")
    with pytest.raises(ValueError, match=rf"^\[splat\] {name}\[{i}\]: "):
        render(viewmats, Ks, gsplat)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), c=st.integers(1, 4), reach=st.sampled_from([1.0, 100.0, 1e4]))
def test_rigid_float32_cameras_render(seed, c, reach):
    viewmats, Ks = cameras(np.random.default_rng(seed), c, reach)
    colors, alphas, meta = render(viewmats, Ks)
    assert colors.shape == (c, H, W, 3) and torch.isfinite(colors).all()


def test_nan_viewmat_was_a_black_image():
    """The case as reported: a NaN in viewmats (or Ks), an Inf in viewmats."""
    viewmats, Ks = cameras(np.random.default_rng(1), 2)
    for vm, k, name in ((float("nan"), None, "viewmats"), (float("inf"), None, "viewmats"),
                        (None, float("nan"), "Ks")):
        v, kk = viewmats.clone(), Ks.clone()
        if vm is not None:
            v[1, 0, 3] = vm
        else:
            kk[1, 0, 0] = k
        with pytest.raises(ValueError, match=rf"{name}\[1\]: not finite"):
            render(v, kk)


def test_checked_cameras_are_remembered_by_value():
    """A camera that passed is remembered by its values (a dataset's views are checked
    once): the same tensor changed in place to a bad matrix is checked again and
    refused, a new size makes new cameras, and the memory stays bounded."""
    from splat.torch import _render
    viewmats, Ks = cameras(np.random.default_rng(2), 2)
    render(viewmats, Ks)
    viewmats[1, 0, 0] *= 1.5  # a scale: not rigid
    with pytest.raises(ValueError, match=r"viewmats\[1\]: not a rigid"):
        render(viewmats, Ks)
    vm = viewmats.numpy().astype(np.float64)
    vm[1, 0, 0] /= 1.5
    k = Ks.numpy().astype(np.float64)
    a = _render._checked_cameras(vm, k, W, H, 0.01, 1e10)
    assert _render._checked_cameras(vm, k, W, H, 0.01, 1e10) is a
    b = _render._checked_cameras(vm, k, W + 1, H, 0.01, 1e10)
    assert b is not a and b[0].width == W + 1
    for i in range(_render._CAMERA_CACHE_SIZE + 10):
        k2 = k.copy()
        k2[:, 0, 0] += i + 1
        _render._checked_cameras(vm, k2, W, H, 0.01, 1e10)
    assert len(_render._CAMERA_CACHE) <= _render._CAMERA_CACHE_SIZE
