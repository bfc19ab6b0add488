"""TOML run configuration: defaults, loading, validation with every error at once."""
from __future__ import annotations

import dataclasses
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402

from splat.config import (Config, ConfigError, DataConfig, OutputConfig, TrainConfig,  # noqa: E402
                          check_config, load_config)

rng = np.random.default_rng()

RECIPE = dict(
    steps=30000, means_lr=1.6e-4, means_lr_final=1.6e-6, log_scales_lr=5e-3, quats_lr=1e-3,
    opacity_lr=5e-2, sh_dc_lr=2.5e-3, sh_rest_lr=2.5e-3 / 20,
    lr_final_fraction=1.0,                         # the 3DGS rates hold to the end
    opacity_reg=0.0, scale_reg=0.0, reg_from=0,    # no regularisers in the 3DGS loss
    adam_eps=1e-15, adam_beta1=0.9,
    adam_beta2=0.999, sh_degree=3, sh_degree_interval=1000, densify_from=500, densify_until=15000,
    cap_scale_growth=0.0,                          # 3DGS bounds no scale
    prune_low_weight=0.0,                          # 3DGS prunes by opacity and size only
    densify_every=100, densify_grad_threshold=2e-4, percent_dense=0.01, split_count=2,
    split_scale_divisor=1.6, prune_opacity=0.005, prune_max_screen_radius=0.0, prune_max_world_scale=0.1,
    prune_screen="auto", prune_screen_fraction=0.15,  # gsplat's prune_scale2d while densifying (README)
    prune_near=0.0,                                # no size pruning without resets
    opacity_reset="auto", opacity_reset_every=3000, opacity_reset_value=0.01, init_points=100000, init_extent=1.3,
    init_opacity=0.1, ssim_weight=0.2, seed=0, random_background=False,
    antialiased=False,
    # off by default: the recipe is unchanged
    absgrad=False, absgrad_grad_threshold=8e-4, exposure=False, exposure_lr=1e-2, exposure_lr_final=1e-3,
    visible_adam=False, adam_moments="bfloat16",
    blend_stop="chunk",                            # the 3DGS stop within each 256-entry chunk
    num_downscales=0, resolution_schedule=3000,   # full size throughout (nerfstudio's names)
    batch_views=1,                                 # one view a step
)
# The strategy and the Gaussian budget (gsplat's MCMC defaults for the mcmc_* keys).
RECIPE.update(preset="default", strategy="default", max_gaussians=2 ** 24, mcmc_refine_from=500, mcmc_refine_until=25000,
              mcmc_refine_every=100, mcmc_growth=0.05, mcmc_min_opacity=0.005, mcmc_noise_lr=5e5,
              mcmc_opacity_reg=0.01, mcmc_scale_reg=0.01, mcmc_init_opacity=0.5, mcmc_init_scale=0.1)


def make_scene(root, splits=("train", "test")):
    """Just enough of a Blender folder for path checks."""
    root.mkdir(parents=True, exist_ok=True)
    for s in splits:
        (root / f"transforms_{s}.json").write_text(json.dumps({"camera_angle_x": 0.7, "frames": []}))
    return root


def test_train_defaults_are_the_3dgs_recipe():
    t = TrainConfig()
    assert {f.name for f in dataclasses.fields(t)} == set(RECIPE)
    for k, v in RECIPE.items():
        assert getattr(t, k) == pytest.approx(v), k
        assert type(getattr(t, k)) is type(v) or (isinstance(v, int) and isinstance(getattr(t, k), float)), k


def test_keyword_construction():
    lr = float(rng.uniform(1e-5, 1e-3))
    t = TrainConfig(steps=1234, means_lr=lr, sh_degree=1, quats_lr=2)   # int accepted for a float
    assert t.steps == 1234 and t.means_lr == lr and t.sh_degree == 1 and t.quats_lr == 2.0
    assert isinstance(t.quats_lr, float)
    assert TrainConfig(steps=10) == TrainConfig(steps=10) != TrainConfig(steps=11)
    assert dataclasses.replace(t, steps=5).steps == 5
    with pytest.raises(ValueError, match=r"train\.stepz.*unknown key.*'steps'"):
        TrainConfig(stepz=10)
    with pytest.raises(ValueError, match=r"train\.steps"):
        TrainConfig(steps=1.5)
    with pytest.raises(ValueError, match=r"train\.random_background"):
        TrainConfig(random_background=1)
    with pytest.raises(ValueError) as e:
        TrainConfig(means_lr=-1.0, densify_from=20000, bogus=1)
    assert isinstance(e.value, ConfigError)
    joined = "\n".join(e.value.errors)
    assert "train.means_lr" in joined and "train.densify_from" in joined and "train.bogus" in joined
    with pytest.raises(ValueError, match=r"data\.downscale"):
        DataConfig(downscale=0)
    with pytest.raises(ValueError, match=r"output\.eval_steps"):
        OutputConfig(eval_steps=[100, -1])
    assert OutputConfig(eval_steps=[300, 100, 300]).eval_steps == [100, 300]
    assert DataConfig(background=[0, 0.5, 1]).background == (0.0, 0.5, 1.0)


def test_good_config_loads(tmp_path):
    make_scene(tmp_path / "scenes" / "lego")
    steps = int(rng.integers(100, 50000))
    bg = [float(x) for x in rng.uniform(0.01, 1, 3)]
    cfg_dir = tmp_path / "configs"
    cfg_dir.mkdir()
    text = f"""
# a comment
[data]
path = "../scenes/lego"
downscale = 2
background = [{bg[0]!r}, {bg[1]!r}, {bg[2]!r}]
test_frames = "0::2"

[train]
steps = {steps}
means_lr = 3.2e-4
sh_degree = 2
random_background = true

[output]
dir = "runs/x"
eval_steps = [7000, {steps}]
checkpoint_steps = [1000]
save_ply = false
"""
    (cfg_dir / "run.toml").write_text(text)
    assert check_config(cfg_dir / "run.toml") == []
    cfg = load_config(cfg_dir / "run.toml")
    assert isinstance(cfg, Config)
    assert cfg.data.path == str(tmp_path / "scenes" / "lego")
    assert os.path.isabs(cfg.data.path)
    assert cfg.data.downscale == 2 and cfg.data.background == tuple(bg) and cfg.data.test_frames == "0::2"
    assert cfg.train.steps == steps and cfg.train.means_lr == 3.2e-4 and cfg.train.sh_degree == 2
    assert cfg.train.random_background is True
    assert cfg.train.opacity_lr == 5e-2          # untouched keys keep their defaults
    assert cfg.output.dir == "runs/x" and cfg.output.save_ply is False
    assert cfg.output.eval_steps == sorted({7000, steps}) and cfg.output.checkpoint_steps == [1000]
    assert cfg.backend == {}
    d = cfg.to_dict()
    assert set(d) == {"data", "train", "backend", "output"}
    assert d["train"]["steps"] == steps and d["data"]["background"] == bg
    # to_toml round trip
    (tmp_path / "again.toml").write_text(cfg.to_toml())
    again = load_config(tmp_path / "again.toml")
    assert again.to_dict() == d
    assert Config.from_dict(d) .to_dict() == d


def test_bad_config_reports_every_error(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("""
[data]
path = "does/not/exist"
downscale = 0
test_frames = "x:y"

[train]
steps = -5
means_lr = -1.0
sh_degree = 4
densify_from = 20000
densify_until = 1000
ssim_weight = "high"
unknown_knob = 3

[output]
eval_steps = [0]
render_views = -1

[extra]
a = 1
""")
    errors = check_config(cfg)
    keys = [e.split(":")[0] for e in errors]
    for want in ["data.path", "data.downscale", "data.test_frames", "train.steps", "train.means_lr",
                 "train.sh_degree", "train.densify_from", "train.ssim_weight", "train.unknown_knob",
                 "output.eval_steps", "output.render_views", "extra"]:
        assert want in keys, (want, errors)
    assert len(errors) == 12, errors
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert e.value.errors == errors
    assert "bad.toml" in str(e.value) and str(e.value).startswith("[splat] ")


def test_missing_path_and_transforms(tmp_path):
    assert check_config({}) == ["data.path: missing (the scene folder to train on)"]
    scene = make_scene(tmp_path / "s", splits=("train",))
    errs = check_config({"data": {"path": str(scene)}})
    assert len(errs) == 1 and errs[0].startswith("data.eval_split") and "transforms_test.json" in errs[0]
    assert check_config({"data": {"path": str(scene), "eval_split": "train"}}) == []
    # lego_800-style: train on one folder, evaluate on another
    ev = make_scene(tmp_path / "ev", splits=("test",))
    assert check_config({"data": {"path": str(scene), "eval_path": str(ev), "test_frames": "0::2",
                                  "eval_supersample": 2}}) == []
    errs = check_config({"data": {"path": str(scene), "eval_path": str(tmp_path / "nope")}})
    assert [e.split(":")[0] for e in errs] == ["data.eval_path"]
    errs = check_config({"data": {"path": str(tmp_path / "empty_dir_missing"), "format": "colmap"}})
    assert errs and errs[0].startswith("data.path")
    (tmp_path / "plain").mkdir()
    errs = check_config({"data": {"path": str(tmp_path / "plain")}})
    assert errs and errs[0].startswith("data.path") and "sparse" in errs[0]
    # load_config can skip the path checks
    (tmp_path / "c.toml").write_text('[data]\npath = "elsewhere"\n')
    assert load_config(tmp_path / "c.toml", check_paths=False).data.path == str(tmp_path / "elsewhere")


def test_invalid_toml_and_missing_file(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("[train\nsteps = 3\n")
    errs = check_config(p)
    assert len(errs) == 1 and "broken.toml" in errs[0] and "TOML" in errs[0]
    with pytest.raises(ConfigError, match="broken.toml"):
        load_config(p)
    with pytest.raises(ConfigError, match="nothere.toml"):
        load_config(tmp_path / "nothere.toml")
    assert check_config({"train": 3, "data": {"path": str(make_scene(tmp_path / "s"))}}) == \
        ["train: expected a table, got int"]


def test_backend_table_validated_through_backend_config(tmp_path, monkeypatch):
    scene = str(make_scene(tmp_path / "s"))

    class FakeBackendConfig:
        FIELDS = {"backend": ("auto", "cpu", "cuda", "metal"), "pipelining": ("off", "on")}

        def __init__(self, mapping=None, **kw):
            for k, v in kw.items():
                if k not in self.FIELDS:
                    raise ValueError(f"[BackendConfig] unknown field '{k}'")
                if v not in self.FIELDS[k]:
                    raise ValueError(f"[BackendConfig] {k}: unknown value '{v}'")

    monkeypatch.setattr(splat, "BackendConfig", FakeBackendConfig, raising=False)
    errs = check_config({"data": {"path": scene}, "backend": {"backend": "vulkan", "pipelining": "on",
                                                              "nonsense": "x"}})
    assert errs == ["backend.backend: unknown value 'vulkan'", "backend.nonsense: unknown field 'nonsense'"]
    assert check_config({"data": {"path": scene}, "backend": {"backend": "cpu"}}) == []


def test_backend_skipped_or_real(tmp_path):
    scene = str(make_scene(tmp_path / "s"))
    errs = check_config({"data": {"path": scene}, "backend": {"backend": "no-such-backend"}})
    if NATIVE and hasattr(splat, "BackendConfig"):
        assert len(errs) == 1 and errs[0].startswith("backend.backend: ")
        cfg = Config.from_dict({"data": {"path": scene}, "backend": {"backend": "cpu"}})
        assert cfg.backend_config().backend == "cpu"
    else:
        assert errs == []     # native module absent: [backend] cannot be checked yet


def test_works_without_the_native_module(tmp_path):
    """config, data and io only need the pure-Python modules of the package."""
    import subprocess
    scene = make_scene(tmp_path / "s")
    code = f"""
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "splat._core":
            raise ImportError("blocked for the test")
sys.meta_path.insert(0, Block())
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from _pkg import splat, NATIVE
assert not NATIVE
from splat.config import check_config
import splat.data, splat.io
assert check_config({{"data": {{"path": {str(scene)!r}}}, "backend": {{"backend": "bogus"}}}}) == []
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
