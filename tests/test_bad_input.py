"""Bad input raises a clear Python exception naming the argument; nothing crashes."""
import numpy as np
import pytest

import splat


def f32(a):
    return np.asarray(a, dtype=np.float32)


def scene(n=5, k=4, rng=None):
    rng = rng or np.random.default_rng()
    return dict(
        means=f32(rng.normal(0, 0.5, (n, 3))),
        log_scales=f32(rng.normal(-2, 0.3, (n, 3))),
        quats=f32(rng.normal(size=(n, 4))),
        opacity_logits=f32(rng.normal(size=n)),
        sh=f32(rng.normal(0, 0.3, (n, k, 3))),
    )


def camera(**over):
    w2c = np.eye(4, dtype=np.float32)
    w2c[2, 3] = 4.0
    kw = dict(world_to_camera=w2c, fx=40.0, fy=42.0, cx=16.0, cy=12.0, width=32, height=24)
    kw.update(over)
    return splat.Camera(**kw)


@pytest.mark.parametrize("name,shape", [
    ("means", (5, 2)), ("means", (5,)), ("log_scales", (5, 4)), ("quats", (5, 3)),
    ("opacity_logits", (5, 1)), ("sh", (5, 4)), ("sh", (5, 4, 2)),
])
def test_wrong_shape_names_argument(name, shape):
    s = scene()
    s[name] = f32(np.random.default_rng().normal(size=shape))
    with pytest.raises(ValueError, match=rf"\] {name}: expected shape"):
        splat.Gaussians(**s)


@pytest.mark.parametrize("name", ["log_scales", "quats", "opacity_logits", "sh"])
def test_mismatched_count_names_argument(name):
    s = scene()
    s[name] = s[name][:3]
    with pytest.raises(ValueError, match=rf"\] {name}: has 3 Gaussians but means has 5"):
        splat.Gaussians(**s)


@pytest.mark.parametrize("name", ["means", "log_scales", "quats", "opacity_logits", "sh"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_names_argument(name, bad):
    s = scene()
    arr = s[name].copy()
    arr.reshape(-1)[np.random.default_rng().integers(arr.size)] = bad
    s[name] = arr
    with pytest.raises(ValueError, match=rf"\] {name}: contains 1 NaN or Inf"):
        splat.Gaussians(**s)


def test_real_arrays_convert_non_numeric_rejected():
    """Any real numeric input is rounded to float32 (the rounding is numpy's, to
    nearest); only non-numeric element types are TypeErrors."""
    rng = np.random.default_rng()
    s = scene(rng=rng)
    s["means"] = rng.normal(size=(5, 3))  # float64 with bits beyond float32: rounded
    g = splat.Gaussians(**s)
    assert g.means.dtype == np.float32 and g.means.flags.c_contiguous
    np.testing.assert_array_equal(g.means, s["means"].astype(np.float32))
    s = scene(rng=rng)
    s["means"] = (rng.integers(-5, 5, (5, 3)) * (1 << 25) + 1).astype(np.int64)  # not exact in float32
    np.testing.assert_array_equal(splat.Gaussians(**s).means, s["means"].astype(np.float32))
    s = scene(rng=rng)
    s["log_scales"] = s["log_scales"].tolist()  # nested Python lists of floats
    np.testing.assert_array_equal(splat.Gaussians(**s).log_scales, np.float32(s["log_scales"]))
    s = scene(rng=rng)
    s["log_scales"] = s["log_scales"].astype(np.float16)
    assert splat.Gaussians(**s).log_scales.dtype == np.float32
    s = scene(rng=rng)
    s["quats"] = np.asfortranarray(s["quats"])  # non-contiguous float32: copied
    s["sh"] = np.ascontiguousarray(np.repeat(s["sh"], 2, axis=0)[::2])
    g = splat.Gaussians(**s)
    assert g.quats.flags.c_contiguous
    s = scene(rng=rng)
    same = s["means"]
    assert splat.Gaussians(**s).means is same  # float32 C-contiguous: not copied
    for bad, what in ((np.array(["a"] * 5), "str"), (np.ones(5, bool), "bool"),
                      (np.ones(5, np.complex64), "complex"), (np.array([None] * 5), "non-numeric"),
                      ([1.0, "2", 3.0, 4.0, 5.0], "str"), ("abcde", "str")):
        s = scene(rng=rng)
        s["opacity_logits"] = bad
        with pytest.raises(TypeError, match=rf"\] opacity_logits: .*{what}"):
            splat.Gaussians(**s)
    s = scene(rng=rng)
    s["means"] = np.full((5, 3), 1e39)  # finite float64, Inf as float32
    with pytest.raises(ValueError, match=r"\] means: 15 value\(s\) beyond the float32 range"):
        splat.Gaussians(**s)


def test_zero_quaternion_rejected():
    s = scene()
    s["quats"][2] = 0
    with pytest.raises(ValueError, match=r"\] quats: a quaternion has zero norm"):
        splat.Gaussians(**s)


def test_sh_coefficient_count():
    s = scene(k=5)
    with pytest.raises(ValueError, match=r"\] sh: K = 5"):
        splat.Gaussians(**s)
    g = splat.Gaussians(**scene(k=4))
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    with pytest.raises(ValueError, match=r"\] sh: degree 2 needs 9 coefficients"):
        r.forward(g, camera(), sh_degree=2)
    with pytest.raises(ValueError, match=r"\] sh_degree: must be in 0..3"):
        r.forward(g, camera(), sh_degree=4)
    with pytest.raises(ValueError, match=r"\] sh_degree: expected an integer, got 1.5"):
        r.forward(g, camera(), sh_degree=1.5)
    with pytest.raises(TypeError, match=r"\] sh_degree: expected a number, got str"):
        r.forward(g, camera(), sh_degree="1")
    assert r.forward(g, camera(), sh_degree=1.0).image.shape == (24, 32, 3)  # integral: accepted


@pytest.mark.parametrize("name,value,exc", [
    ("fx", 0.0, ValueError), ("fy", -3.0, ValueError), ("fx", np.nan, ValueError),
    ("width", 0, ValueError), ("height", -2, ValueError), ("width", 3.5, ValueError),
    ("cx", np.inf, ValueError), ("fx", "wide", TypeError), ("fx", "100", TypeError),
    ("fx", True, TypeError), ("width", "64", TypeError), ("width", np.bool_(True), TypeError),
    ("fy", 1e39, ValueError), ("cy", 2j, TypeError), ("height", 2.0 ** 32, ValueError),
    ("fx", None, TypeError), ("width", [64], TypeError),
])
def test_bad_camera_names_argument(name, value, exc):
    with pytest.raises(exc, match=rf"\] {name}:"):
        camera(**{name: value})


def test_camera_numbers_one_rule():
    """Any real number for the float fields; any integral real number for width / height."""
    from fractions import Fraction
    rng = np.random.default_rng()
    fx = float(rng.uniform(20, 60))
    w2c = np.eye(4)  # float64
    w2c[:3, 3] = rng.normal(size=3)
    for width, height in ((32, 24), (32.0, 24.0), (np.int64(32), np.uint16(24)),
                          (np.float32(32), np.array(24.0))):
        cam = splat.Camera(w2c, np.float32(fx), Fraction(85, 2), np.array(16.5), 12, width, height)
        assert (cam.width, cam.height) == (32, 24) and type(cam.width) is int and type(cam.height) is int
        assert cam.fx == float(np.float32(fx)) and cam.fy == 42.5 and cam.cx == 16.5 and cam.cy == 12.0
        np.testing.assert_array_equal(cam.world_to_camera, w2c.astype(np.float32))


def test_float64_and_sequences_render_as_float32():
    """float64 Gaussians, a float64 look_at camera and a tuple background render exactly
    like their float32 roundings (the conversion is numpy's nearest rounding)."""
    from splat.data.synthetic import look_at
    rng = np.random.default_rng()
    s64 = {k: v.astype(np.float64) + rng.normal(0, 1e-9, v.shape) for k, v in scene(rng=rng).items()}
    s32 = {k: v.astype(np.float32) for k, v in s64.items()}
    w2c = look_at(rng.normal(size=3) * 0.2 + [0.0, 0.0, -4.0], target=rng.normal(size=3) * 0.1, up=(0, -1, 0))
    assert w2c.dtype == np.float64
    bg = tuple(float(x) for x in rng.uniform(0, 1, 3))
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    a = r.forward(splat.Gaussians(**s64), splat.Camera(w2c, 40.0, 40.0, 16, 12, 32, 24), 1, bg)
    b = r.forward(splat.Gaussians(**s32), splat.Camera(w2c.astype(np.float32), 40.0, 40.0, 16, 12, 32, 24),
                  1, np.asarray(bg, np.float32))
    np.testing.assert_array_equal(a.image, b.image)
    assert a.alpha.max() > 0.01  # the scene is in view
    empty = a.alpha == 0.0  # uncovered pixels show the tuple's colour
    assert empty.any()
    np.testing.assert_allclose(a.image[empty], np.broadcast_to(np.float32(bg), (int(empty.sum()), 3)), atol=1e-6)
    for bad, exc in (("white", TypeError), ((1.0, 1.0), ValueError), ((0.1, np.nan, 0.2), ValueError)):
        with pytest.raises(exc, match=r"\] background:"):
            r.forward(splat.Gaussians(**s32), splat.Camera(w2c, 40.0, 40.0, 16, 12, 32, 24), 1, bad)
    with pytest.raises(ValueError, match=r"\] target: must differ from eye"):
        look_at((1.0, 2.0, 3.0), (1, 2, 3))
    with pytest.raises(TypeError, match=r"\] eye:"):
        look_at("far away")


def test_bad_camera_matrix():
    with pytest.raises(ValueError, match=r"\] world_to_camera: expected shape \[4, 4\]"):
        camera(world_to_camera=np.eye(3, dtype=np.float32))
    bad = np.eye(4, dtype=np.float32)
    bad[3, 0] = 1.0
    with pytest.raises(ValueError, match=r"\] world_to_camera: last row"):
        camera(world_to_camera=bad)
    bad = np.eye(4, dtype=np.float32)
    bad[0, 3] = np.nan
    with pytest.raises(ValueError, match=r"\] world_to_camera: contains"):
        camera(world_to_camera=bad)
    with pytest.raises(ValueError, match=r"\] c2w_opengl"):
        splat.Camera.from_blender(np.eye(3), 0.7, 32, 32)
    with pytest.raises(ValueError, match=r"\] camera_angle_x"):
        splat.Camera.from_blender(np.eye(4), 0.0, 32, 32)


def test_rasterizer_argument_types():
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    g = splat.Gaussians(**scene())
    with pytest.raises(TypeError, match=r"\] gaussians"):
        r.forward(scene(), camera())
    with pytest.raises(TypeError, match=r"\] camera"):
        r.forward(g, np.eye(4))
    with pytest.raises(ValueError, match=r"\] background: expected shape \[3\]"):
        r.forward(g, camera(), sh_degree=1, background=(1.0, 1.0))
    with pytest.raises(RuntimeError, match=r"backward: call forward\(\) first"):
        splat.Rasterizer(splat.BackendConfig(backend="cpu")).backward(np.ones((24, 32, 3), np.float32))
    out = r.forward(g, camera(), sh_degree=1)
    with pytest.raises(ValueError, match=r"\] d_image: expected shape \[24, 32, 3\]"):
        r.backward(np.ones((32, 24, 3), np.float32))
    with pytest.raises(ValueError, match=r"\] d_alpha: expected shape"):
        r.backward(np.ones_like(out.image), np.ones((3, 3), np.float32))
    with pytest.raises(ValueError, match=r"\] d_image: contains"):
        r.backward(np.full_like(out.image, np.nan))
    with pytest.raises(TypeError, match=r"\] config"):
        splat.Rasterizer("cpu")


def test_native_guards_reject_bypassed_checks():
    """The native module itself refuses inconsistent arrays (no crash)."""
    from splat import _core
    r = _core.Rasterizer(splat.BackendConfig(backend="cpu"))
    s = scene()
    with pytest.raises(ValueError, match="log_scales"):
        r.forward(s["means"], s["log_scales"][:2], s["quats"], s["opacity_logits"], s["sh"],
                  np.eye(4, dtype=np.float32), 10.0, 10.0, 5.0, 5.0, 10, 10, 1, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="sh_degree"):
        r.forward(s["means"], s["log_scales"], s["quats"], s["opacity_logits"], s["sh"],
                  np.eye(4, dtype=np.float32), 10.0, 10.0, 5.0, 5.0, 10, 10, 3, np.ones(3, np.float32))
    with pytest.raises(TypeError):
        r.forward(s["means"].astype(np.float64), s["log_scales"], s["quats"], s["opacity_logits"], s["sh"],
                  np.eye(4, dtype=np.float32), 10.0, 10.0, 5.0, 5.0, 10, 10, 1, np.ones(3, np.float32))


def test_unavailable_backend_is_a_clear_error():
    for backend in ("cuda", "metal"):
        ok, reason = splat.backend_available(backend)
        if ok:
            continue
        with pytest.raises(RuntimeError, match=rf"\[device\] backend '{backend}' is not available"):
            splat.Rasterizer(splat.BackendConfig(backend=backend))


def test_empty_scene_renders_background():
    rng = np.random.default_rng()
    g = splat.Gaussians(**scene(n=0))
    bg = f32(rng.uniform(0.1, 0.9, 3))
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    out = r.forward(g, camera(width=37, height=21), sh_degree=1, background=bg)
    assert out.image.shape == (21, 37, 3) and out.radii.shape == (0,)
    np.testing.assert_array_equal(out.image, np.broadcast_to(bg, (21, 37, 3)))
    np.testing.assert_array_equal(out.alpha, 0.0)
    grads = r.backward(f32(rng.normal(size=(21, 37, 3))))
    assert grads.means.shape == (0, 3) and grads.sh.shape == (0, 4, 3)
