"""The opacity-reset rule (never in the last opacity_reset_every steps), its
Python mirror that `splat check` warns with, and the learning-rate warnings."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _scenes import make_rng, write_blender_scene  # noqa: E402

from splat.config import TrainConfig  # noqa: E402
from splat.schedule import opacity_reset_steps, resets_opacity_at, schedule_warnings, skipped_resets  # noqa: E402

native = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")


def test_default_recipe_resets_as_the_reference():
    # The 3DGS reference: every 3000 steps while iteration < densify_until (15000).
    assert opacity_reset_steps(TrainConfig()) == [3000, 6000, 9000, 12000]
    assert skipped_resets(TrainConfig()) == []
    assert schedule_warnings(TrainConfig()) == []


def test_readme_3000_step_run_does_not_end_on_a_reset():
    cfg = TrainConfig(steps=3000)
    assert opacity_reset_steps(cfg) == []
    assert skipped_resets(cfg) == [3000]
    (w,) = schedule_warnings(cfg)
    assert w.startswith("train.opacity_reset_every:") and "3000" in w
    # 7000 steps: the reset at 6000 would leave 1000 steps to recover.
    assert opacity_reset_steps(TrainConfig(steps=7000)) == [3000]


def test_learning_rate_warnings():
    ws = schedule_warnings(TrainConfig(steps=30000, opacity_lr=50.0, means_lr=2.0))
    assert len(ws) == 2
    assert any(w.startswith("train.opacity_lr: 50") for w in ws)
    assert any(w.startswith("train.means_lr: 2") for w in ws)


def _scene(size=32, views=8):
    from splat.data import synthetic
    return synthetic.make_scene(n_gaussians=150, n_views=views, width=size, height=size, seed=5, n_test_views=4)


@native
def test_native_schedule_matches_the_python_rule():
    rng, seed = make_rng()
    train, _ = _scene(size=16, views=2)
    for _ in range(40):
        steps = int(rng.integers(1, 400))
        until = int(rng.integers(0, 500))
        cfg = TrainConfig(steps=steps, densify_from=min(500, until), densify_until=until,
                          opacity_reset_every=int(rng.integers(1, 200)), init_points=50)
        t = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
        got = [s for s in range(1, steps + 200) if t.resets_opacity_at(s)]
        want = [s for s in range(1, steps + 200) if resets_opacity_at(cfg, s)]
        assert got == want == opacity_reset_steps(cfg), (cfg, seed)


@native
def test_a_run_that_would_end_on_a_reset_ends_trained():
    """steps a multiple of opacity_reset_every below densify_until (the README's
    TrainConfig(steps=3000) shape, scaled down): the last reset is skipped, the
    steps report it, and the final PSNR is that of a trained model, well above
    the same model with its opacities reset."""
    from splat.metrics import evaluate
    train, test = _scene()
    cfg = TrainConfig(steps=240, opacity_reset_every=80, densify_from=20, densify_every=20, densify_until=400,
                      densify_grad_threshold=0.002, sh_degree=1, sh_degree_interval=60, init_points=400,
                      init_extent=1.0)
    assert opacity_reset_steps(cfg) == [80, 160] and skipped_resets(cfg) == [240]
    t = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
    resets = [s.step for s in (t.step(read_loss=False) for _ in range(cfg.steps)) if s.opacity_reset]
    assert resets == [80, 160]
    final = evaluate(t, test).psnr
    # The model a reset at the last step would have left.
    state = t.state()
    cap = np.float32(np.log(cfg.opacity_reset_value / (1 - cfg.opacity_reset_value)))
    state["opacity_logits"] = np.minimum(state["opacity_logits"], cap)
    reset = splat.Trainer(train, cfg, splat.BackendConfig(backend="cpu"), state, step=cfg.steps)
    reset_psnr = evaluate(reset, test).psnr
    assert final > reset_psnr + 3.0, (final, reset_psnr)


@native
def test_check_warns_about_a_schedule_ending_near_a_reset(tmp_path, capsys):
    from splat import cli
    write_blender_scene(tmp_path / "scene", 16, n_test_views=2)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[data]\npath = {json.dumps(str(tmp_path / "scene"))}\n[train]\nsteps = 3000\n'
                   '[backend]\nbackend = "cpu"\n')
    assert cli.main(["check", "--config", str(cfg)]) == 0
    err = capsys.readouterr().err
    assert "splat: warning: train.opacity_reset_every: the opacity reset at step 3000 is skipped" in err
