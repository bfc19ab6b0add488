"""Several views a step on the SIMT emulator (tools/simt_emu, tests/_simt.py):
the kernels of views rasterized together, and the per-view path's gradient
sum, against the launches they replace or the views' float32 mean, to the bit
(docs/architecture.md, "Several views a step")."""
import os

import pytest

from _scenes import make_rng
from _simt import ROOT, compile_check, run_check, simt_source

ACCUMULATE_SOURCE = simt_source("accumulate_check.cpp")
PROJECT_VIEWS_SOURCES = [simt_source("project_views_check.cpp"), os.path.join(ROOT, "cpp", "core", "camera_params.cpp")]
LOSS_VIEWS_SOURCE = simt_source("loss_views_check.cpp")


@pytest.mark.parametrize("views", [2, 3, 5])
def test_gradient_accumulation_is_the_views_mean(compiler, tmp_path, views):
    """grad_accumulate_body (several views a step) against the views' float32 sum in
    view order divided by their number, to the bit (the loss likewise), with one view
    overflowing its pair buffers (it adds nothing) and the batch run again from it."""
    exe = compile_check(compiler, [ACCUMULATE_SOURCE], str(tmp_path / "accumulate_check"))
    rng, seed = make_rng()
    for count in (1, int(rng.integers(300, 3000))):
        got = {k: int(v) for k, v in run_check(exe, int(rng.integers(0, 2 ** 31)), count, views).items()}
        assert got["differ"] == got["sum_touched"] == got["loss_differ"] == 0 and got["count"] == count, (got, seed)


@pytest.mark.parametrize("views,group", [(2, 8), (3, 8), (8, 8), (11, 8), (5, 2)])
def test_projection_of_views_together_is_each_views_launches(compiler, tmp_path, views, group):
    """Views rasterized together, their per-Gaussian kernels in launches of up to
    GROUP views, to the bit: the projection (a thread a view and Gaussian) against
    a launch a view at its records' offset (records, covers, radii, pair counts,
    depth keys and ids); the projection backward (a thread a Gaussian walking the
    views, the gradient sums in registers, carried between launches) against a
    projection backward, four grad_accumulate launches and (views that track them)
    grad_stats a view (the means, every view's SH factors, the last 2D gradient and
    the densification statistics), also after a forward that overflowed (both
    leave the sums and statistics alone) and its batch again."""
    exe = compile_check(compiler, PROJECT_VIEWS_SOURCES, str(tmp_path / "project_views_check"))
    rng, seed = make_rng()
    for count in (1, int(rng.integers(300, 1200))):
        got = {k: int(v) for k, v in run_check(exe, int(rng.integers(0, 2 ** 31)), count, views, group).items()}
        assert got["forward_differ"] == got["differ"] == got["skip_differ"] == 0, (got, seed)
        assert got["visible"] > count * views // 2 or count == 1, (got, seed)
        # Most gradients are live (a fifth of the Gaussians unseen in each view).
        assert got["nonzero"] > got["values"] // 2 or count == 1, (got, seed)


@pytest.mark.parametrize("views,group", [(2, 2), (5, 2), (8, 8), (3, 1)])
def test_loss_of_views_together_is_each_views_launch(compiler, tmp_path, views, group):
    """The loss of views rasterized together, a launch pair for up to GROUP views
    (threadgroup 0 reducing their losses in view order), against a launch pair a
    view, to the bit: d_image of every view and the four loss values, with targets
    and masks at scattered offsets of one buffer, some views masked, one maybe
    entirely, and partial edge tiles."""
    exe = compile_check(compiler, [LOSS_VIEWS_SOURCE], str(tmp_path / "loss_views_check"))
    rng, seed = make_rng()
    width, height = int(rng.integers(20, 60)), int(rng.integers(20, 60))
    got = {k: int(v) for k, v in run_check(exe, int(rng.integers(0, 2 ** 31)), width, height, views, group).items()}
    assert got["differ"] == got["loss_differ"] == 0, (got, seed)
    assert got["values"] == 3 * width * height * views and got["nonzero"] > got["values"] // 4, (got, seed)
