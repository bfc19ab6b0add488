"""The float64 reference rasterizer: analytic backward vs finite differences, closed forms.

Finite differences and the piecewise forward
--------------------------------------------
The forward is smooth only while its discrete decisions stay fixed: visibility,
integer radii and tile rectangles, the per-tile lists, which splats a pixel skips
(sigma < 0, sigma >= 5.55, alpha < 1/255) and where it stops (T < 1e-4), and which
clamps are active (alpha at 0.999, colour at 0, t.x/t.z and t.y/t.z at the
field-of-view limit). `RefForward.decisions()` returns all of them. A coordinate is
checked only if the forward at x + h and at x - h makes exactly the same decisions as
at x; otherwise it is skipped (and counted: most coordinates must be checked). With
h = 1e-6 max(1, |x|) skips are rare.

Every random test draws a fresh seed and prints it in its assertion messages;
SPLAT_TEST_SEED=<seed> replays it.
"""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _scenes import empty_scene, load_reference, make_rng, random_scene  # noqa: E402

ref = load_reference()
forward, backward = ref.forward, ref.backward

REL_TOL = 1e-5
GRAD_FLOOR = 1e-2   # norms below this are compared absolutely (FD noise is ~1e-8 per coordinate)
MIN_CHECKED = 0.5   # at least this fraction of the coordinates of each array must be checked


def same_decisions(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


def central_differences(loss_and_decisions, x: np.ndarray, base_decisions: dict):
    """FD gradient of loss_and_decisions(x) -> (loss, decisions) w.r.t. every entry of x.

    Returns (fd, checked): fd is nan where skipped (a decision changed)."""
    fd = np.full(x.shape, np.nan)
    for idx in np.ndindex(x.shape):
        h = 1e-6 * max(1.0, abs(x[idx]))
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        lp, dp = loss_and_decisions(xp)
        lm, dm = loss_and_decisions(xm)
        if same_decisions(dp, base_decisions) and same_decisions(dm, base_decisions):
            fd[idx] = (lp - lm) / (2.0 * h)
    return fd, ~np.isnan(fd)


def compare(name, analytic, fd, checked, msg):
    """Norm-wise relative error over the checked coordinates; returns it."""
    assert checked.mean() >= MIN_CHECKED, f"{name}: only {checked.sum()}/{checked.size} checked; {msg}"
    diff = np.linalg.norm(analytic[checked] - fd[checked])
    err = diff / max(np.linalg.norm(analytic[checked]), GRAD_FLOOR)
    assert err <= REL_TOL, (f"{name}: FD relative error {err:.3e} (|analytic| "
                            f"{np.linalg.norm(analytic):.3e}, |diff| {diff:.3e}); {msg}")
    return err


def fd_check_scene(scene, rng, msg):
    """Check every input array of `scene` against FD of sum(image R1) + sum(alpha R2)."""
    out = forward(*scene.args())
    R1 = rng.normal(size=out.image.shape)
    R2 = rng.normal(size=out.alpha.shape)
    grads = backward(out, R1, R2)
    base = out.decisions()
    errors = {}
    for name in scene.PARAMS:
        def loss(x, name=name):
            o = forward(*scene.replace(**{name: x}).args())
            return np.sum(o.image * R1) + np.sum(o.alpha * R2), o.decisions()
        fd, checked = central_differences(loss, getattr(scene, name), base)
        errors[name] = compare(name, getattr(grads, name), fd, checked, msg)
    return out, grads, errors


SCENES = {
    # ordinary: overlapping translucent splats, some off-screen beyond the fov clamp,
    # strong view dependence (some colours clamped at 0), unused SH coefficients
    "generic": dict(n=8, spread=1.9, pixel_sigma=(1.0, 3.5), sh_scale=0.8, extra_sh=2),
    # opaque splats stacked on a few pixels: alpha clamped at 0.999, early stops
    "opaque": dict(n=9, snap_pixels=3, logits=(8.0, 12.0), pixel_sigma=(1.5, 4.0)),
}


@pytest.mark.parametrize("sh_degree", [0, 1, 2, 3])
@pytest.mark.parametrize("kind", sorted(SCENES))
def test_backward_matches_finite_differences(kind, sh_degree):
    rng, seed = make_rng()
    msg = f"scene {kind}, sh_degree {sh_degree}, seed {seed} (SPLAT_TEST_SEED={seed} replays)"
    scene = random_scene(rng, sh_degree=sh_degree, width=24, height=20, **SCENES[kind])
    out, grads, errors = fd_check_scene(scene, rng, msg)
    print(f"{kind} deg {sh_degree} seed {seed}: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    assert np.any(out.radii > 0), msg
    k_used = (sh_degree + 1) ** 2
    assert np.all(grads.sh[:, k_used:] == 0.0), msg
    if kind == "opaque":
        d = out.decisions()
        assert d["alpha_clamped"].any(), f"scene made no clamped alpha; {msg}"
        assert any(stopped_pixels(out, tb).any() for tb in out.tiles), f"scene made no early stop; {msg}"


def stopped_pixels(out, tb) -> np.ndarray:
    """[P] bool: the pixel's walk stopped early, i.e. some splat of the list that passed
    every skip test was not blended (contributors = passing entries before the stop)."""
    if len(tb.ids) == 0:
        return np.zeros(len(tb.px), dtype=bool)
    s = ref.splat_alphas(out.means2d, out.conics, out.opacities, tb.ids, tb.px, tb.py)
    return (s.passes & ~tb.contrib).any(axis=0)


def test_rasterize_stage_matches_finite_differences():
    """dL/d means2d (pixel units), conics, colours and opacities of the blend stage alone."""
    rng, seed = make_rng()
    msg = f"seed {seed}"
    scene = random_scene(rng, n=8, sh_degree=1, width=24, height=20, spread=1.5)
    out = forward(*scene.args())
    R1 = rng.normal(size=out.image.shape)
    R2 = rng.normal(size=out.alpha.shape)
    grads = backward(out, R1, R2)
    vis = out.radii > 0
    stage = dict(means2d=out.means2d, conics=out.conics, colors=out.colors, opacities=out.opacities)

    def run(**changed):
        a = {**stage, **changed}
        image, alpha, n_contrib, _, tiles = ref.rasterize(
            a["means2d"], a["conics"], a["colors"], a["opacities"], out.depths, out.tile_rects,
            vis, scene.width, scene.height, scene.background)
        dec = {"n": n_contrib, "contrib": np.concatenate([t.contrib.ravel() for t in tiles]),
               "clamp": np.concatenate([(ref.splat_alphas(
                   a["means2d"], a["conics"], a["opacities"], t.ids, t.px, t.py).raw > 0.999).ravel()
                   & t.contrib.ravel() for t in tiles])}
        return np.sum(image * R1) + np.sum(alpha * R2), dec

    _, base = run()
    for name, value in stage.items():
        fd, checked = central_differences(lambda x, name=name: run(**{name: x}), value, base)
        compare(name, getattr(grads, name), fd, checked, msg)


def test_literal_pixel_loop_agrees_with_tiled_blend():
    """The vectorized tile blend equals the one-splat-at-a-time loop of the spec."""
    rng, seed = make_rng()
    scene = random_scene(rng, n=30, sh_degree=2, width=40, height=36, snap_pixels=4,
                         logits=(-2.0, 12.0), pixel_sigma=(1.0, 6.0), spread=1.8)
    out = forward(*scene.args())
    for j in range(scene.height):
        for i in range(scene.width):
            rgb, alpha, n, T = ref.blend_pixel_literal(
                out.means2d, out.conics, out.colors, out.opacities, out.depths, out.tile_rects,
                out.radii > 0, out.background, i, j)
            where = f"pixel ({i},{j}), seed {seed}"
            assert n == out.n_contrib[j, i], where
            np.testing.assert_allclose(rgb, out.image[j, i], rtol=0, atol=1e-12, err_msg=where)
            np.testing.assert_allclose([alpha, T], [out.alpha[j, i], out.final_T[j, i]],
                                       rtol=0, atol=1e-12, err_msg=where)
    assert any(stopped_pixels(out, tb).any() for tb in out.tiles), f"no early stop; seed {seed}"


# ---------------------------------------------------------------- closed forms

def facing_scene(sh, sh_degree, logit=1.0, quat=(1.0, 0.0, 0.0, 0.0), pixel_std=2.0):
    """One isotropic Gaussian 5 units in front of an identity camera, projecting onto the
    centre of pixel (16, 16) of a 32x32 image."""
    f, z = 20.0, 5.0
    s = pixel_std * z / f
    return SimpleNamespace(
        means=np.array([[0.0, 0.0, z]]), log_scales=np.full((1, 3), np.log(s)),
        quats=np.array([quat]), opacity_logits=np.array([logit]), sh=np.asarray(sh)[None],
        world_to_camera=np.eye(4), fx=f, fy=f, cx=16.5, cy=16.5, width=32, height=32,
        sh_degree=sh_degree, background=np.array([0.2, 0.4, 0.6]))


def test_isotropic_gaussian_facing_camera():
    rng, seed = make_rng()
    sh = rng.normal(scale=0.5, size=(4, 3))
    quat = rng.normal(size=4)                  # an isotropic Gaussian ignores its rotation
    logit = 1.3
    sc = facing_scene(sh, 1, logit, quat, pixel_std=2.0)
    out = forward(sc, sc, 1, sc.background)
    var = 2.0 ** 2 + 0.3                       # (f s / z)^2 + dilation
    o = 1.0 / (1.0 + np.exp(-logit))
    # view direction is +z: basis (C0, -C1 y, C1 z, -C1 x) = (C0, 0, C1, 0)
    colour = np.maximum(0.28209479177387814 * sh[0] + 0.4886025119029199 * sh[2] + 0.5, 0.0)
    msg = f"seed {seed}"
    np.testing.assert_allclose(out.means2d[0], [16.5, 16.5], atol=1e-12, err_msg=msg)
    np.testing.assert_allclose(out.conics[0], [1 / var, 0.0, 1 / var], atol=1e-12, err_msg=msg)
    np.testing.assert_allclose(out.colors[0], colour, atol=1e-12, err_msg=msg)
    assert out.depths[0] == 5.0
    assert out.radii[0] == int(np.ceil(3.0 * np.sqrt(var + np.sqrt(0.1)))), msg
    bg = sc.background
    np.testing.assert_allclose(out.image[16, 16], o * colour + (1 - o) * bg, atol=1e-12, err_msg=msg)
    np.testing.assert_allclose(out.alpha[16, 16], o, atol=1e-12, err_msg=msg)
    a1 = o * np.exp(-0.5 / var)                # one pixel to the right: dx = -1
    np.testing.assert_allclose(out.image[16, 17], a1 * colour + (1 - a1) * bg, atol=1e-12, err_msg=msg)
    a2 = o * np.exp(-0.5 * 8.0 / var)          # two pixels diagonally: dx = dy = -2
    np.testing.assert_allclose(out.alpha[18, 18], a2, atol=1e-12, err_msg=msg)
    assert out.n_contrib[16, 16] == 1 and out.n_contrib[0, 0] == 0
    np.testing.assert_allclose(out.image[0, 0], bg, atol=0)   # sigma = 0.5*2*16^2/4.3 > 5.55


def test_opacity_clamped_at_0999():
    sc = facing_scene(np.zeros((1, 3)), 0, logit=20.0)
    out = forward(sc, sc, 0, sc.background)
    np.testing.assert_allclose(out.alpha[16, 16], 0.999, atol=1e-15)
    g = backward(out, np.zeros((32, 32, 3)), (np.arange(32)[:, None] == 16) & (np.arange(32) == 16))
    assert g.opacity_logits[0] == 0.0 and np.all(g.means2d == 0.0)


def test_empty_scene_renders_background():
    sc = empty_scene(24, 20, k=4)
    for out in (forward(*sc.args()), forward(sc, sc, sc.sh_degree, sc.background)):
        np.testing.assert_array_equal(out.image, np.broadcast_to(sc.background, (20, 24, 3)))
        np.testing.assert_array_equal(out.alpha, 0.0)
        np.testing.assert_array_equal(out.final_T, 1.0)
        np.testing.assert_array_equal(out.n_contrib, 0)
        assert out.radii.shape == (0,) and out.radii.dtype == np.int32
        g = backward(out, np.ones((20, 24, 3)), np.ones((20, 24)))
        assert g.means.shape == (0, 3) and g.quats.shape == (0, 4) and g.sh.shape == (0, 4, 3)
        assert g.opacity_logits.shape == (0,) and g.means2d.shape == (0, 2)


def test_gaussian_behind_camera_is_invisible():
    rng, seed = make_rng()
    scene = random_scene(rng, n=3, sh_degree=1, width=24, height=20)
    W = scene.world_to_camera
    # camera-space depths -2 and 0.005 (below near = 0.01), both on the optical axis
    behind = (np.array([[0.0, 0.0, -2.0], [0.0, 0.0, 0.005]]) - W[:3, 3]) @ W[:3, :3]
    both = scene.replace(
        means=np.concatenate([scene.means, behind]),
        log_scales=np.concatenate([scene.log_scales, np.zeros((2, 3))]),
        quats=np.concatenate([scene.quats, [[1.0, 0, 0, 0], [1.0, 0, 0, 0]]]),
        opacity_logits=np.concatenate([scene.opacity_logits, [5.0, 5.0]]),
        sh=np.concatenate([scene.sh, np.ones((2,) + scene.sh.shape[1:])]))
    out, out_ref = forward(*both.args()), forward(*scene.args())
    msg = f"seed {seed}"
    assert np.all(out.radii[3:] == 0), msg
    np.testing.assert_allclose(out.depths[3:], [-2.0, 0.005], atol=1e-12, err_msg=msg)
    np.testing.assert_array_equal(out.image, out_ref.image, err_msg=msg)
    g = backward(out, rng.normal(size=out.image.shape), rng.normal(size=out.alpha.shape))
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh", "means2d"):
        assert np.all(getattr(g, name)[3:] == 0.0), f"{name}; {msg}"
        assert np.all(np.isfinite(getattr(g, name))), f"{name}; {msg}"


def test_input_conventions():
    """float32 inputs, both call signatures, d_alpha=None, unnormalized quaternions."""
    rng, seed = make_rng()
    scene = random_scene(rng, n=6, sh_degree=2, width=24, height=20, extra_sh=3)
    out = forward(*scene.args())
    f32 = forward(*[a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in scene.args()])
    assert f32.image.dtype == np.float64
    np.testing.assert_allclose(f32.image, out.image, atol=1e-4, err_msg=f"seed {seed}")
    by_object = forward(scene, scene, scene.sh_degree, scene.background)
    np.testing.assert_array_equal(by_object.image, out.image)
    np.testing.assert_array_equal(ref.forward_scene(scene, scene, 2, scene.background).image, out.image)
    scaled = forward(*scene.replace(quats=3.7 * scene.quats).args())
    np.testing.assert_allclose(scaled.image, out.image, atol=1e-13, err_msg=f"seed {seed}")
    d_image = rng.normal(size=out.image.shape)
    g0, g1 = backward(out, d_image), backward(out, d_image, np.zeros(out.alpha.shape))
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh", "means2d"):
        np.testing.assert_array_equal(getattr(g0, name), getattr(g1, name))
    assert g0.sh.shape == scene.sh.shape
    # the quaternion gradient is tangent to the sphere (the forward only sees q / |q|)
    assert np.allclose(np.sum(g0.quats * scene.quats, axis=1), 0.0, atol=1e-10), f"seed {seed}"


def test_splat_objects_if_available():
    splat = pytest.importorskip("splat")
    if not hasattr(splat, "Gaussians") or not hasattr(splat, "Camera"):
        pytest.skip("splat.Gaussians / splat.Camera not exported")
    rng, seed = make_rng()
    sc = random_scene(rng, n=5, sh_degree=1, width=24, height=20)
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    g = splat.Gaussians(f32(sc.means), f32(sc.log_scales), f32(sc.quats), f32(sc.opacity_logits), f32(sc.sh))
    cam = splat.Camera(f32(sc.world_to_camera), sc.fx, sc.fy, sc.cx, sc.cy, sc.width, sc.height)
    a = forward(g, cam, 1, sc.background)
    b = forward(*[x.astype(np.float32).astype(np.float64) if isinstance(x, np.ndarray) else x
                  for x in sc.args()])
    np.testing.assert_allclose(a.image, b.image, atol=1e-6, err_msg=f"seed {seed}")
