"""What the compressed PLY costs: each field within its quantisation step, the SH rest
errors unbiased (the coefficients a run leaves at 0 round up and down alike), and a
trained scene's renders close to its plain PLY's."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat.formats import compressed_ply  # noqa: E402

HALF_STEP_SH = 0.5 * 8.0 / 256          # the SH rest bins are 8/256 wide over [-4, 4)
# the reader's grid (q * 8 / 255 - 4) drifts from the bin centres by 8/255 - 8/256 a code
# away from the middle code (0 at x = 0, 0.016 at x = +-4)
GRID_SLACK = 8.0 / 255 - 8.0 / 256


def psnr(a, b) -> float:
    return float(np.mean([-10.0 * np.log10(np.mean((np.asarray(x, np.float64) - y) ** 2)) for x, y in zip(a, b)]))


def round_trip(g):
    return compressed_ply.decode_compressed_ply(compressed_ply.encode_compressed_ply(g))


def test_sh_rest_errors_are_within_half_a_step_and_unbiased():
    rng = np.random.default_rng(7)
    n = 3000
    sh = np.zeros((n, 16, 3), np.float32)
    sh[:, 0] = rng.normal(0, 0.5, (n, 3))
    trained = rng.random(n) < 0.3                       # most Gaussians' rest never left 0
    sh[trained, 1:4] = rng.normal(0, 0.08, (trained.sum(), 3, 3))
    g = splat.Gaussians(rng.normal(0, 1, (n, 3)).astype(np.float32), np.full((n, 3), -3.0, np.float32),
                        rng.normal(size=(n, 4)).astype(np.float32), rng.normal(0, 2, n).astype(np.float32), sh)
    back = round_trip(g)
    order = compressed_ply.morton_order(g.means)
    want = g.sh[order, 1:].astype(np.float64)
    err = back.sh[:, 1:].astype(np.float64) - want
    assert np.all(np.abs(err) <= HALF_STEP_SH + (np.abs(want) * 32 + 1) * GRID_SLACK + 1e-6)
    zeros = want == 0.0
    assert zeros.mean() > 0.5
    # a bias of one sign adds up over every coefficient of every Gaussian in a pixel
    assert abs(err[zeros].mean()) < 0.1 * HALF_STEP_SH, err[zeros].mean()
    assert abs(err[zeros].mean(axis=0)).max() < 0.25 * HALF_STEP_SH       # each coefficient, each channel
    # deterministic: the same Gaussians give the same bytes
    assert compressed_ply.encode_compressed_ply(g) == compressed_ply.encode_compressed_ply(g)


@pytest.fixture(scope="module")
def trained():
    from splat.data import synthetic
    train, test = synthetic.make_scene()
    cfg = synthetic.default_train_config(300, image_size=80)
    cfg.sh_degree, cfg.sh_degree_interval = 3, 200   # degree 1 from step 200: degrees 2 and 3 stay 0
    tr = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
    tr.run(300)
    return tr.gaussians(), test


def test_rendered_loss_against_the_plain_ply(trained):
    from splat.render_path import SceneRenderer
    g, test = trained
    assert np.mean(g.sh[:, 1:] == 0) > 0.5            # degrees the run had not reached: rest at 0
    bc = splat.BackendConfig(backend="cpu")
    renders = lambda gg: [SceneRenderer(gg, bc).render(c) for c in test.cameras]   # noqa: E731
    ref = renders(g)
    gt = [im.astype(np.float64) / 255.0 for im in test.images]
    back = renders(round_trip(g))
    # Measured on this scene: 50.6 dB against the plain PLY's renders (46.9 dB while every
    # coefficient at 0 rounded up); against the ground truth within 0.05 dB of the plain PLY.
    assert psnr(back, ref) > 49.0
    assert psnr(ref, gt) - psnr(back, gt) < 0.1
