"""The GPU training step on views of different sizes and intrinsics, with
masks, against the CPU backend (tolerances as in test_cuda_training.py), and
its packed image storage: noise under the masks leaves deterministic training
unchanged, no step allocates once every view was seen.
Run on a GPU: `pytest -m cuda tests/test_cuda_mixed_sizes.py`.
"""
import numpy as np
import pytest

import splat
from splat.data.dataset import Dataset
from _parity import flipped_rows, rel_err
from _scenes import make_rng
from test_cuda_training import PARAMS, TINY, assert_states_close, trainers
from test_mixed_sizes import SIZES, mixed_dataset, no_densify, random_gaussians

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)


def with_blank_view(ds):
    """ds plus a view masked entirely (its loss and gradient are 0)."""
    masks = list(ds.masks) + [np.zeros(ds.images[0].shape[:2], bool)]
    return Dataset(cameras=ds.cameras + ds.cameras[:1], images=ds.images + ds.images[:1],
                   names=ds.names + ["blank"], masks=masks, points=ds.points, point_colors=ds.point_colors)


# A splat whose alpha lands within rounding of 1/255 at a pixel is blended on one backend
# only (the GPU takes the hardware exp), so at that step its gradient row and those of the
# splats behind it there differ by more than rounding, and from then on so do their moments
# and parameters, and the loss by more than its rounding. Such rows (`flipped_rows`) are
# allowed, counted, and left out of the comparisons that follow; every other row is held
# to rounding. Measured on the H100 (this test's two epochs, 120 Gaussians): before this
# rule, 7 runs of 401 failed, with a flip of 2-7 rows at one step, the whole gradient up to
# 8e-3 off while every other row stayed within 2.4e-5. Over 6766 runs of the rule as it
# grew (up to 17 rows at a step and 35 in a run; 59% of runs have one or more), every
# other row within 6.3e-5 (99th percentile 1.7e-5), the loss within 2.0e-6 before any
# flip and 3.8e-5 after (relative). Of the last 3899 runs one failed, at the final
# renders, which compared the two runs' states until they compared one; of the 1173
# after that, none.
FLIPPED_AT_A_STEP = 24
FLIPPED_IN_A_RUN = 48
LOSS_TOL, LOSS_TOL_FLIPPED = 1e-5, 1e-4


def test_every_view_size_and_mask_matches_cpu():
    """Two epochs over five sizes (landscape, portrait, off-tile sizes, off-centre
    principal points), masked and unmasked views and one masked entirely, on the CPU and
    the GPU from one state: each step's loss, gradients and state agree but for the rows
    a flip has touched."""
    rng, seed = make_rng()
    ds = with_blank_view(mixed_dataset(rng, random_gaussians(rng, 150)))
    cfg = no_densify(sh_degree=1, sh_degree_interval=1)
    cpu, gpu = trainers(ds, cfg, initial=random_gaussians(rng, 120))
    flipped = np.zeros(len(cpu.state()["means"]), bool)
    for t in range(2 * len(ds)):
        v = cpu._native.view_for_step(t + 1)
        a, b = cpu.step(), gpu.step()
        what = f"step {t + 1} view {v} {ds.cameras[v].width}x{ds.cameras[v].height}"
        if ds.names[v] == "blank":
            assert a.loss == 0.0 and b.loss == 0.0, seed
        sa, sb = cpu._native.debug_snapshot(), gpu._native.debug_snapshot()
        for name in PARAMS + ("means2d",):
            if ds.names[v] == "blank":
                assert not np.any(sb["grad." + name]), (name, seed)
                continue
            got, want = sb["grad." + name], sa["grad." + name]
            now = flipped_rows(got, want)
            assert now.sum() <= FLIPPED_AT_A_STEP, (what, name, int(now.sum()), seed)
            flipped |= now
            err = rel_err(got[~flipped], want[~flipped], TINY)
            assert err <= 1e-4, (what, name, err, seed)
        assert flipped.sum() <= FLIPPED_IN_A_RUN, (what, int(flipped.sum()), seed)
        if ds.names[v] != "blank":   # this step's flips included
            diff = abs(a.loss - b.loss) / abs(a.loss)
            assert diff <= (LOSS_TOL_FLIPPED if flipped.any() else LOSS_TOL), (what, a.loss, b.loss, seed)
        keep = ~flipped
        assert_states_close({k: x[keep] for k, x in cpu.state().items()},
                            {k: x[keep] for k, x in gpu.state().items()}, seed, what)
    # Renders of one state (the CPU's: the two runs' flipped rows differ).
    same = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cuda"), cpu.state(), step=2 * len(ds))
    for cam in ds.cameras:
        r_cpu, r_gpu = cpu.render(cam), same.render(cam)
        assert gpu.render(cam).shape == r_gpu.shape == (cam.height, cam.width, 3)
        assert np.mean(np.abs(r_gpu - r_cpu) > 1e-4) < 0.01, (cam.width, cam.height, seed)


def test_noise_under_the_masks_does_not_change_training():
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
    cfg = splat.TrainConfig(steps=120, sh_degree=1, sh_degree_interval=40, densify_from=20, densify_until=100,
                            densify_every=20, opacity_reset_every=60)
    states = []
    for d in (ds, noisy):
        tr = splat.Trainer.from_dataset(d, cfg, splat.BackendConfig(backend="cuda", deterministic=True))
        tr.run(cfg.steps, progress=False)
        states.append(tr.state())
    a, b = states
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), (k, seed)


def test_warm_steps_on_every_size_do_not_allocate():
    rng, seed = make_rng()
    ds = mixed_dataset(rng, random_gaussians(rng, 100), sizes=SIZES + [(64, 18), (18, 64)])
    tr = splat.Trainer.from_dataset(ds, no_densify(), splat.BackendConfig(backend="cuda"))
    for _ in range(2 * len(ds)):
        tr.step(read_loss=False)
    warm = tr._native.allocation_count
    for _ in range(2 * len(ds)):
        tr.step(read_loss=False)
    s = tr.step()
    assert tr._native.allocation_count == warm, seed
    assert np.isfinite(s.loss)
    ev = splat.evaluate(tr, ds, masked=True)
    assert len(ev.per_view) == len(ds) and np.isfinite(ev.psnr)


def test_streamed_images_train_as_resident_ones():
    """Images over the budget, streamed from page-locked host memory a view a
    step ahead: deterministic training gives the same bytes as resident images."""
    rng, seed = make_rng()
    ds = mixed_dataset(rng, random_gaussians(rng, 100))
    cfg = splat.TrainConfig(steps=80, sh_degree=1, sh_degree_interval=20, densify_from=10, densify_until=60,
                            densify_every=10, opacity_reset_every=40)
    states, grown = [], []
    for budget in (0, 1):
        tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cuda", deterministic=True),
                                        image_budget=budget)
        assert tr.image_storage["streamed"] == (budget == 1)
        for _ in range(cfg.steps):
            tr.step(read_loss=False)
        states.append(tr.state())
        # Streaming allocates nothing a step: over another pass the streamed trainer
        # allocates what the resident one does (the same Gaussians, so the same pair
        # buffers grow when a view's pairs outgrow them).
        warm = tr._native.allocation_count
        for _ in range(len(ds)):
            tr.step(read_loss=False)
        grown.append(tr._native.allocation_count - warm)
    assert grown[1] == grown[0], (grown, seed)
    for k in states[0]:
        assert states[0][k].tobytes() == states[1][k].tobytes(), (k, seed)
