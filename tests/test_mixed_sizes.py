"""Training on views of different sizes and intrinsics, with per-pixel masks.

Oracles: a numpy implementation of the masked loss (checked against finite
differences), the CPU rasterizer (itself checked against the float64
reference in test_parity_cpu.py) for the render and backward of each view at
its own size, scikit-image for the masked metrics, and training twice with
different content under the masks (which must not matter)."""
import numpy as np
import pytest

import splat
from splat import _core
from splat.data.dataset import Dataset
from _scenes import look_at, make_rng

SSIM_C1, SSIM_C2 = 0.01 ** 2, 0.03 ** 2
# (width, height): landscape, portrait, square, sizes that are no multiple of the 16-pixel tile
SIZES = [(48, 32), (29, 45), (40, 40), (33, 20), (24, 41)]


# ----------------------------------------------------------------------------- numpy oracle of the loss
def target_values(u8):
    """The loss's target, as every backend reads it: float32(u8) * float32(1/255).
    Not u8 / 255 in float64: a render can equal the float32 target exactly, where
    the L1 subgradient is 0, while the float64 quotient would give it a sign."""
    return (u8.astype(np.float32) * np.float32(1 / 255)).astype(np.float64)


def blur(x):
    """11-tap Gaussian (sigma 1.5) separable blur with zero padding, float64, [H,W,C]."""
    taps = np.exp(-((np.arange(11) - 5) ** 2) / 4.5)
    taps /= taps.sum()
    h, w = x.shape[:2]
    pad = np.pad(x, ((5, 5), (5, 5), (0, 0)))
    tmp = sum(taps[k] * pad[:, k:k + w] for k in range(11))
    return sum(taps[k] * tmp[k:k + h] for k in range(11))


def masked_loss(x, y, mask, w):
    """(1 - w) mean |x - y| + w (1 - mean SSIM) over the valid pixels, with both
    images 0 at masked pixels (as outside the image); float64."""
    m = np.ones(x.shape[:2]) if mask is None else mask.astype(np.float64)
    m3 = m[..., None]
    xz, yz = x * m3, y * m3
    mu_x, mu_y = blur(xz), blur(yz)
    n1 = 2 * mu_x * mu_y + SSIM_C1
    n2 = 2 * (blur(xz * yz) - mu_x * mu_y) + SSIM_C2
    d1 = mu_x ** 2 + mu_y ** 2 + SSIM_C1
    d2 = blur(xz * xz) - mu_x ** 2 + blur(yz * yz) - mu_y ** 2 + SSIM_C2
    s = n1 * n2 / (d1 * d2)
    count = 3.0 * m.sum()
    value = (1 - w) * np.sum(np.abs(xz - yz) * m3) / count + w * (1 - np.sum(s * m3) / count)
    # d value / d x by the chain rule through the five window statistics.
    d_s = -w / count * m3
    d_mu = d_s * ((2 * mu_y * n2 - 2 * mu_y * n1) / (d1 * d2) - s * (2 * mu_x / d1 - 2 * mu_x / d2))
    d_xx = d_s * (-s / d2)
    d_xy = d_s * (2 * n1 / (d1 * d2))
    grad = blur(d_mu) + 2 * xz * blur(d_xx) + yz * blur(d_xy) + (1 - w) / count * np.sign(xz - yz) * m3
    return value, grad * m3


def test_masked_loss_matches_numpy_and_finite_differences():
    rng, seed = make_rng()
    h, w = 14, 19
    target = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    y = target_values(target)
    x = np.clip(y + rng.choice([-1, 1], size=y.shape) * rng.uniform(0.02, 0.2, y.shape), -0.5, 1.5).astype(np.float32)
    mask = rng.random((h, w)) > 0.35
    mask[rng.integers(0, h), :] = False        # a masked row and a masked block too
    mask[2:6, 3:9] = False
    weight = float(rng.uniform(0.1, 0.9))
    value, grad = _core.loss_and_grad(x, target, weight, mask.view(np.uint8))
    want, want_grad = masked_loss(x.astype(np.float64), y, mask, weight)
    assert abs(value - want) <= 1e-5 * max(1.0, abs(want)), (value, want, seed)
    assert np.all(grad[~mask] == 0.0), seed
    err = np.linalg.norm(grad - want_grad) / np.linalg.norm(want_grad)
    assert err <= 1e-5, f"analytic: relative error {err:.3g}; seed {seed}"
    # Central differences of the float64 oracle's value, at every element.
    eps = 1e-6
    fd = np.zeros(x.shape)
    xd = x.astype(np.float64)
    for idx in np.ndindex(x.shape):
        old = xd[idx]
        xd[idx] = old + eps
        hi = masked_loss(xd, y, mask, weight)[0]
        xd[idx] = old - eps
        lo = masked_loss(xd, y, mask, weight)[0]
        xd[idx] = old
        fd[idx] = (hi - lo) / (2 * eps)
    err = np.linalg.norm(grad - fd) / np.linalg.norm(fd)
    assert err <= 1e-3, f"finite differences: relative error {err:.3g}; seed {seed}"
    # The target and the render under the mask do not enter at all.
    noisy = target.copy()
    noisy[~mask] = rng.integers(0, 256, (int((~mask).sum()), 3), dtype=np.uint8)
    x2 = x.copy()
    x2[~mask] = rng.uniform(0, 1, (int((~mask).sum()), 3))
    v2, g2 = _core.loss_and_grad(x2, noisy, weight, mask.view(np.uint8))
    assert v2 == value and g2.tobytes() == grad.tobytes(), seed
    # An all-true mask is the unmasked loss, bit for bit; an all-false one is 0.
    v3, g3 = _core.loss_and_grad(x, target, weight, np.ones((h, w), np.uint8))
    v4, g4 = _core.loss_and_grad(x, target, weight)
    assert v3 == v4 and g3.tobytes() == g4.tobytes()
    v5, g5 = _core.loss_and_grad(x, target, weight, np.zeros((h, w), np.uint8))
    assert v5 == 0.0 and not np.any(g5)


def test_masked_metrics_match_scikit_image():
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity
    rng, seed = make_rng()
    h, w = 37, 52
    b = rng.uniform(0, 1, (h, w, 3)).astype(np.float32)
    a = np.clip(b + rng.normal(0, 0.08, b.shape), 0, 1).astype(np.float32)
    mask = np.ones((h, w), bool)
    mask[rng.integers(5, 20):rng.integers(25, 35), rng.integers(0, 20):rng.integers(30, 52)] = False
    mask &= rng.random((h, w)) > 0.1
    # The rectangle can cover the whole interior (about one draw in 700); keep one
    # interior pixel so that scikit-image's mean is defined (the case without one is
    # the next test's).
    mask[rng.integers(5, h - 5), w - 6] = True
    want_psnr = peak_signal_noise_ratio(b[mask], a[mask], data_range=1.0)
    assert splat.psnr(a, b, mask) == pytest.approx(want_psnr, abs=1e-6), seed
    m3 = mask[..., None]
    _, full = structural_similarity(a * m3, b * m3, channel_axis=2, gaussian_weights=True, sigma=1.5,
                                    use_sample_covariance=False, data_range=1.0, full=True)
    inner = np.zeros((h, w), bool)
    inner[5:-5, 5:-5] = True
    want_ssim = full[mask & inner].mean()
    assert splat.ssim(a, b, mask) == pytest.approx(want_ssim, abs=1e-5), seed
    # without a mask: the plain metrics
    assert splat.ssim(a, b, np.ones((h, w), bool)) == pytest.approx(splat.ssim(a, b), abs=1e-7)
    with pytest.raises(ValueError, match="mask"):
        splat.psnr(a, b, np.zeros((h, w), bool))
    with pytest.raises(ValueError, match="mask"):
        splat.ssim(a, b, mask.astype(np.uint8))


def zero_padded_ssim_map(a, b):
    """SSIM per pixel and channel with this file's zero-padded blur: the map the
    training loss averages (`masked_loss`'s s), float64."""
    x, y = a.astype(np.float64), b.astype(np.float64)
    mu_x, mu_y = blur(x), blur(y)
    return ((2 * mu_x * mu_y + SSIM_C1) * (2 * (blur(x * y) - mu_x * mu_y) + SSIM_C2)
            / ((mu_x ** 2 + mu_y ** 2 + SSIM_C1) * (blur(x * x) - mu_x ** 2 + blur(y * y) - mu_y ** 2 + SSIM_C2)))


def test_masked_ssim_without_interior_pixels_averages_the_whole_map():
    """A mask that keeps pixels only within 5 of the border leaves scikit-image's
    interior mean undefined; splat.ssim then averages the zero-padded map over the
    mask's pixels (the loss's map) rather than returning NaN."""
    rng, seed = make_rng()
    h, w = int(rng.integers(20, 40)), int(rng.integers(20, 40))
    b = rng.uniform(0, 1, (h, w, 3)).astype(np.float32)
    a = np.clip(b + rng.normal(0, 0.08, b.shape), 0, 1).astype(np.float32)
    border = np.ones((h, w), bool)
    border[5:-5, 5:-5] = False
    mask = border & (rng.random((h, w)) > 0.3)
    m3 = mask[..., None]
    want = zero_padded_ssim_map(a * m3, b * m3)[mask].mean()
    assert splat.ssim(a, b, mask) == pytest.approx(want, abs=1e-6), seed
    # The oracle is the interior mean too, where there is an interior.
    inner = ~border
    assert splat.ssim(a, b) == pytest.approx(zero_padded_ssim_map(a, b)[inner].mean(), abs=1e-6), seed
    # An image under 11 pixels on a side has no interior at all.
    small = (int(rng.integers(3, 11)), int(rng.integers(3, 30)), 3)
    a, b = rng.uniform(0, 1, small).astype(np.float32), rng.uniform(0, 1, small).astype(np.float32)
    assert splat.ssim(a, b) == pytest.approx(zero_padded_ssim_map(a, b).mean(), abs=1e-6), (small, seed)


# ----------------------------------------------------------------------------- a mixed-size scene

def random_gaussians(rng, n, k=4):
    f = lambda a: np.asarray(a, np.float32)
    sh = rng.normal(0, 0.15, (n, k, 3))
    sh[:, 0] = rng.uniform(-1.2, 1.2, (n, 3))
    return splat.Gaussians(f(rng.normal(0, 0.6, (n, 3))), f(np.log(rng.uniform(0.04, 0.14, (n, 3)))),
                           f(rng.normal(size=(n, 4))), f(rng.uniform(0.0, 3.0, n)), f(sh))


def mixed_cameras(rng, sizes):
    """Orbit cameras, each its own size, focal length and off-centre principal point."""
    cams = []
    for k, (w, h) in enumerate(sizes):
        phi = 2 * np.pi * k / len(sizes) + rng.uniform(0, 0.3)
        eye = 4.0 * np.array([np.cos(phi), np.sin(phi), 0.35 + 0.1 * np.sin(3 * phi)])
        f = rng.uniform(0.8, 1.1) * max(w, h)
        cams.append(splat.Camera(look_at(eye, np.zeros(3)).astype(np.float32), f, f * rng.uniform(0.95, 1.05),
                                 w / 2 + rng.uniform(-3, 3), h / 2 + rng.uniform(-3, 3), w, h))
    return cams


def render_u8(r, g, cam, bg=(1.0, 1.0, 1.0)):
    return np.clip(np.rint(r.forward(g, cam, 1, bg).image * 255), 0, 255).astype(np.uint8)


def mixed_dataset(rng, gt, sizes=SIZES, masked=True):
    cams = mixed_cameras(rng, sizes)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    images = [render_u8(r, gt, c) for c in cams]
    masks = None
    if masked:  # a disc and scattered pixels on some views, none on others
        masks = []
        for k, (w, h) in enumerate(sizes):
            if k % 2:
                masks.append(None)
                continue
            yy, xx = np.mgrid[:h, :w]
            m = (xx - rng.uniform(0, w)) ** 2 + (yy - rng.uniform(0, h)) ** 2 > (0.3 * min(w, h)) ** 2
            masks.append(m & (rng.random((h, w)) > 0.1))
    pts = gt.means + rng.normal(0, 0.02, gt.means.shape).astype(np.float32)
    return Dataset(cameras=cams, images=images, names=[f"v{i}" for i in range(len(sizes))], masks=masks,
                   points=pts, point_colors=rng.uniform(0, 1, pts.shape).astype(np.float32))


def no_densify(**over):
    kw = dict(steps=200, sh_degree=1, sh_degree_interval=1, densify_from=0, densify_until=0,
              opacity_reset_every=10_000)
    kw.update(over)
    return splat.TrainConfig(**kw)


def test_each_step_is_its_views_loss_and_gradient():
    """One epoch over views of five sizes and intrinsics (some masked): every
    step's loss and parameter gradients are those of the rasterizer rendering
    that view at its size, the numpy masked loss against that view's image,
    and the rasterizer's backward."""
    rng, seed = make_rng()
    ds = mixed_dataset(rng, random_gaussians(rng, 90))
    weight = float(rng.uniform(0.1, 0.4))
    # anisotropic, rotated Gaussians (isotropic ones would have no rotation gradient)
    start = random_gaussians(rng, 70)
    tr = splat.Trainer.from_dataset(ds, no_densify(ssim_weight=weight), splat.BackendConfig(backend="cpu"),
                                    initial=start)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    seen = set()
    for t in range(1, len(ds) + 1):
        v = tr._native.view_for_step(t)
        seen.add(v)
        s = tr.state()
        g = splat.Gaussians(s["means"], s["log_scales"], s["quats"], s["opacity_logits"], s["sh"])
        stats = tr.step()
        cam, mask = ds.cameras[v], ds.masks[v]
        out = r.forward(g, cam, stats.sh_degree, ds.background)
        y = target_values(ds.images[v])
        want_loss, d_image = masked_loss(out.image.astype(np.float64), y, mask, weight)
        assert stats.loss == pytest.approx(want_loss, rel=1e-5), (t, v, seed)
        want = r.backward(d_image.astype(np.float32))
        snap = tr._native.debug_snapshot()
        for name in ("means", "log_scales", "quats", "opacity_logits", "sh", "means2d"):
            got = snap["grad." + name]
            ref = getattr(want, name)
            if name == "sh":
                got, ref = got[:, :ref.shape[1]], ref
            err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-12)
            assert err <= 1e-4, f"step {t} view {v} ({cam.width}x{cam.height}) grad.{name}: {err:.3g}; seed {seed}"
        # the rendered image has the view's own shape and tile grid
        assert tr.render(cam).shape == (cam.height, cam.width, 3)
    assert seen == set(range(len(ds)))


def test_noise_under_the_masks_does_not_change_training():
    """Training with densification on masked views gives the same bytes when
    the pixels under the masks hold noise instead of the scene, and different
    ones without the masks."""
    rng, seed = make_rng()
    ds = mixed_dataset(rng, random_gaussians(rng, 120))
    noisy_images = []
    for im, m in zip(ds.images, ds.masks):
        im = im.copy()
        if m is not None:
            im[~m] = rng.integers(0, 256, (int((~m).sum()), 3), dtype=np.uint8)
        noisy_images.append(im)
    noisy = Dataset(cameras=ds.cameras, images=noisy_images, names=ds.names, masks=ds.masks,
                    points=ds.points, point_colors=ds.point_colors)
    unmasked = Dataset(cameras=ds.cameras, images=noisy_images, names=ds.names,
                       points=ds.points, point_colors=ds.point_colors)
    cfg = splat.TrainConfig(steps=120, sh_degree=1, sh_degree_interval=40, densify_from=20, densify_until=100,
                            densify_every=20, densify_grad_threshold=2e-4, opacity_reset_every=60)
    states = []
    for d in (ds, noisy, unmasked):
        tr = splat.Trainer.from_dataset(d, cfg, splat.BackendConfig(backend="cpu"))
        tr.run(cfg.steps, progress=False)
        states.append(tr.state())
    a, b, c = states
    assert a["means"].shape[0] != 120, "densification ran"
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), (k, seed)
    assert a["means"].shape != c["means"].shape or a["means"].tobytes() != c["means"].tobytes(), seed


def test_mixed_sizes_evaluate_checkpoint_and_allocate_once(tmp_path):
    rng, seed = make_rng()
    gt = random_gaussians(rng, 100)
    ds = mixed_dataset(rng, gt)
    cfg = no_densify(steps=60)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    tr.run(len(ds), progress=False)            # every view once: every size has been seen
    warm = tr._native.allocation_count
    tr.run(3 * len(ds), progress=False)
    assert tr._native.allocation_count == warm, "a step on a view of another size allocated"
    with pytest.raises(ValueError, match="different sizes"):
        tr.width
    assert tr.sizes == SIZES

    renders = {}
    ev = splat.evaluate(tr, ds, renders=renders)
    for v, cam, img, name in zip(ev.per_view, ds.cameras, ds.images, ds.names):
        r = renders[name]
        assert r.shape == img.shape == (cam.height, cam.width, 3)
        assert v["psnr"] == pytest.approx(splat.psnr(r, img / 255.0))
    masked = splat.evaluate(tr, ds, masked=True)
    for v, m, name in zip(masked.per_view, ds.masks, ds.names):
        img = ds.images[ds.names.index(name)] / 255.0
        assert v["psnr"] == pytest.approx(splat.psnr(renders[name], img, m))
        assert ("valid_fraction" in v) == (m is not None)
    assert masked.psnr != ev.psnr

    path = tmp_path / "mixed.npz"
    tr.save_checkpoint(path)
    back = splat.Trainer.load_checkpoint(path, ds)
    for k, x in tr.state().items():
        assert back.state()[k].tobytes() == x.tobytes(), k
    a, b = tr.step(), back.step()
    assert a.loss == b.loss
    swapped = Dataset(cameras=ds.cameras[::-1], images=ds.images[::-1], names=ds.names[::-1])
    with pytest.raises(ValueError, match=r"view v4 is 24x41.*48x32"):
        splat.Trainer.load_checkpoint(path, swapped)


def test_streamed_images_train_as_resident_ones():
    """Over a budget the images stay in host memory and each step's view is
    staged a step ahead: the same bytes after training as resident images."""
    rng, seed = make_rng()
    ds = mixed_dataset(rng, random_gaussians(rng, 100))
    cfg = splat.TrainConfig(steps=60, sh_degree=1, sh_degree_interval=20, densify_from=10, densify_until=50,
                            densify_every=10, opacity_reset_every=30)
    rgb, mask = splat.trainer.image_bytes(ds)
    align = lambda x: -(-x // 16) * 16   # packed, each view on 16 bytes
    assert rgb == sum(align(3 * w * h) for w, h in SIZES)
    assert mask == sum(align(m.size) for m in ds.masks if m is not None)
    states, storages = [], []
    for budget in (0, rgb + mask, rgb + mask - 1, 1):
        tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"), image_budget=budget)
        tr.run(cfg.steps, progress=False)
        states.append(tr.state())
        storages.append(tr.image_storage)
    assert [s["streamed"] for s in storages] == [False, False, True, True]
    assert storages[0]["device_bytes"] == storages[0]["image_bytes"] == rgb + mask
    big = max(w * h for w, h in SIZES)
    assert storages[3]["device_bytes"] < rgb + mask and storages[3]["device_bytes"] >= 2 * 3 * big
    for s in states[1:]:
        for k in states[0]:
            assert s[k].tobytes() == states[0][k].tobytes(), (k, seed)
    with pytest.raises(ValueError, match="image_budget"):
        splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"), image_budget=-1)
