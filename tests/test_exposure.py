"""Exposure compensation: the per-view affine colour correction's forward and
gradients (its 12 parameters and the image) against numpy and finite
differences, learning per-view colour shifts, and exact checkpoint resume."""
import numpy as np
import pytest

import splat
from splat import _core
from splat.data.dataset import Dataset
from _scenes import load_reference, make_rng
from test_training import numpy_loss, orbit_cameras, random_gaussians, small_config

reference = load_reference()
IDENTITY = np.eye(3, 4, dtype=np.float32)


def state_of(g, **extra):
    return dict(means=g.means, log_scales=g.log_scales, quats=g.quats, opacity_logits=g.opacity_logits, sh=g.sh,
                **extra)


def corrected(x, e):
    """[A | b] applied to an [H,W,3] image."""
    return x @ e[:, :3].T + e[:, 3]


def shifted_dataset(rng, gt, corrections, width=40, height=32, background=(0.4, 0.4, 0.4)):
    """Views of `gt`, each composited on `background` and shifted by its own [A | b]."""
    cams = orbit_cameras(len(corrections), width, height, rng=rng)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    images = []
    for c, e in zip(cams, corrections):
        x = r.forward(gt, c, 1, background).image.astype(np.float64)
        images.append(np.clip(np.rint(corrected(x, e) * 255), 0, 255).astype(np.uint8))
    pts = gt.means + rng.normal(0, 0.02, gt.means.shape).astype(np.float32)
    return Dataset(cameras=cams, images=np.stack(images), names=[f"v{i}" for i in range(len(cams))],
                   points=pts, point_colors=rng.uniform(0, 1, pts.shape).astype(np.float32), background=background)


def random_corrections(rng, n, gain=0.15, bias=0.05):
    e = np.repeat(IDENTITY[None], n, axis=0)
    e[:, :, :3] += rng.uniform(-gain, gain, (n, 3, 3)) * np.where(np.eye(3) > 0, 1.0, 0.2)
    e[:, :, 3] = rng.uniform(-bias, bias, (n, 3))
    return e.astype(np.float32)


def test_exposure_forward_and_gradients_match_numpy_and_finite_differences():
    rng, seed = make_rng()
    width, height = 30, 24
    ds = shifted_dataset(rng, random_gaussians(rng, 50), random_corrections(rng, 1), width, height)
    start = random_gaussians(rng, 40)
    e = random_corrections(rng, 1, gain=0.3, bias=0.1)
    cfg = small_config(exposure=True, densify_from=1000, densify_until=2000)
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state_of(start, exposure=e))
    s = tr.step()
    snap = tr._native.debug_snapshot()
    cam, target = ds.cameras[0], ds.images[0]
    y = target / 255.0
    x = splat.Rasterizer(splat.BackendConfig(backend="cpu")).forward(start, cam, 0, ds.background).image
    x = x.astype(np.float64)

    # Forward: the loss sees A x + b.
    want = numpy_loss(corrected(x, e[0].astype(np.float64)), y)
    assert abs(s.loss - want) <= 2e-5 * want, (s.loss, want, seed)
    # The correction matters here: the loss is far nearer the corrected
    # image's than the plain one's. Over 300 seeds the two losses differ by
    # 8e-4 to 0.5 of the loss (a fixed 1e-3 failed 3% of seeds); the trainer's
    # loss sits within 6e-6 of the corrected one's (45 seeds: at most 1e-3 of
    # the gap to the plain one's).
    assert abs(s.loss - want) < 0.05 * abs(s.loss - numpy_loss(x, y)), (s.loss, want, numpy_loss(x, y), seed)

    # d loss / d [A | b]: central differences of the float64 loss.
    fd = np.zeros((3, 4))
    eps = 1e-5
    for idx in np.ndindex(3, 4):
        hi, lo = e[0].astype(np.float64), e[0].astype(np.float64)
        hi[idx] += eps
        lo[idx] -= eps
        fd[idx] = (numpy_loss(corrected(x, hi), y) - numpy_loss(corrected(x, lo), y)) / (2 * eps)
    got = snap["grad.exposure"]
    err = np.linalg.norm(got - fd) / np.linalg.norm(fd)
    assert err < 2e-3, (err, got, fd, seed)
    # ... and the closed form sum_p d_i x_j, d_i of the loss's own image gradient.
    out = corrected(x, e[0].astype(np.float64)).astype(np.float32)
    _, d_out = _core.loss_and_grad(np.ascontiguousarray(out), target, 0.2)
    d_out = d_out.astype(np.float64)
    closed = np.concatenate([np.einsum("hwi,hwj->ij", d_out, x), d_out.sum((0, 1))[:, None]], axis=1)
    np.testing.assert_allclose(got, closed, rtol=1e-4, atol=1e-6 * np.abs(closed).max())

    # Through to the image: the Gaussians' gradients are the reference
    # backward of A^T d_out.
    ref = reference.backward(reference.forward_scene(start, cam, 0, np.asarray(ds.background)),
                             d_out @ e[0, :, :3].astype(np.float64))
    for name in ("means", "log_scales", "opacity_logits"):
        a, b = snap[f"grad.{name}"], getattr(ref, name)
        rel = np.linalg.norm(a - b) / np.linalg.norm(b)
        assert rel < 1e-3, (name, rel, seed)


def error_up_to_a_common_map(corrections, truth, colours):
    """Mean absolute error of every view's correction against the truth, after
    the one affine map G of the scene's colours that fits best over all views
    (least squares on `colours`): corrections C_v and scene colours G x render
    the same images as C_v G, so only the C_v G are identifiable. Measuring
    against one view's correction instead (C_v C_0^-1) charges that view's
    error to every other view."""
    x1 = np.concatenate([colours, np.ones((len(colours), 1))], axis=1)
    # C_v (G x) = A_v (M x + c) + b_v is linear in G's 12 entries: one block of
    # 3 equations per colour and view.
    rows = [np.einsum("ij,pk->pijk", c[:, :3], x1).reshape(-1, 12) for c in corrections]
    rhs = [(corrected(colours, t) - c[:, 3]).reshape(-1) for c, t in zip(corrections, truth)]
    g = np.linalg.lstsq(np.concatenate(rows), np.concatenate(rhs), rcond=None)[0].reshape(3, 4)
    return np.mean([np.abs(corrected(corrected(colours, g), c) - corrected(colours, t)).mean()
                    for c, t in zip(corrections, truth)])


def test_exposure_learns_per_view_colour_shifts():
    """8 views of one scene, each with its own colour shift (view 0 none);
    400 steps with and without exposure compensation from the same start.
    The corrections are identifiable only up to one map the views share (the
    scene can absorb it), so both the learned corrections and no correction at
    all are compared with the truth after each one's best common map
    (`error_up_to_a_common_map`). Measured over 111 seeds: the loss of the last
    80 steps 0.62-0.90x the uncorrected run's; over 81 seeds, the learned
    corrections' error 0.063-0.33x that of no correction (median 0.10).
    Measured against view 0's correction instead (the earlier form of this
    test), the same seeds gave up to 0.78x: on one seed in twenty the learned
    correction of view 0 was off, and that counted against all seven others.
    Bounds: 0.95 and 0.5, above the largest seen."""
    rng, seed = make_rng()
    gt = random_gaussians(rng, 150)
    truth = random_corrections(rng, 8)
    truth[0] = IDENTITY
    ds = shifted_dataset(rng, gt, truth)
    runs = {}
    for exposure in (False, True):
        cfg = small_config(steps=400, densify_until=300, exposure=exposure, seed=3)
        tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
        losses = [tr.step().loss for _ in range(400)]
        runs[exposure] = (np.mean(losses[-80:]), tr)
    assert runs[True][0] < 0.95 * runs[False][0], (runs[True][0], runs[False][0], seed)
    assert runs[False][1].exposure() is None
    learned = runs[True][1].exposure().astype(np.float64)
    assert learned.shape == (8, 3, 4)

    # On the colours of view 0's image, whose correction is the identity: the
    # scene's own colours, the directions the views constrain.
    colours = ds.images[0].reshape(-1, 3) / 255.0
    t = truth.astype(np.float64)
    err_learned = error_up_to_a_common_map(learned, t, colours)
    err_none = error_up_to_a_common_map(np.repeat(IDENTITY[None], 8, axis=0).astype(np.float64), t, colours)
    assert err_learned < 0.5 * err_none, (err_learned, err_none, seed)


def test_corrections_keep_their_mean_at_the_identity():
    """The corrections are defined only relative to one another: without a
    constraint the scene's colours and every view's correction drift together,
    and an uncorrected render (evaluation) drifts with them. After every step
    the mean correction is the identity to float rounding, while the views'
    own corrections move. Measured on this scene (views without any exposure
    difference, 600 steps, 8 seeds): without the centring the mean gain
    drifted to 0.985-0.993; on thermos (CPU, 1/4 size, 600 steps) the drift
    cost the uncorrected test PSNR 5.8 dB (24.33 against 30.11 without
    exposure compensation; centred: 29.05)."""
    rng, seed = make_rng()
    gt = random_gaussians(rng, 150)
    ds = shifted_dataset(rng, gt, np.repeat(IDENTITY[None], 10, axis=0))
    cfg = small_config(steps=300, densify_until=200, exposure=True, seed=3)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    for _ in range(300):
        tr.step(read_loss=False)
    learned = tr.exposure().astype(np.float64)
    assert np.abs(learned.mean(axis=0) - IDENTITY).max() < 1e-6, (learned.mean(axis=0), seed)
    assert np.abs(learned - IDENTITY).max() > 1e-3, seed   # the corrections did move


def test_exposure_checkpoint_round_trip_resumes_exactly(tmp_path):
    rng, seed = make_rng()
    ds = shifted_dataset(rng, random_gaussians(rng, 60), random_corrections(rng, 4))
    cfg = small_config(exposure=True, densify_from=5, densify_every=10, seed=int(rng.integers(0, 1000)))
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    for _ in range(25):
        tr.step()
    saved = tr.state()
    assert saved["exposure"].shape == (4, 3, 4) and not np.array_equal(saved["exposure"][0], IDENTITY)
    path = tmp_path / "ckpt.npz"
    tr.save_checkpoint(path)
    loaded = splat.Trainer.load_checkpoint(path, ds)
    for k, v in loaded.state().items():
        assert v.tobytes() == saved[k].tobytes(), k
    for _ in range(22):
        a, b = tr.step(), loaded.step()
        assert a.loss == b.loss and a.num_gaussians == b.num_gaussians
    sa, sb = tr.state(), loaded.state()
    for k in sa:
        assert sa[k].tobytes() == sb[k].tobytes(), f"{k} diverged; seed {seed}"
    npy = tmp_path / "exposure.npy"
    tr.save_exposure(npy)
    np.testing.assert_array_equal(np.load(npy), sa["exposure"])
    # A state with the wrong number of views is refused, naming the array.
    bad = dict(sa, exposure=sa["exposure"][:2], **{"adam_m.exposure": sa["adam_m.exposure"][:2],
                                                   "adam_v.exposure": sa["adam_v.exposure"][:2]})
    with pytest.raises(Exception, match="exposure"):
        splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), bad)


def test_exposure_starts_at_identity_and_config_keys():
    rng, _ = make_rng()
    ds = shifted_dataset(rng, random_gaussians(rng, 30), random_corrections(rng, 3))
    tr = splat.Trainer.from_dataset(ds, small_config(exposure=True), splat.BackendConfig(backend="cpu"))
    np.testing.assert_array_equal(tr.exposure(), np.repeat(IDENTITY[None], 3, axis=0))
    cfg = splat.TrainConfig()
    assert cfg.exposure is False and cfg.exposure_lr == 1e-2 and cfg.exposure_lr_final == 1e-3
    with pytest.raises(splat.ConfigError, match="exposure_lr"):
        splat.TrainConfig(exposure_lr=-1.0)


def check_warm_exposure_absgrad_allocates_nothing(backend: str) -> None:
    """Exposure and absgrad on `backend`: once warm (past densification), 20 more steps
    allocate nothing (the CUDA suite runs it too)."""
    rng, seed = make_rng()
    ds = shifted_dataset(rng, random_gaussians(rng, 80), random_corrections(rng, 3))
    cfg = small_config(exposure=True, absgrad=True, densify_from=5, densify_every=5, densify_until=20)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend=backend))
    tr.run(25, progress=False)
    warm = tr._native.allocation_count
    tr.run(20, progress=False)
    assert tr._native.allocation_count == warm, seed


def test_exposure_and_absgrad_allocate_nothing_when_warm():
    check_warm_exposure_absgrad_allocates_nothing("cpu")
