"""What `splat check` says about a recipe's modes: the strategy, the budget,
antialiasing, absgrad and exposure in words with the config's own values, the
combination that cannot run (absgrad with mcmc) as an error, and the keys a
mode leaves unused as warnings."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import splat  # noqa: E402
from _cli import run_cli  # noqa: E402
from splat.config import TrainConfig  # noqa: E402
from splat.data import synthetic  # noqa: E402
from splat.recipe import describe, mode_warnings  # noqa: E402

rng = np.random.default_rng()


def check(tmp_path, capsys, train_toml: str):
    train, test = synthetic.make_scene(n_views=2, width=16, height=16, n_test_views=1)
    synthetic.write_blender(tmp_path / "scene", {"train": train, "test": test})
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\npath = "scene"\n[train]\n' + train_toml + '[backend]\nbackend = "cpu"\n')
    return run_cli(capsys, "check", "--config", cfg)


def test_mcmc_with_absgrad_is_an_error(tmp_path, capsys):
    with pytest.raises(splat.ConfigError, match="train.absgrad: the mcmc strategy"):
        TrainConfig(strategy="mcmc", absgrad=True)
    assert any(e.startswith("train.absgrad:") for e in _assign(TrainConfig(strategy="mcmc"), absgrad=True).errors())
    assert not TrainConfig(strategy="mcmc").errors() and not TrainConfig(absgrad=True).errors()
    rc, out, err = check(tmp_path, capsys, 'strategy = "mcmc"\nabsgrad = true\n')
    assert rc == 1 and out == "" and "Traceback" not in err
    assert "splat: error: train.absgrad: the mcmc strategy" in err
    with pytest.raises(splat.ConfigError, match="train.absgrad"):
        splat.Trainer(synthetic.make_scene(n_views=2, width=16, height=16)[0],
                      _assign(TrainConfig(strategy="mcmc"), absgrad=True), splat.BackendConfig(backend="cpu"),
                      dict(means=np.zeros((1, 3), np.float32) + rng.normal(size=3).astype(np.float32),
                           log_scales=np.full((1, 3), -3.0, np.float32), quats=np.array([[1.0, 0, 0, 0]], np.float32),
                           opacity_logits=np.zeros(1, np.float32), sh=np.zeros((1, 16, 3), np.float32)))


def _assign(cfg, **kw):
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def test_check_describes_mcmc_with_its_values(tmp_path, capsys):
    every, budget = int(rng.integers(10, 500)), int(rng.integers(1000, 10**6))
    growth = float(rng.choice([0.02, 0.05, 0.1]))
    rc, out, err = check(tmp_path, capsys, f'strategy = "mcmc"\nmcmc_refine_every = {every}\n'
                                           f'max_gaussians = {budget}\nmcmc_growth = {growth}\n'
                                           'densify_grad_threshold = 0.0005\nopacity_reset_every = 1000\n')
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("# strategy:"))
    assert "mcmc" in line and f"every {every} steps" in line and f"at most {budget:,} Gaussians" in line
    assert f"{growth:.0%} more" in line and "no opacity resets" in line
    for key in ("densify_grad_threshold", "opacity_reset_every"):
        assert f"splat: warning: train.{key}: unused with train.strategy = 'mcmc'" in err
    assert "# antialiased: off" in out


def test_check_describes_the_default_strategys_regularisers(tmp_path, capsys):
    w_o, w_s = float(np.round(rng.uniform(1e-3, 0.1), 4)), float(np.round(rng.uniform(1e-3, 0.1), 4))
    start = int(rng.integers(1, 20000))
    rc, out, err = check(tmp_path, capsys, f'opacity_reg = {w_o}\nscale_reg = {w_s}\nreg_from = {start}\n')
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("# strategy:"))
    assert f"opacity / scale regularisers {w_o:g} / {w_s:g} from step {start}" in line, line
    assert "warning" not in err, err
    assert "regularisers" not in describe(TrainConfig())[0]
    assert mode_warnings(TrainConfig(reg_from=start)) == [
        "train.reg_from: unused with train.opacity_reg and train.scale_reg at 0"]
    assert mode_warnings(TrainConfig(strategy="mcmc", opacity_reg=w_o)) == [
        "train.opacity_reg: unused with train.strategy = 'mcmc' (its mcmc_* keys apply instead)"]


def test_check_describes_default_absgrad_antialiased_exposure(tmp_path, capsys):
    thr = float(np.round(rng.uniform(1e-4, 2e-3), 5))
    lr = float(np.round(rng.uniform(1e-3, 5e-2), 4))
    rc, out, err = check(tmp_path, capsys, f'absgrad = true\nabsgrad_grad_threshold = {thr}\nantialiased = true\n'
                                           f'exposure = true\nexposure_lr = {lr}\nmcmc_growth = 0.2\n'
                                           'densify_grad_threshold = 0.0003\n')
    assert rc == 0, err
    lines = {ln.split(":")[0]: ln for ln in out.splitlines() if ln.startswith("# ")}
    assert "absgrad" in lines["# strategy"] and f"above {thr:g}" in lines["# strategy"]
    assert lines["# antialiased"].startswith("# antialiased: on")
    assert f"lr {lr:g}" in lines["# exposure"] and "--exposure" in lines["# exposure"]
    assert "splat: warning: train.mcmc_growth: unused with train.strategy = 'default'" in err
    assert "splat: warning: train.densify_grad_threshold: unused with train.absgrad = true" in err


def test_default_recipe_has_no_mode_warnings():
    t = TrainConfig()
    assert mode_warnings(t) == []
    text = describe(t)
    assert text[0].startswith("strategy: default") and f"above {t.densify_grad_threshold:g}" in text[0]
    assert not any(ln.startswith("exposure") for ln in text)
    t.exposure_lr = 0.5
    t.absgrad_grad_threshold = 0.01
    assert sorted(w.split(":")[0] for w in mode_warnings(t)) == ["train.absgrad_grad_threshold", "train.exposure_lr"]
