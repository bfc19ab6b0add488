"""The antialiased mode (mip-splatting's 2D filter with opacity compensation, as
gsplat's rasterize_mode="antialiased"): the float64 reference against closed
forms and finite differences, the CPU backend against the reference (renders and
every gradient), splat.torch's gradients against finite differences, and a short
antialiased training run whose stored config reaches render and eval.

The compensation is k = sqrt(det(cov2d) / det(cov2d + 0.3 I)) of the undilated
2D covariance; the blend's opacity is sigmoid(logit) k.
"""
from __future__ import annotations


import numpy as np
import pytest

import splat
from _parity import GRAD_TOL, GRADS, assert_images_close, loss_gradients, rel_err, separate_depths, to_splat
from _scenes import load_reference, make_rng, random_scene

ref = load_reference()

# Small splats (0.3..2 px): the compensation spans ~0.2..0.95.
SMALL = dict(pixel_sigma=(0.3, 2.0))


def _fd_check(scene, rng, msg, antialiased=True):
    """Every input array's gradient of sum(image R1) + sum(alpha R2) against central
    differences where the forward's discrete decisions stay fixed (test_reference.py)."""
    from test_reference import central_differences, compare

    out = ref.forward(*scene.args(), antialiased=antialiased)
    R1 = rng.normal(size=out.image.shape)
    R2 = rng.normal(size=out.alpha.shape)
    grads = ref.backward(out, R1, R2)
    base = out.decisions()
    for name in scene.PARAMS:
        def loss(x, name=name):
            o = ref.forward(*scene.replace(**{name: x}).args(), antialiased=antialiased)
            return np.sum(o.image * R1) + np.sum(o.alpha * R2), o.decisions()
        fd, checked = central_differences(loss, getattr(scene, name), base)
        compare(name, getattr(grads, name), fd, checked, msg)
    return out


def test_compensation_of_a_facing_isotropic_splat_is_closed_form():
    """A round splat of pixel variance s^2 facing the camera: k = s^2 / (s^2 + 0.3), and the
    centre pixel's alpha is sigmoid(logit) k exactly."""
    from test_reference import facing_scene

    for std in (0.4, 1.0, 3.0):
        sc = facing_scene(np.zeros((1, 3)), 0, logit=0.5, pixel_std=std)
        classic = ref.forward(sc, sc, 0, sc.background)
        aa = ref.forward(sc, sc, 0, sc.background, antialiased=True)
        want = std ** 2 / (std ** 2 + 0.3)
        assert aa.proj.compensation[0] == pytest.approx(want, rel=1e-9)
        assert classic.proj.compensation[0] == 1.0
        o = 1.0 / (1.0 + np.exp(-0.5))
        assert aa.opacities[0] == pytest.approx(o * want, rel=1e-12)
        # same radius, conic and tiles: only the opacity changes
        assert np.array_equal(aa.radii, classic.radii) and np.allclose(aa.conics, classic.conics)
        assert aa.alpha[16, 16] == pytest.approx(o * want, rel=1e-9)
        assert classic.alpha[16, 16] == pytest.approx(o, rel=1e-9)


def test_compensation_of_an_edge_on_splat_vanishes():
    """A flat Gaussian seen edge-on has a degenerate undilated 2D covariance: k ~ 0, the
    splat all but disappears (classic draws it as a 0.3-px line at full opacity)."""
    rng, seed = make_rng()
    scene = random_scene(rng, n=1, sh_degree=0, width=32, height=32, pixel_sigma=(3.0, 3.0))
    W = scene.world_to_camera
    # Flatten the Gaussian along the camera's x axis: a disc whose normal is view x.
    rot = W[:3, :3].T  # columns: the camera axes in world space
    w = np.sqrt(max(0.0, 1.0 + np.trace(rot))) / 2.0
    q = np.array([w, (rot[2, 1] - rot[1, 2]) / (4 * w), (rot[0, 2] - rot[2, 0]) / (4 * w),
                  (rot[1, 0] - rot[0, 1]) / (4 * w)])
    t = scene.means[0] @ W[:3, :3].T + W[:3, 3]
    scene = scene.replace(quats=q[None], log_scales=np.log([[1e-7, 0.2, 0.2]]),
                          means=((np.array([0.0, 0.0, t[2]]) - W[:3, 3]) @ W[:3, :3])[None])
    aa = ref.forward(*scene.args(), antialiased=True)
    assert aa.radii[0] > 0, seed
    assert aa.proj.compensation[0] < 1e-3, (aa.proj.compensation[0], seed)


@pytest.mark.parametrize("kind", ["small", "opaque"])
def test_reference_backward_matches_finite_differences(kind):
    rng, seed = make_rng()
    msg = f"scene {kind}, seed {seed}"
    if kind == "small":
        scene = random_scene(rng, n=8, sh_degree=1, width=24, height=20, spread=1.9, **SMALL)
    else:
        scene = random_scene(rng, n=9, sh_degree=0, width=24, height=20, snap_pixels=3, logits=(8.0, 12.0),
                             pixel_sigma=(0.6, 2.5))
    out = _fd_check(scene, rng, msg)
    vis = out.radii > 0
    assert vis.any(), msg
    k = out.proj.compensation[vis]
    assert k.min() < 0.95, f"compensation {k}: the filter barely acts; {msg}"


def test_filter_gradient_is_the_compensation_derivative():
    """dL/d cov2d through k alone (loss = sum_i w_i k_i): the reference's analytic term
    against central differences of k in the 2D covariance."""
    rng, seed = make_rng()
    scene = random_scene(rng, n=6, sh_degree=0, width=24, height=20, **SMALL)
    out = ref.forward(*scene.args(), antialiased=True)
    p = out.proj
    w = rng.normal(size=len(scene))
    # d loss / d opacity = w / sigmoid, so d/d k = w: no other path (image gradients zero).
    sig = 1.0 / (1.0 + np.exp(-p.opacity_logits))
    d_opac = np.where(out.radii > 0, w / sig, 0.0)
    zeros2, zeros3 = np.zeros((len(scene), 2)), np.zeros((len(scene), 3))
    g = ref.project_backward(p, zeros2, zeros3, zeros3, d_opac)
    for name in ("log_scales", "quats", "means"):
        x0 = getattr(scene, name)
        fd = np.zeros_like(x0)
        for idx in np.ndindex(x0.shape):
            h = 1e-6 * max(1.0, abs(x0[idx]))
            xs = []
            for sgn in (1, -1):
                x = x0.copy()
                x[idx] += sgn * h
                q = ref.project(*scene.replace(**{name: x}).args()[:13], antialiased=True)
                xs.append(np.sum(np.where(out.radii > 0, w * q.compensation, 0.0)))
            fd[idx] = (xs[0] - xs[1]) / (2 * h)
        got = {"means": g[0], "log_scales": g[1], "quats": g[2]}[name]
        e = np.linalg.norm(got - fd) / max(np.linalg.norm(fd), 1e-2)
        assert e <= 1e-5, f"{name}: {e:.3g}; seed {seed}"


CASES = [  # (n, width, height, sh_degree)
    (12, 17, 16, 1),
    (150, 37, 53, 2),
    (800, 96, 80, 3),
]


@pytest.mark.parametrize("n,width,height,degree", CASES)
def test_cpu_matches_reference(n, width, height, degree):
    rng, seed = make_rng()
    scene = random_scene(rng, n=n, sh_degree=degree, width=width, height=height, spread=1.2, pixel_sigma=(0.3, 4.0))
    separate_depths(scene)  # against the float64 reference (see _parity.separate_depths)
    g, cam = to_splat(scene)
    bg = rng.uniform(0, 1, 3).astype(np.float32)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    out = r.forward(g, cam, degree, bg, antialiased=True)
    want = ref.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam.world_to_camera, cam.fx, cam.fy,
                       cam.cx, cam.cy, width, height, degree, bg, antialiased=True)
    classic = ref.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam.world_to_camera, cam.fx,
                          cam.fy, cam.cx, cam.cy, width, height, degree, bg)
    assert np.abs(want.image - classic.image).max() > 1e-2, f"the filter changed nothing; seed {seed}"
    assert_images_close(out.image, want.image, "image", seed)
    assert_images_close(out.alpha[..., None], want.alpha[..., None], "alpha", seed)
    d_image, d_alpha = loss_gradients(rng, out, want)
    grads = r.backward(out, d_image, d_alpha)
    want_g = ref.backward(want, d_image, d_alpha)
    for name in GRADS:
        e = rel_err(getattr(grads, name), getattr(want_g, name))
        assert e <= GRAD_TOL, f"{name}: relative error {e:.3g}; seed {seed}"


def test_modes_interleave_on_one_rasterizer():
    """Each output's backward follows its own forward's mode, whatever rendered since."""
    rng, seed = make_rng()
    g, cam = to_splat(random_scene(rng, n=60, sh_degree=1, width=33, height=29, **SMALL))
    bg = np.zeros(3, np.float32)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"), pool_size=1)
    aa = r.forward(g, cam, 1, bg, antialiased=True)
    classic = r.forward(g, cam, 1, bg)
    d_image = rng.normal(size=aa.image.shape).astype(np.float32)
    got = r.backward(aa, d_image)  # renders the antialiased pass again first
    fresh = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    fresh.forward(g, cam, 1, bg, antialiased=True)
    want = fresh.backward(d_image)
    for name in GRADS:
        assert np.array_equal(getattr(got, name), getattr(want, name)), (name, seed)
    assert not np.array_equal(r.backward(classic, d_image).log_scales, want.log_scales), seed
    with pytest.raises(TypeError, match=r"\[splat\] antialiased"):
        r.forward(g, cam, 1, bg, antialiased="yes")


# --- splat.torch ---------------------------------------------------------------------------

def test_torch_antialiased_gradients_match_finite_differences():
    """torch.autograd.gradcheck's method on float32 CPU tensors: central differences of a
    random linear loss per coordinate, against the autograd gradient."""
    torch = pytest.importorskip("torch")
    import splat.torch as st

    rng, seed = make_rng()
    w, h = 20, 18
    scene = random_scene(rng, n=6, sh_degree=1, width=w, height=h, pixel_sigma=(0.8, 2.0), logits=(-0.5, 1.5))
    g, cam = to_splat(scene)
    viewmats = torch.tensor(cam.world_to_camera[None])
    Ks = torch.tensor(np.float32([[[cam.fx, 0, cam.cx], [0, cam.fy, cam.cy], [0, 0, 1]]]))
    R = torch.tensor(rng.normal(size=(1, h, w, 3)).astype(np.float32))
    leaves = {k: torch.tensor(getattr(g, k)).double() for k in ("means", "quats", "log_scales", "opacity_logits")}
    sh = torch.tensor(g.sh)

    def loss(p):
        colors, _, _ = st.rasterize(p["means"].float(), p["quats"].float(), p["log_scales"].float(),
                                    p["opacity_logits"].float(), sh, viewmats, Ks, w, h, sh_degree=1,
                                    rasterize_mode="antialiased")
        # summed in float64: a float32 sum's rounding would swamp the small steps below
        return (colors.double() * R.double()).sum()

    params = {k: v.clone().requires_grad_(True) for k, v in leaves.items()}
    loss(params).backward()

    def central(name, idx, eps):
        vals = []
        for sgn in (1, -1):
            p = dict(leaves)
            p[name] = leaves[name].clone()
            p[name][idx] += sgn * eps
            with torch.no_grad():
                vals.append(float(loss(p)))
        return (vals[0] - vals[1]) / (2 * eps)

    for name, x0 in leaves.items():
        analytic = params[name].grad.numpy()
        fd = np.zeros(x0.shape)
        smooth = np.zeros(x0.shape, bool)
        for idx in np.ndindex(tuple(x0.shape)):
            # Small steps: a pixel's alpha crossing 1/255 inside the step is a jump in the loss,
            # and these splats are small and faint. With steps of 1e-3, 1.7% of 300 seeds had
            # under 60% of some parameter's coordinates smooth. At 3e-4, over 1300 seeds: at
            # least 12/18 means smooth, and the error on them at most 6.5e-3.
            eps = 3e-4 * max(1.0, abs(float(x0[idx])))
            fd[idx], half = central(name, idx, eps), central(name, idx, eps / 2)
            # A jump inside the step makes the two step sizes disagree: not smooth there.
            smooth[idx] = abs(fd[idx] - half) <= 1e-2 * max(abs(half), 1.0)
        assert smooth.mean() >= 0.5, f"{name}: only {smooth.sum()}/{smooth.size} smooth; seed {seed}"
        e = np.linalg.norm(analytic[smooth] - fd[smooth]) / max(np.linalg.norm(fd[smooth]), 1e-2)
        assert e <= 1e-2, f"{name}: FD relative error {e:.3g} (|fd| {np.linalg.norm(fd):.3g}); seed {seed}"


def test_torch_modes_against_reference():
    torch = pytest.importorskip("torch")
    import splat.torch as st

    rng, seed = make_rng()
    w, h = 31, 27
    g, cam = to_splat(random_scene(rng, n=80, sh_degree=0, width=w, height=h, **SMALL))
    viewmats = torch.tensor(cam.world_to_camera[None])
    Ks = torch.tensor(np.float32([[[cam.fx, 0, cam.cx], [0, cam.fy, cam.cy], [0, 0, 1]]]))
    t = {k: torch.tensor(getattr(g, k)) for k in ("means", "quats", "log_scales", "opacity_logits", "sh")}
    for mode in ("classic", "antialiased"):
        colors, alphas, _ = st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"],
                                         viewmats, Ks, w, h, sh_degree=0, rasterize_mode=mode)
        want = ref.forward(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, cam.world_to_camera, cam.fx,
                           cam.fy, cam.cx, cam.cy, w, h, 0, np.zeros(3), antialiased=mode == "antialiased")
        assert_images_close(colors[0].numpy(), want.image, f"{mode} image", seed)
    # gsplat's signature: activated scales and opacities
    colors_g, _, _ = st.rasterization(t["means"], t["quats"], torch.exp(t["log_scales"]),
                                      torch.sigmoid(t["opacity_logits"]), t["sh"], viewmats, Ks, w, h, sh_degree=0,
                                      rasterize_mode="antialiased", packed=False)
    assert np.abs(colors_g[0].numpy() - colors[0].numpy()).max() <= 1e-4, seed
    with pytest.raises(ValueError, match=r"\[splat\] rasterize_mode"):
        st.rasterize(t["means"], t["quats"], t["log_scales"], t["opacity_logits"], t["sh"], viewmats, Ks, w, h,
                     sh_degree=0, rasterize_mode="mip")
