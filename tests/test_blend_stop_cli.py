"""[train] blend_stop = "chunk" end to end: a short CPU run on lists several chunks
deep whose stored key reaches `splat eval` of its checkpoint and run folder (the
trainer's and the scene renderer's images are the chunked rasterizer's), while a
PLY away from its run folder renders with the 3DGS stop."""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _scenes import write_blender_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat import cli  # noqa: E402
    from splat.render_path import open_model, run_blend_stop  # noqa: E402

# 40000 faint points over 32x32 views: tile lists thousands deep.
TOML = """\
[data]
path = "../scene"

[train]
steps = 10
sh_degree = 1
densify_from = 1000
densify_until = 1000
init_points = 40000
init_extent = 1.0
init_opacity = 0.05
blend_stop = "chunk"

[backend]
backend = "cpu"

[output]
dir = {out}
eval_steps = [10]
checkpoint_steps = [10]
render_views = 1
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("stop")
    write_blender_scene(root / "scene", 32, n_test_views=2)
    (root / "configs").mkdir()
    cfg = root / "configs" / "chunk.toml"
    cfg.write_text(TOML.format(out=json.dumps(str(root / "run"))))
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 0
    return root


def test_the_runs_key_reaches_eval_and_its_renderers(run, tmp_path, capsys):
    m = json.loads((run / "run" / "metrics.json").read_text())
    results = {}
    for name, argv in (("checkpoint", ["--checkpoint", run / "run" / "checkpoint.npz"]), ("folder", [run / "run"])):
        out = tmp_path / f"{name}.json"
        assert cli.main(["eval", *map(str, argv), "--data", str(run / "scene"), "--json", str(out)]) == 0
        results[name] = json.loads(out.read_text())
    assert "with the chunked stop" in capsys.readouterr().out
    for r in results.values():
        assert r["blend_stop"] == "chunk" and r["psnr"] == pytest.approx(m["psnr"], abs=1e-9)

    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(run / "run" / "point_cloud.ply", lone / "scene.ply")
    cam = splat.load_dataset(run / "scene", split="test").cameras[0]
    images = {}
    for name, source in (("checkpoint", run / "run" / "checkpoint.npz"), ("folder", run / "run"),
                         ("lone", lone / "scene.ply")):
        model = open_model(source, splat.BackendConfig(backend="cpu"))
        assert model.blend_stop == ("splat" if name == "lone" else "chunk"), name
        images[name] = model.renderer.render(cam)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    g = open_model(run / "run", splat.BackendConfig(backend="cpu")).gaussians
    chunked = r.forward(g, cam, g.sh_degree, (1.0, 1.0, 1.0), blend_stop="chunk").image
    plain = r.forward(g, cam, g.sh_degree, (1.0, 1.0, 1.0)).image
    assert np.abs(chunked - plain).max() > 0, "the scene's lists should reach past a chunk"
    np.testing.assert_array_equal(images["folder"], chunked)
    np.testing.assert_array_equal(images["lone"], plain)
    np.testing.assert_allclose(images["checkpoint"], chunked, atol=1e-6)


def test_a_bad_stored_key_is_named(run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(run / "run", bad)
    (bad / "config.toml").write_text('[train]\nblend_stop = "pixel"\n')
    with pytest.raises(ValueError, match="train.blend_stop"):
        open_model(bad, splat.BackendConfig(backend="cpu"))


def test_a_run_config_from_before_the_key_reads_as_the_3dgs_rule(run, tmp_path):
    """A config.toml written before [train] blend_stop existed: the rule such runs trained
    with ("splat", as a resume reads it), not today's default ("chunk")."""
    old = tmp_path / "old"
    old.mkdir()
    text = (run / "run" / "config.toml").read_text()
    (old / "config.toml").write_text("\n".join(line for line in text.splitlines()
                                               if not line.startswith("blend_stop")))
    assert run_blend_stop(run / "run") == "chunk" and splat.TrainConfig().blend_stop == "chunk"
    assert run_blend_stop(old) == "splat"
