"""splat.torch on CPU tensors against the float64 reference: images, alphas, depth
(D and ED), every gradient, batched cameras, gsplat's conventions, gradient flow
through meta["means2d"], pairing of several live forwards.

Skipped where torch is not installed (CI installs the CPU build of torch; see
.ci/run). The reference's own gradients are checked against float64 finite
differences in test_reference.py and test_raster_depth_batches.py.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from _parity import GRAD_TOL, IMAGE_TOL, rel_err, scene_for, to_splat
from _scenes import make_rng, random_camera

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch: the torch extra)")

import splat  # noqa: E402
import splat.torch as st  # noqa: E402
from splat import reference  # noqa: E402

SH_C0 = 0.28209479177387814
PARAMS = ("means", "quats", "log_scales", "opacity_logits", "sh")


def _tensors(g):
    """Leaf tensors of a splat.Gaussians (copies: the test owns them)."""
    return {name: torch.tensor(getattr(g, name)).requires_grad_(True) for name in PARAMS}


def _cameras(rng, cam0, count, w, h):
    cams = [cam0] + [splat.Camera(**{k: (np.float32(v) if k == "world_to_camera" else v)
                                     for k, v in random_camera(rng, w, h).items()}) for _ in range(count - 1)]
    viewmats = torch.tensor(np.stack([c.world_to_camera for c in cams]))
    Ks = torch.tensor(np.stack([[[c.fx, 0, c.cx], [0, c.fy, c.cy], [0, 0, 1]] for c in cams]).astype(np.float32))
    return cams, viewmats, Ks


def _ref(g, c, degree, bg, sh=None):
    return reference.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh if sh is None else sh,
                             c.world_to_camera, c.fx, c.fy, c.cx, c.cy, c.width, c.height, degree, bg, depth=True)


def _stable_mask(refs, got_colors, got_alphas, depth_scale):
    """Pixels where splat and the reference agree (float32/float64 threshold flips excluded),
    per camera [C,H,W]."""
    ok = []
    for i, ref in enumerate(refs):
        m = np.abs(got_colors[i, ..., :3] - ref.image).max(axis=2) <= IMAGE_TOL
        m &= np.abs(got_alphas[i, ..., 0] - ref.alpha) <= IMAGE_TOL
        m &= np.abs(got_colors[i, ..., 3] - ref.depth) <= IMAGE_TOL * depth_scale
        ok.append(m)
    return np.stack(ok)



@pytest.mark.parametrize("cameras", [1, 3])
def test_rgb_meta_matches_reference(cameras):
    """An RGB render projects meta's means2d and depths after the rasterizer's passes (one
    camera: the whole means2d leaf): their values against the float64 reference, means2d a
    leaf, and depths differentiable in the means (dz/dmean = the view's third rotation row)."""
    rng, seed = make_rng()
    w, h = 41, 33
    g, cam0 = to_splat(scene_for(rng, 250, w, h, 1))
    cams, viewmats, Ks = _cameras(rng, cam0, cameras, w, h)
    t = _tensors(g)
    _, _, meta = st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"],
                              viewmats, Ks, w, h, sh_degree=1)
    assert meta["means2d"].is_leaf and meta["means2d"].requires_grad
    for i, c in enumerate(cams):
        r = _ref(g, c, 1, np.zeros(3))
        vis = r.radii > 0
        assert vis.sum() > 20, f"too few visible Gaussians to compare; seed {seed}"
        scale = float(np.abs(r.depths).max())
        np.testing.assert_allclose(meta["depths"][i].detach().numpy(), r.depths, rtol=1e-5,
                                   atol=8 * np.finfo(np.float32).eps * scale, err_msg=f"depths; seed {seed}")
        # float32 rounding of (P p)_xy / z with P = K [R|t]: a few eps of the terms' magnitudes
        K = np.array([[c.fx, 0, c.cx], [0, c.fy, c.cy], [0, 0, 1]])
        P = K @ c.world_to_camera[:3].astype(np.float64)
        # and of z itself, relative to its own terms (z = R_2 p + t_2 may cancel)
        terms = np.abs(g.means) @ np.abs(P[:, :3]).T + np.abs(P[:, 3])
        z = np.abs(r.depths)[:, None]
        err = np.abs(meta["means2d"][i].detach().numpy() - r.means2d)[vis]
        # (measured: at most 1.12 eps of those magnitudes over 300 seeds of three cameras)
        bound = 4 * np.finfo(np.float32).eps * (terms[:, :2] / z + np.abs(r.means2d) * terms[:, 2:] / z)[vis]
        assert (err <= bound).all(), f"means2d: {np.max(err / bound):.3g} x the rounding bound; seed {seed}"
    meta["depths"].sum().backward()
    want = sum(np.broadcast_to(c.world_to_camera[2, :3], g.means.shape) for c in cams)
    np.testing.assert_allclose(t["means"].grad.numpy(), want, rtol=1e-6, atol=1e-6,
                               err_msg=f"d depths / d means; seed {seed}")

@pytest.mark.parametrize("cameras,degree,per_camera_sh", [(1, 0, False), (3, 2, False), (2, 3, True)])
def test_rasterize_matches_reference(cameras, degree, per_camera_sh):
    rng, seed = make_rng()
    w, h = 41, 33
    g, cam0 = to_splat(scene_for(rng, 250, w, h, degree))
    cams, viewmats, Ks = _cameras(rng, cam0, cameras, w, h)
    bgs = rng.uniform(0, 1, (cameras, 3)).astype(np.float32)
    t = _tensors(g)
    if per_camera_sh:
        sh_np = (g.sh[None] + rng.normal(scale=0.05, size=(cameras,) + g.sh.shape)).astype(np.float32)
        t["sh"] = torch.tensor(sh_np).requires_grad_(True)
    colors, alphas, meta = st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"],
                                        viewmats, Ks, w, h, sh_degree=degree, backgrounds=torch.tensor(bgs),
                                        render_mode="RGB+D")
    assert colors.shape == (cameras, h, w, 4) and alphas.shape == (cameras, h, w, 1)
    assert meta["radii"].shape == (cameras, len(g), 2) and meta["radii"].dtype == torch.int32
    assert meta["means2d"].shape == (cameras, len(g), 2) and meta["depths"].shape == (cameras, len(g))
    refs = [_ref(g, c, degree, bgs[i], sh_np[i] if per_camera_sh else None) for i, c in enumerate(cams)]
    c_np, a_np = colors.detach().numpy(), alphas.detach().numpy()
    scale = max(float(np.max(r.depths[r.radii > 0], initial=1.0)) for r in refs)
    ok = _stable_mask(refs, c_np, a_np, scale)
    assert ok.mean() >= 0.99, f"only {ok.mean():.4f} of the pixels agree; seed {seed}"
    for i, r in enumerate(refs):
        # ceil(3 sqrt(lambda)) in float32 against float64: a radius at an integer boundary may
        # round up on one side only (as test_parity_cpu allows)
        differ = np.count_nonzero(meta["radii"][i, :, 0].numpy() != r.radii)
        assert differ <= max(1, len(g) // 200), f"radii differ for {differ} Gaussians; seed {seed}"
        z = meta["depths"][i].detach().numpy()[r.radii > 0]
        # float32 z = R p + t rounds in absolute terms, ~eps x the scene's depths: a
        # Gaussian near the near plane gets no tighter bound than a distant one
        np.testing.assert_allclose(z, r.depths[r.radii > 0], rtol=1e-5, atol=8 * np.finfo(np.float32).eps * scale,
                                   err_msg=f"depths; seed {seed}")

    # Random loss weights, zero where a pixel flipped; every gradient against the reference.
    wc = rng.normal(size=c_np.shape).astype(np.float32) * ok[..., None]
    wc[..., 3] /= scale
    wa = rng.normal(size=a_np.shape).astype(np.float32) * ok[..., None]
    loss = (colors * torch.tensor(wc)).sum() + (alphas * torch.tensor(wa)).sum()
    loss.backward()
    want = [reference.backward(r, wc[i, ..., :3], wa[i, ..., 0], wc[i, ..., 3]) for i, r in enumerate(refs)]
    for name, ref_name in (("means", "means"), ("quats", "quats"), ("log_scales", "log_scales"),
                           ("opacity_logits", "opacity_logits")):
        e = rel_err(t[name].grad.numpy(), sum(getattr(x, ref_name) for x in want))
        assert e <= GRAD_TOL, f"{name}: relative error {e:.3g}; seed {seed}"
    sh_want = np.stack([x.sh for x in want]) if per_camera_sh else sum(x.sh for x in want)
    e = rel_err(t["sh"].grad.numpy(), sh_want)
    assert e <= GRAD_TOL, f"sh: relative error {e:.3g}; seed {seed}"
    for i, x in enumerate(want):
        e = rel_err(meta["means2d"].grad[i].numpy(), x.means2d)
        assert e <= GRAD_TOL, f"means2d[{i}]: relative error {e:.3g}; seed {seed}"


@pytest.mark.parametrize("mode", ["D", "ED", "RGB+ED"])
def test_depth_modes(mode):
    rng, seed = make_rng()
    w, h = 37, 29
    g, cam = to_splat(scene_for(rng, 180, w, h, 1))
    _, viewmats, Ks = _cameras(rng, cam, 1, w, h)
    t = _tensors(g)
    colors, alphas, _ = st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"],
                                     viewmats, Ks, w, h, sh_degree=1, render_mode=mode)
    ref = _ref(g, cam, 1, np.zeros(3))
    assert colors.shape[-1] == (4 if mode.startswith("RGB") else 1)
    d = colors[0, ..., -1]
    want = ref.depth / np.maximum(ref.alpha, 1e-10) if mode.endswith("ED") else ref.depth
    # Expected depth divides by alpha: compare where alpha is not tiny.
    m = ref.alpha > 0.05
    scale = float(np.max(ref.depths[ref.radii > 0], initial=1.0))
    err = np.abs(d.detach().numpy() - want)[m] / scale
    assert np.mean(err > 1e-4) <= 0.01, f"{mode}: {np.mean(err > 1e-4):.4f} of pixels off; seed {seed}"
    # The gradient of sum(ED) reaches the means through both z and the weights.
    wd = rng.normal(size=d.shape).astype(np.float32) * m
    (d * torch.tensor(wd)).sum().backward()
    if mode == "D":
        want_g = reference.backward(ref, np.zeros((h, w, 3)), None, wd).means
    else:  # ED = D / alpha: dED = dD / alpha - D / alpha^2 dalpha
        a = np.maximum(ref.alpha, 1e-10)
        want_g = reference.backward(ref, np.zeros((h, w, 3)), -wd * ref.depth / a ** 2, wd / a).means
    e = rel_err(t["means"].grad.numpy(), want_g)
    assert e <= 1e-2, f"{mode}: means gradient relative error {e:.3g}; seed {seed}"


def test_gsplat_opacities_of_zero_and_one_are_clamped():
    """Opacities exactly 0 or 1 are clamped to [1e-6, 1 - 1e-6] before the logit: the render
    is splat's with those logits, and the clamped entries get no gradient."""
    rng, seed = make_rng()
    w, h = 24, 20
    g, cam = to_splat(scene_for(rng, 60, w, h, 0))
    _, viewmats, Ks = _cameras(rng, cam, 1, w, h)
    o = rng.uniform(0.05, 0.95, len(g))
    o[rng.permutation(len(g))[:20]] = rng.choice([0.0, 1.0], 20)
    opac = torch.tensor(o, dtype=torch.float32).requires_grad_(True)
    rgb = torch.tensor(rng.uniform(0.1, 1.0, (len(g), 3)).astype(np.float32))
    t = _tensors(g)
    colors, _, _ = st.rasterization(t["means"], t["quats"], t["log_scales"].exp(), opac, rgb, viewmats, Ks, w, h,
                                    packed=False)
    clipped = np.clip(o.astype(np.float32), np.float32(1e-6), np.float32(1 - 1e-6)).astype(np.float64)
    logits = torch.tensor(np.log(clipped / (1 - clipped)), dtype=torch.float32)
    sh = ((rgb - 0.5) / SH_C0)[:, None, :]
    want, _, _ = st.rasterize(t["means"], t["quats"], t["log_scales"], logits, sh, viewmats, Ks, w, h, sh_degree=0)
    np.testing.assert_allclose(colors.detach().numpy(), want.detach().numpy(), atol=2e-5, err_msg=f"seed {seed}")
    colors.sum().backward()
    grad = opac.grad.numpy()
    assert np.isfinite(grad).all(), f"seed {seed}"
    edge = (o == 0.0) | (o == 1.0)
    assert (grad[edge] == 0).all(), f"clamped opacities got a gradient; seed {seed}"
    assert np.abs(grad[~edge]).sum() > 0, f"seed {seed}"

def test_gsplat_conventions_match_splat_parametrisation():
    """Activated scales / opacities and RGB colours give what splat's own form gives."""
    rng, seed = make_rng()
    w, h = 40, 30
    g, cam = to_splat(scene_for(rng, 150, w, h, 0))
    cams, viewmats, Ks = _cameras(rng, cam, 2, w, h)
    rgb = rng.uniform(0.05, 1.0, (len(g), 3)).astype(np.float32)
    scales = torch.tensor(np.exp(g.log_scales)).requires_grad_(True)
    opac = torch.tensor(1.0 / (1.0 + np.exp(-g.opacity_logits.astype(np.float64))), dtype=torch.float32)
    opac.requires_grad_(True)
    means = torch.tensor(g.means).requires_grad_(True)
    quats = torch.tensor(g.quats)
    colors_t = torch.tensor(rgb).requires_grad_(True)
    bg = torch.tensor(rng.uniform(0, 1, (2, 3)).astype(np.float32))
    colors, alphas, meta = st.rasterization(means, quats, scales, opac, colors_t, viewmats, Ks, w, h,
                                            backgrounds=bg, packed=False, render_mode="RGB+ED")
    sh = ((rgb.astype(np.float64) - 0.5) / SH_C0)[:, None, :]
    for i, c in enumerate(cams):
        ref = _ref(g, c, 0, bg[i].numpy(), sh)
        diff = np.abs(colors[i, ..., :3].detach().numpy() - ref.image).max(axis=2)
        assert np.mean(diff > 1e-4) <= 0.005, f"camera {i}; seed {seed}"
    # gsplat's strategies read means2d.grad (after retain_grad) and radii [C,N,2].
    meta["means2d"].retain_grad()
    (colors[..., :3] ** 2).sum().backward()
    assert meta["means2d"].grad is not None and torch.isfinite(meta["means2d"].grad).all()
    visible = (meta["radii"] > 0).all(dim=-1)
    assert meta["means2d"].grad[~visible].abs().max() == 0
    assert meta["means2d"].grad[visible].abs().sum() > 0
    # d/d scales = d/d log_scales / scales, d/d opacity = d/d logit / (o (1 - o)): against the reference
    want = None
    for i, c in enumerate(cams):
        ref = _ref(g, c, 0, bg[i].numpy(), sh)
        d_img = 2.0 * colors[i, ..., :3].detach().numpy().astype(np.float64)
        r = reference.backward(ref, d_img)
        want = r if want is None else type(r)(**{k: getattr(want, k) + getattr(r, k) for k in r.__dataclass_fields__})
    e = rel_err(scales.grad.numpy() * scales.detach().numpy(), want.log_scales)
    assert e <= 5e-3, f"scales: {e:.3g}; seed {seed}"
    o = opac.detach().numpy().astype(np.float64)
    e = rel_err(opac.grad.numpy() * o * (1 - o), want.opacity_logits)
    assert e <= 5e-3, f"opacities: {e:.3g}; seed {seed}"
    e = rel_err(colors_t.grad.numpy(), want.sh[:, 0, :] / SH_C0)
    assert e <= 5e-3, f"colors: {e:.3g}; seed {seed}"


def test_live_forwards_pair_with_their_own_backward():
    """More passes alive than the pool has devices: each backward still gets its own
    forward's gradient (the device renders it again)."""
    rng, seed = make_rng()
    w, h = 30, 26
    g, cam = to_splat(scene_for(rng, 120, w, h, 1))
    _, viewmats, Ks = _cameras(rng, cam, 6, w, h)
    t = _tensors(g)
    weights = [torch.tensor(rng.normal(size=(1, h, w, 3)).astype(np.float32)) for _ in range(6)]
    args = lambda i: (t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"],  # noqa: E731
                      viewmats[i:i + 1], Ks[i:i + 1], w, h)
    separate = torch.zeros_like(t["means"])
    for i in range(6):
        colors, _, _ = st.rasterize(*args(i), sh_degree=1)
        separate += torch.autograd.grad((colors * weights[i]).sum(), t["means"])[0]
    outs = [st.rasterize(*args(i), sh_degree=1)[0] for i in range(6)]  # six live passes, pool of four
    together = torch.autograd.grad(sum((o * wt).sum() for o, wt in zip(outs, weights)), t["means"])[0]
    np.testing.assert_allclose(together.numpy(), separate.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")


def test_empty_cache_drops_idle_pools_and_keeps_a_pending_backward():
    """splat.torch.empty_cache() gives back the pools no pass waits on; a pass
    whose backward is still to come keeps its pool and gets its own gradient."""
    rng, seed = make_rng()
    w, h = 30, 26
    g, cam = to_splat(scene_for(rng, 120, w, h, 1))
    _, viewmats, Ks = _cameras(rng, cam, 1, w, h)
    t = _tensors(g)
    weights = torch.tensor(rng.normal(size=(1, h, w, 3)).astype(np.float32))
    args = (t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"], viewmats, Ks, w, h)
    want = torch.autograd.grad((st.rasterize(*args, sh_degree=1)[0] * weights).sum(), t["means"])[0]
    idle = st.rasterizer_pool("cpu")
    st.empty_cache()
    assert st.rasterizer_pool("cpu") is not idle  # the idle pool went
    pending = st.rasterize(*args, sh_degree=1)[0]
    busy = st.rasterizer_pool("cpu")
    st.empty_cache()
    assert st.rasterizer_pool("cpu") is busy  # a backward still needs it
    got = torch.autograd.grad((pending * weights).sum(), t["means"])[0]
    np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"seed {seed}")
    st.empty_cache()
    assert st.rasterizer_pool("cpu") is not busy


def test_in_place_change_before_backward_is_caught():
    rng, _ = make_rng()
    g, cam = to_splat(scene_for(rng, 30, 16, 16, 0))
    _, viewmats, Ks = _cameras(rng, cam, 1, 16, 16)
    t = _tensors(g)
    colors, _, _ = st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"], viewmats,
                                Ks, 16, 16, sh_degree=0)
    with torch.no_grad():
        t["means"] += 0.1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        colors.sum().backward()


def test_cpu_tensors_are_read_and_written_in_place():
    """The native side writes the tensors it is given (DLPack views, no copy)."""
    rng, _ = make_rng()
    g, cam = to_splat(scene_for(rng, 60, 24, 20, 0))
    native = splat._core.ViewRasterizer(splat.BackendConfig(backend="cpu"))
    image = torch.full((20, 24, 3), -7.0)
    alpha = torch.full((20, 24), -7.0)
    radii = torch.full((len(g),), -7, dtype=torch.int32)
    native.forward(torch.tensor(g.means), torch.tensor(g.log_scales), torch.tensor(g.quats),
                   torch.tensor(g.opacity_logits), torch.tensor(g.sh), cam.world_to_camera, cam.fx, cam.fy, cam.cx,
                   cam.cy, 24, 20, 0, np.zeros(3, np.float32), 0.01, 1e10, image, alpha, radii)
    ref = _ref(g, cam, 0, np.zeros(3))
    assert np.mean(np.abs(image.numpy() - ref.image).max(axis=2) > 1e-5) <= 0.01
    np.testing.assert_array_equal(radii.numpy(), ref.radii)
    # ... and reads the parameters where they are: the numpy path's device copies
    # them into five resident buffers, this one allocates none of those.
    numpy_path = splat._core.Rasterizer(splat.BackendConfig(backend="cpu"))
    numpy_path.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam.world_to_camera, cam.fx, cam.fy,
                       cam.cx, cam.cy, 24, 20, 0, np.zeros(3, np.float32))
    assert native.allocation_count == numpy_path.allocation_count - 5


def test_bad_arguments_name_themselves():
    rng, _ = make_rng()
    g, cam = to_splat(scene_for(rng, 10, 16, 16, 0))
    _, viewmats, Ks = _cameras(rng, cam, 1, 16, 16)
    t = {k: v.detach() for k, v in _tensors(g).items()}
    ok = (t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"], viewmats, Ks, 16, 16)
    with pytest.raises(TypeError, match=r"\[splat\] means: expected float32"):
        st.rasterize(t["means"].double(), *ok[1:], sh_degree=0)
    with pytest.raises(ValueError, match=r"\[splat\] quats"):
        st.rasterize(t["means"], t["quats"][:, :3].contiguous(), *ok[2:], sh_degree=0)
    with pytest.raises(ValueError, match=r"\[splat\] render_mode"):
        st.rasterize(*ok, sh_degree=0, render_mode="RGBD")
    with pytest.raises(ValueError, match=r"\[splat\] sh"):
        st.rasterize(*ok, sh_degree=2)
    with pytest.raises(ValueError, match=r"\[splat\] Ks"):
        st.rasterize(*ok[:6], Ks[:, :2], 16, 16, sh_degree=0)
    scales, opac = torch.exp(t["log_scales"]), torch.sigmoid(t["opacity_logits"])
    for kw in ({"absgrad": True}, {"rasterize_mode": "mip"}, {"eps2d": 0.1}, {"camera_model": "fisheye"},
               {"radius_clip": 1.0}, {"sparse_grad": True}):
        with pytest.raises(ValueError, match=r"\[splat\] " + next(iter(kw))):
            st.rasterization(t["means"], t["quats"], scales, opac, t["sh"], viewmats, Ks, 16, 16, sh_degree=0, **kw)


def test_import_without_torch_says_how_to_install():
    code = "import sys; sys.modules['torch'] = None\ntry:\n import splat.torch\nexcept ImportError as e:\n print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         cwd=os.path.dirname(splat.__file__) + "/..", timeout=120)
    assert "[splat] splat.torch needs PyTorch" in out.stdout and "torch extra" in out.stdout, out.stdout + out.stderr


def test_a_script_that_keeps_its_outputs_exits_cleanly():
    """A script whose globals hold rasterize's outputs (so the autograd graph lives to
    the interpreter's exit) exits without nanobind reporting leaked rasterizers, also
    after a backward and with a forward whose backward never ran."""
    code = """
import torch, splat.torch as st
g = torch.Generator().manual_seed(0)
n = 12
means = (torch.randn(n, 3, generator=g) * 0.3).requires_grad_(True)
quats, log_scales = torch.randn(n, 4, generator=g), torch.full((n, 3), -2.0)
opacity, sh = torch.ones(n), torch.rand(n, 1, 3, generator=g)
viewmats = torch.eye(4)[None].clone()
viewmats[0, 2, 3] = 4.0
Ks = torch.tensor([[[40.0, 0, 16], [0, 40.0, 16], [0, 0, 1]]])
colors, alphas, meta = st.rasterize(means, quats, log_scales, opacity, sh, viewmats, Ks, 32, 32, sh_degree=0)
colors.sum().backward(retain_graph=True)
kept, _, _ = st.rasterize(means, quats, log_scales, opacity, sh, viewmats, Ks, 32, 32, sh_degree=0)
print("grad", float(means.grad.abs().sum()) > 0)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                         cwd=os.path.dirname(splat.__file__) + "/..", timeout=120)
    assert out.returncode == 0 and "grad True" in out.stdout, out.stdout + out.stderr
    assert "leaked" not in out.stderr, out.stderr


def test_differentiable_background_is_composited():
    """A background that needs a gradient is blended in torch: the same image as the
    native blend, and d bg = sum over pixels of d_image (1 - alpha)."""
    rng, seed = make_rng()
    w, h = 33, 27
    g, cam = to_splat(scene_for(rng, 150, w, h, 1))
    _, viewmats, Ks = _cameras(rng, cam, 2, w, h)
    t = _tensors(g)
    bg_np = rng.uniform(0, 1, (2, 3)).astype(np.float32)
    args = (t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"], viewmats, Ks, w, h)
    native, alpha_n, _ = st.rasterize(*args, sh_degree=1, backgrounds=torch.tensor(bg_np))
    bg = torch.tensor(bg_np).requires_grad_(True)
    composited, alphas, _ = st.rasterize(*args, sh_degree=1, backgrounds=bg)
    np.testing.assert_allclose(composited.detach().numpy(), native.detach().numpy(), atol=2e-6,
                               err_msg=f"seed {seed}")
    wts = torch.tensor(rng.normal(size=composited.shape).astype(np.float32))
    (composited * wts).sum().backward()
    want = (wts * (1 - alphas.detach())).sum(dim=(1, 2))
    np.testing.assert_allclose(bg.grad.numpy(), want.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}")
    # The parameters' gradients are those of the native blend's background.
    composited_means = t["means"].grad.clone()
    t["means"].grad = None
    (native * wts).sum().backward()
    e = rel_err(composited_means.numpy(), t["means"].grad.numpy())
    assert e <= 1e-4, f"means gradient: composited vs native background {e:.3g}; seed {seed}"


def test_the_chunked_stop_matches_the_rasterizers():
    """blend_stop="chunk" (splat's own keyword; gsplat's stop is "splat") on lists several
    256-entry chunks deep: images and gradients are the CPU Rasterizer's with the same
    rule (themselves held to the reference's chunked stop in test_parity_cpu.py), which
    the 3DGS stop's differ from."""
    from _parity import deep_scene
    rng, seed = make_rng()
    g, cam = to_splat(deep_scene(rng))
    viewmats = torch.tensor(cam.world_to_camera[None])
    Ks = torch.tensor(np.array([[[cam.fx, 0, cam.cx], [0, cam.fy, cam.cy], [0, 0, 1]]], np.float32))
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    d_image = rng.normal(size=(cam.height, cam.width, 3)).astype(np.float32)
    images = {}
    for stop in ("splat", "chunk"):
        t = _tensors(g)
        colors, alphas, _ = st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"],
                                         viewmats, Ks, cam.width, cam.height, sh_degree=1, blend_stop=stop)
        (colors[0] * torch.tensor(d_image)).sum().backward()
        want = r.forward(g, cam, 1, (0.0, 0.0, 0.0), blend_stop=stop)
        grads = r.backward(d_image)
        np.testing.assert_allclose(colors[0].detach().numpy(), want.image, atol=1e-6, err_msg=f"{stop}; seed {seed}")
        for name in PARAMS:
            e = rel_err(t[name].grad.numpy(), getattr(grads, name))
            assert e <= 1e-5, (stop, name, e, seed)
        images[stop] = want.image
    assert np.abs(images["chunk"] - images["splat"]).max() > 1e-5, seed
    with pytest.raises(ValueError, match="blend_stop"):
        st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"], viewmats, Ks,
                     cam.width, cam.height, sh_degree=1, blend_stop="pixel")
