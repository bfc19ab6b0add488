"""The native training step: loss and its gradient, Adam, densification,
checkpoints, and learning on a small scene."""
import numpy as np
import pytest

import splat
from splat import _core
from splat.data.dataset import Dataset
from splat.reference.mcmc import random_key, random_normal  # the backends' counter RNG (shaders/common/random.h)
from _scenes import look_at, make_rng

SSIM_C1, SSIM_C2 = 0.01 ** 2, 0.03 ** 2


# ----------------------------------------------------------------------------- numpy oracles
def gaussian_blur(x):
    """11-tap Gaussian (sigma 1.5) separable blur with zero padding, float64, [H,W,C]."""
    taps = np.exp(-((np.arange(11) - 5) ** 2) / 4.5)
    taps /= taps.sum()
    h, w = x.shape[:2]
    pad = np.pad(x, ((5, 5), (5, 5), (0, 0)))
    tmp = sum(taps[k] * pad[:, k:k + w] for k in range(11))
    return sum(taps[k] * tmp[k:k + h] for k in range(11))


def numpy_loss(x, y, w=0.2):
    mu_x, mu_y = gaussian_blur(x), gaussian_blur(y)
    sxx = gaussian_blur(x * x) - mu_x ** 2
    syy = gaussian_blur(y * y) - mu_y ** 2
    sxy = gaussian_blur(x * y) - mu_x * mu_y
    ssim = ((2 * mu_x * mu_y + SSIM_C1) * (2 * sxy + SSIM_C2)) / ((mu_x ** 2 + mu_y ** 2 + SSIM_C1) * (sxx + syy + SSIM_C2))
    return (1 - w) * np.abs(x - y).mean() + w * (1 - ssim.mean())


def test_loss_and_gradient_match_numpy_finite_differences():
    rng, seed = make_rng()
    h, w = 13, 19
    target = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    y = target / 255.0
    # Keep x away from y so |x - y| is differentiable at every element.
    x = np.clip(y + rng.choice([-1, 1], size=y.shape) * rng.uniform(0.02, 0.2, y.shape), -0.5, 1.5).astype(np.float32)
    weight = float(rng.uniform(0.1, 0.9))
    value, grad = _core.loss_and_grad(x, target, weight)
    want = numpy_loss(x.astype(np.float64), y, weight)
    assert abs(value - want) <= 1e-5 * max(1.0, abs(want)), (value, want, seed)
    # Central differences of the float64 oracle at every element.
    eps = 1e-6
    fd = np.zeros_like(grad, dtype=np.float64)
    xd = x.astype(np.float64)
    for idx in np.ndindex(x.shape):
        old = xd[idx]
        xd[idx] = old + eps
        hi = numpy_loss(xd, y, weight)
        xd[idx] = old - eps
        lo = numpy_loss(xd, y, weight)
        xd[idx] = old
        fd[idx] = (hi - lo) / (2 * eps)
    err = np.linalg.norm(grad - fd) / np.linalg.norm(fd)
    assert err <= 1e-3, f"relative error {err:.3g}; seed {seed}"


def test_native_ssim_matches_numpy():
    rng, seed = make_rng()
    a = rng.uniform(0, 1, (21, 34, 3)).astype(np.float32)
    b = np.clip(a + rng.normal(0, 0.1, a.shape), 0, 1).astype(np.float32)
    full, interior = _core.ssim(a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    mu_a, mu_b = gaussian_blur(a64), gaussian_blur(b64)
    m = ((2 * mu_a * mu_b + SSIM_C1) * (2 * (gaussian_blur(a64 * b64) - mu_a * mu_b) + SSIM_C2)) / (
        (mu_a ** 2 + mu_b ** 2 + SSIM_C1) * (gaussian_blur(a64 * a64) - mu_a ** 2 + gaussian_blur(b64 * b64) - mu_b ** 2 + SSIM_C2))
    assert abs(full - m.mean()) < 1e-5, seed
    assert abs(interior - m[5:-5, 5:-5].mean()) < 1e-5, seed


# ----------------------------------------------------------------------------- a small scene
def orbit_cameras(n, width, height, radius=4.0, rng=None):
    cams = []
    for k in range(n):
        phi = 2 * np.pi * k / n + (rng.uniform(0, 0.3) if rng is not None else 0.0)
        eye = radius * np.array([np.cos(phi), np.sin(phi), 0.35 + 0.1 * np.sin(3 * phi)])
        w2c = look_at(eye, np.zeros(3)).astype(np.float32)
        f = 0.9 * width
        cams.append(splat.Camera(w2c, f, f, width / 2, height / 2, width, height))
    return cams


def random_gaussians(rng, n, k=4, spread=0.6, scale=(0.04, 0.12)):
    f = lambda a: np.asarray(a, np.float32)
    sh = rng.normal(0, 0.15, (n, k, 3))
    sh[:, 0] = rng.uniform(-1.2, 1.2, (n, 3))
    return splat.Gaussians(f(rng.normal(0, spread, (n, 3))), f(np.log(rng.uniform(*scale, (n, 3)))),
                           f(rng.normal(size=(n, 4))), f(rng.uniform(0.0, 3.0, n)), f(sh))


def make_dataset(rng, gt, n_views=8, width=40, height=32, degree=1):
    cams = orbit_cameras(n_views, width, height, rng=rng)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    images = np.stack([np.clip(np.rint(r.forward(gt, c, degree, (1.0, 1.0, 1.0)).image * 255), 0, 255)
                       for c in cams]).astype(np.uint8)
    pts = gt.means + rng.normal(0, 0.02, gt.means.shape).astype(np.float32)
    return Dataset(cameras=cams, images=images, names=[f"v{i}" for i in range(n_views)],
                   points=pts, point_colors=rng.uniform(0, 1, pts.shape).astype(np.float32))


def small_config(**over):
    kw = dict(steps=300, sh_degree=1, sh_degree_interval=100, densify_from=50, densify_until=250,
              densify_every=50, opacity_reset_every=1000)
    kw.update(over)
    return splat.TrainConfig(**kw)


# ----------------------------------------------------------------------------- Adam
def adam_params(tr, cfg, name, t, p0, m1, v1, scale=1.0):
    """(learning rate, parameters) after numpy's Adam step t of group `name` from p0 with
    the new moments m1, v1: the recipe's rate per group (SH DC and rest apart, the means'
    scheduled), every group but the means' times `scale` (lr_final_fraction's decay)."""
    if name == "means":
        lr = np.float64(tr._native.means_lr(t))
    elif name == "sh":
        lr = np.full(m1.shape, cfg.sh_rest_lr)
        lr[:, 0, :] = cfg.sh_dc_lr
    else:
        lr = dict(log_scales=cfg.log_scales_lr, quats=cfg.quats_lr, opacity_logits=cfg.opacity_lr)[name]
    if name != "means":
        lr = lr * scale
    b1, b2 = cfg.adam_beta1, cfg.adam_beta2
    return lr, p0 - lr * (m1 / (1 - b1 ** t)) / (np.sqrt(v1 / (1 - b2 ** t)) + cfg.adam_eps)


def test_fused_adam_matches_numpy_adam_over_several_steps():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=4)
    # float32 moments: numpy's Adam as it is (bfloat16's rounding: test_adam_moments.py)
    cfg = small_config(densify_from=10_000, densify_until=10_000, adam_moments="float32")
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    prev = tr.state()
    for t in range(1, 6):
        tr.step()
        cur = tr.state()
        b1, b2 = cfg.adam_beta1, cfg.adam_beta2
        for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
            m0, v0 = prev["adam_m." + name].astype(np.float64), prev["adam_v." + name].astype(np.float64)
            m1 = cur["adam_m." + name].astype(np.float64)
            g = (m1 - b1 * m0) / (1 - b1)  # the step's gradient, recovered from the first moment
            v1 = b2 * v0 + (1 - b2) * g * g
            np.testing.assert_allclose(cur["adam_v." + name], v1, rtol=1e-4, atol=1e-12, err_msg=f"{name} v; seed {seed}")
            lr, p1 = adam_params(tr, cfg, name, t, prev[name], m1, v1)
            np.testing.assert_allclose(cur[name], p1, rtol=1e-5, atol=1e-6, err_msg=f"{name} params; seed {seed}")
        assert np.any(cur["adam_m.means"] != 0)
        prev = cur
    extent = ds.scene_extent
    assert np.isclose(tr._native.means_lr(0), cfg.means_lr * extent, rtol=1e-6)
    assert np.isclose(tr._native.means_lr(cfg.steps), cfg.means_lr_final * extent, rtol=1e-6)
    mid = np.exp(0.5 * (np.log(cfg.means_lr) + np.log(cfg.means_lr_final))) * extent
    assert np.isclose(tr._native.means_lr(cfg.steps // 2), mid, rtol=1e-5)


def test_visible_adam_steps_only_the_gaussians_the_view_saw():
    """train.visible_adam: a Gaussian the step's view did not see (radius 0 in its
    projection, as a Rasterizer gives it for the state before the step) keeps its
    parameters and both moments to the bit, momentum included; every seen one
    takes the Adam step of its gradient (numpy, from the step's gradients)."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=4)
    g = random_gaussians(rng, 300, spread=1.6)   # many outside one view or another
    start = dict(means=g.means, log_scales=g.log_scales, quats=g.quats, opacity_logits=g.opacity_logits, sh=g.sh)
    cfg = small_config(visible_adam=True, densify_from=10_000, densify_until=10_000, adam_moments="float32")
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), start)
    b1, b2 = cfg.adam_beta1, cfg.adam_beta2
    raster = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    prev, unseen, moved_unseen_before = tr.state(), 0, 0
    for t in range(1, 9):
        before = splat.Gaussians(*(prev[k] for k in ("means", "log_scales", "quats", "opacity_logits", "sh")))
        seen = raster.forward(before, ds.cameras[tr._native.view_for_step(t)], sh_degree=0).radii > 0
        tr.step()
        cur, snap = tr.state(), tr._native.debug_snapshot()
        unseen += int((~seen).sum())
        moved_unseen_before += int(np.any(prev["adam_m.means"][~seen] != 0))
        for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
            for k in (name, "adam_m." + name, "adam_v." + name):
                np.testing.assert_array_equal(cur[k][~seen], prev[k][~seen], err_msg=f"{k} unseen; seed {seed}")
            grad = snap["grad." + name].reshape(cur[name].shape).astype(np.float64)
            m1 = b1 * prev["adam_m." + name] + (1 - b1) * grad
            v1 = b2 * prev["adam_v." + name] + (1 - b2) * grad * grad
            lr, p1 = adam_params(tr, cfg, name, t, prev[name], m1, v1)
            lr_seen = lr[seen] if np.ndim(lr) else lr
            # float32 sums of b1 m and (1 - b1) g: rounding relative to the group's largest moment
            np.testing.assert_allclose(cur["adam_m." + name][seen], m1[seen], rtol=1e-5,
                                       atol=1e-6 * np.abs(m1).max() + 1e-30, err_msg=f"{name} m; seed {seed}")
            np.testing.assert_allclose(cur[name][seen], p1[seen], rtol=1e-5, atol=1e-6 * np.max(lr_seen) / 1e-3,
                                       err_msg=f"{name} params; seed {seed}")
        prev = cur
    # the test saw what it is about: unseen Gaussians, some with momentum they kept
    assert 0 < unseen < 8 * len(g) and moved_unseen_before > 0, (unseen, moved_unseen_before, seed)


# ----------------------------------------------------------------------------- densification
def quat_to_rot(q):
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def test_densification_on_a_constructed_scene():
    """Gaussians behind every camera get no gradient, so only the statistics we
    set decide: which clone, split and prune, and what the children are."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 30), n_views=3)
    extent = ds.scene_extent
    # float32 moments: the survivors' moments are checked against numpy's Adam
    cfg = small_config(densify_from=0, densify_until=1000, densify_every=10, opacity_reset_every=5,
                       seed=int(rng.integers(0, 2 ** 31)), adam_moments="float32")
    n = 12
    f = lambda a: np.ascontiguousarray(a, np.float32)
    # Far outside the cameras' orbit, below the ground plane and behind them all.
    means = f(rng.normal(0, 0.05, (n, 3)) + np.array([0.0, 0.0, -60.0]))
    small, large = np.log(0.5 * cfg.percent_dense * extent), np.log(3 * cfg.percent_dense * extent)
    log_scales = np.full((n, 3), small, np.float32)
    #  0-2: clone (small, high grad); 3-5: split (large, high grad); 6-7: keep (low grad);
    #  8: pruned for opacity; 9: split but its children are still too big (world prune);
    #  10: high grad but never visible (count 0); 11: keep.
    log_scales[3:6] = large + rng.uniform(-0.2, 0.2, (3, 3))
    log_scales[9] = np.log(cfg.prune_max_world_scale * extent * cfg.split_scale_divisor * 1.5)
    quats = f(rng.normal(size=(n, 4)))
    opacity = f(rng.uniform(0.5, 2.0, n))
    opacity[8] = np.log(0.001 / 0.999)
    sh = f(rng.normal(0, 0.3, (n, 4, 3)))
    count = f(rng.integers(1, 10, n))
    count[10] = 0
    grad = np.where(np.isin(np.arange(n), [0, 1, 2, 3, 4, 5, 9, 10]), 2.0, 0.1) * cfg.densify_grad_threshold
    state = dict(means=means, log_scales=f(log_scales), quats=quats, opacity_logits=opacity, sh=sh,
                 grad_accum=f(grad * count), grad_count=count, max_radii=f(np.zeros(n)))
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
        state["adam_m." + name] = f(rng.normal(0, 1e-3, state[name].shape))
        state["adam_v." + name] = f(rng.uniform(1e-6, 1e-5, state[name].shape))
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state, step=9)
    # Step 10 renders (these Gaussians stay invisible), runs Adam, then densifies.
    stats = tr.step()
    assert stats.densified
    after = tr.state()
    b1, b2 = cfg.adam_beta1, cfg.adam_beta2

    # Expected order: survivors (not split, not pruned) in index order, clones, split children.
    survivors = [i for i in range(n) if i not in (3, 4, 5, 9, 8)]
    clones = [0, 1, 2]
    children = [(i, c) for i in (3, 4, 5) for c in range(2)]  # 9's children are pruned
    assert after["means"].shape[0] == len(survivors) + len(clones) + len(children), seed
    # The step before densifying applied Adam with zero gradients: recompute the parents.
    t = 10
    params = {}
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
        m = b1 * state["adam_m." + name].astype(np.float64)
        v = b2 * state["adam_v." + name].astype(np.float64)
        lr = {"means": tr._native.means_lr(t), "log_scales": cfg.log_scales_lr, "quats": cfg.quats_lr,
              "opacity_logits": cfg.opacity_lr}.get(name)
        if lr is None:
            lr = np.full(m.shape, cfg.sh_rest_lr)
            lr[:, 0, :] = cfg.sh_dc_lr
        params[name] = state[name] - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + cfg.adam_eps)
        params["m." + name], params["v." + name] = m, v
    row = 0
    for i in survivors + clones:
        original = row < len(survivors)
        for name in ("means", "log_scales", "quats", "sh"):
            np.testing.assert_allclose(after[name][row], params[name][i], rtol=1e-5, atol=1e-6, err_msg=f"{name} {i}")
            want_m = params["m." + name][i] if original else 0.0
            np.testing.assert_allclose(after["adam_m." + name][row], want_m, rtol=1e-4, atol=1e-12)
        row += 1
    div = np.log(cfg.split_scale_divisor)
    for i, c in children:
        ls = params["log_scales"][i]
        np.testing.assert_allclose(after["log_scales"][row], ls - div, rtol=1e-5, atol=1e-5)
        rot = quat_to_rot(params["quats"][i].astype(np.float64))
        keys = [random_key(cfg.seed, t, i, 6 * c + k) for k in range(6)]
        normal = np.array([random_normal(keys[2 * k], keys[2 * k + 1]) for k in range(3)])
        want = params["means"][i] + rot @ (np.exp(ls) * normal)
        np.testing.assert_allclose(after["means"][row], want, rtol=1e-4, atol=1e-5, err_msg=f"child {i}.{c}")
        for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
            assert np.all(after["adam_m." + name][row] == 0) and np.all(after["adam_v." + name][row] == 0)
        row += 1
    # Statistics restart after densifying.
    assert np.all(after["grad_accum"] == 0) and np.all(after["grad_count"] == 0)
    # Step 10 is also an opacity reset (every 5): opacity <= 0.01 and its moments restart.
    assert np.all(after["opacity_logits"] <= np.log(0.01 / 0.99) + 1e-6)
    assert np.all(after["adam_m.opacity_logits"] == 0)


# ----------------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_restores_exact_state(tmp_path):
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 80), n_views=5)
    cfg = small_config(densify_from=5, densify_every=10, seed=int(rng.integers(0, 1000)))
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    for _ in range(25):
        tr.step()
    path = tmp_path / "ckpt.npz"
    tr.save_checkpoint(path)
    saved = tr.state()
    loaded = splat.Trainer.load_checkpoint(path, ds)
    assert loaded.step_count == 25
    for k, v in loaded.state().items():
        assert v.tobytes() == saved[k].tobytes(), k
    for _ in range(22):  # crosses two densification steps
        a, b = tr.step(), loaded.step()
        assert a.loss == b.loss and a.num_gaussians == b.num_gaussians
    sa, sb = tr.state(), loaded.state()
    for k in sa:
        assert sa[k].tobytes() == sb[k].tobytes(), f"{k} diverged; seed {seed}"
    with pytest.raises(ValueError, match="not a readable splat checkpoint"):
        bad = tmp_path / "bad.npz"
        bad.write_bytes(b"not a checkpoint")
        splat.Trainer.load_checkpoint(bad, ds)
    with pytest.raises(FileNotFoundError, match="no such file"):
        splat.Trainer.load_checkpoint(tmp_path / "missing.npz", ds)
    (tmp_path / "folder.npz").mkdir()
    with pytest.raises(IsADirectoryError, match=r"folder\.npz: is a folder, not a checkpoint file"):
        splat.Trainer.load_checkpoint(tmp_path / "folder.npz", ds)


def test_ply_of_a_trainer_round_trips(tmp_path):
    rng, _ = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 40), n_views=3)
    tr = splat.Trainer.from_dataset(ds, small_config(), splat.BackendConfig(backend="cpu"))
    tr.step()
    tr.save_ply(tmp_path / "g.ply")
    from splat.io.ply import load_ply
    g, h = load_ply(tmp_path / "g.ply"), tr.gaussians()
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
        np.testing.assert_array_equal(getattr(g, name), getattr(h, name))


# ----------------------------------------------------------------------------- learning
def test_training_learns_a_small_scene_without_allocating_when_warm():
    """900 steps on 10 views of 200 random Gaussians, test PSNR on 3 novel views.
    Measured over 71 seeds: 27.2 dB mean (std 1.4, worst 23.9), a gain of 11.1 dB
    (std 1.2, worst 7.8) over the untrained 15-17 dB. The bar, 22.5 dB and +6.5 dB,
    sits 3.4 and 3.7 standard deviations below the means: far above an untrained
    model, out of reach of the scene's randomness (24 and +8 failed one seed in 71)."""
    rng, seed = make_rng()
    gt = random_gaussians(rng, 200)
    ds = make_dataset(rng, gt, n_views=10)
    test = make_dataset(rng, gt, n_views=3)
    cfg = small_config(steps=900, densify_until=700, densify_grad_threshold=1e-3)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    before = splat.evaluate(tr, test).psnr
    tr.run(860, progress=False)
    warm = tr._native.allocation_count
    s = tr.run(40, progress=False)  # past densify_until: nothing may allocate
    assert tr._native.allocation_count == warm
    after = splat.evaluate(tr, test)
    assert after.psnr >= 22.5 and after.psnr > before + 6.5, (before, after.psnr, seed)
    assert np.isfinite(s.loss) and s.num_gaussians > 200


# ----------------------------------------------------------------------------- instrumentation
def test_timings_and_debug_snapshot():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 120), n_views=4)
    timed = splat.Trainer.from_dataset(ds, small_config(), splat.BackendConfig(backend="cpu", timing="per_kernel"))
    plain = splat.Trainer.from_dataset(ds, small_config(), splat.BackendConfig(backend="cpu"))
    for _ in range(3):
        timed.step()
        plain.step()
    t = timed._native.timings(reset=True)
    for label in ("ts_fwd_project", "ts_fwd_emit_pairs", "ts_fwd_rasterize", "ts_ssim", "ts_backward_raster",
                  "ts_project_back", "ts_adam"):
        assert t[label]["calls"] == 3 and t[label]["total_ms"] > 0, label
    assert timed._native.timings() == {}  # reset
    assert plain._native.timings() == {}  # timing off
    a, b = timed._native.debug_snapshot(), plain._native.debug_snapshot()
    ranges = a["tile_ranges"]
    assert ranges[0, 0] == 0 and ranges[-1, 1] == len(a["sorted_gauss"])
    assert np.all(ranges[1:, 0] == ranges[:-1, 1]) and np.all(ranges[:, 1] >= ranges[:, 0])
    for k in a:  # the cpu backend is bitwise deterministic, timed or not
        assert a[k].tobytes() == b[k].tobytes(), (k, seed)
    assert np.any(a["grad.means"] != 0) and np.any(a["grad.means2d"] != 0)


def deterministic_runs(backend, size, steps=300):
    """The states after two deterministic runs of `steps` steps (densification
    included) on a fresh size x size synthetic scene."""
    from splat.data.synthetic import default_train_config, make_scene
    train, _ = make_scene(n_gaussians=250, n_views=12, width=size, height=size,
                          seed=int(np.random.default_rng().integers(1000)))
    cfg = default_train_config(steps=steps, image_size=size)
    states = []
    for _ in range(2):
        tr = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend=backend, deterministic=True))
        tr.run(steps, progress=False)
        states.append(tr.state())
    return states


def test_deterministic_training_is_bitwise_reproducible():
    """Two runs of 300 steps on the synthetic scene give identical bytes for
    every parameter, moment and statistic (densification included)."""
    a, b = deterministic_runs("cpu", 40)
    assert a["means"].shape[0] != 0
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), k


# ----------------------------------------------------------------------------- the chunked stop
def test_blend_stop_reaches_the_trainers_steps_and_renders():
    """[train] blend_stop = "chunk" (docs/gpu.md, "The chunked stop") on lists many
    256-entry chunks deep: the trainer renders with it (the Rasterizer's chunked image,
    which the 3DGS stop's differs from), and its step follows it; on shallow lists the
    two rules are the same rule, to the bit."""
    rng, seed = make_rng()
    for n, deep in ((3000, True), (40, False)):
        gt = random_gaussians(rng, n, scale=(0.2, 0.5))
        gt.opacity_logits[:] = rng.uniform(-4.5, -2.5, n) if deep else rng.uniform(0.0, 3.0, n)
        ds = make_dataset(rng, gt, n_views=4)
        steps = {}
        for rule in ("splat", "chunk"):
            cfg = small_config(steps=2, blend_stop=rule, densify_from=100)
            tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"), initial=gt)
            cam = ds.cameras[1]  # the render at step 0 evaluates SH degree 0
            r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
            want = r.forward(tr.gaussians(), cam, 0, tr.background, blend_stop=rule).image
            other = r.forward(tr.gaussians(), cam, 0, tr.background, blend_stop={"splat": "chunk", "chunk": "splat"}[rule])
            np.testing.assert_array_equal(tr.render(cam), want, err_msg=f"{rule}; seed {seed}")
            assert (np.abs(want - other.image).max() > 1e-5) == deep, (rule, seed)
            tr.run(1, progress=False)
            steps[rule] = tr.gaussians().means.copy()
        assert (not np.array_equal(steps["splat"], steps["chunk"])) == deep, seed
