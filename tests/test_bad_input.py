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


def test_lossy_dtypes_rejected_lossless_accepted():
    rng = np.random.default_rng()
    s = scene(rng=rng)
    s["means"] = rng.normal(size=(5, 3))  # float64 with bits beyond float32
    with pytest.raises(TypeError, match=r"\] means: dtype float64 cannot be converted"):
        splat.Gaussians(**s)
    s = scene(rng=rng)
    s["means"] = s["means"].astype(np.float64)  # exactly representable: accepted
    g = splat.Gaussians(**s)
    assert g.means.dtype == np.float32 and g.means.flags.c_contiguous
    s = scene(rng=rng)
    s["opacity_logits"] = np.array(["a"] * 5)
    with pytest.raises(TypeError, match=r"\] opacity_logits: expected a float32 array"):
        splat.Gaussians(**s)
    s = scene(rng=rng)
    s["quats"] = np.asfortranarray(s["quats"])  # non-contiguous float32: converted
    s["sh"] = np.ascontiguousarray(np.repeat(s["sh"], 2, axis=0)[::2])
    g = splat.Gaussians(**s)
    assert g.quats.flags.c_contiguous
    s = scene(rng=rng)
    s["log_scales"] = s["log_scales"].astype(np.float16)
    assert splat.Gaussians(**s).log_scales.dtype == np.float32
    s = scene(rng=rng)
    s["means"] = (rng.integers(-5, 5, (5, 3)) * (1 << 25) + 1).astype(np.int64)
    with pytest.raises(TypeError, match=r"\] means: dtype int64"):
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
    with pytest.raises(TypeError, match=r"\] sh_degree: expected an integer"):
        r.forward(g, camera(), sh_degree=1.0)


@pytest.mark.parametrize("name,value,exc", [
    ("fx", 0.0, ValueError), ("fy", -3.0, ValueError), ("fx", np.nan, ValueError),
    ("width", 0, ValueError), ("height", -2, ValueError), ("width", 3.5, TypeError),
    ("cx", np.inf, ValueError), ("fx", "wide", TypeError),
])
def test_bad_camera_names_argument(name, value, exc):
    with pytest.raises(exc, match=rf"\] {name}:"):
        camera(**{name: value})


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
