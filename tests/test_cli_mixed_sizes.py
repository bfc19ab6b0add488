"""Every command on a capture of portrait and landscape images of their own
sizes, some with masks: train (with eval_masked), check, eval, render, bench."""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402,F401
from _cli import run_cli  # noqa: E402
import _captures as cap  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

rng = np.random.default_rng()
LANDSCAPE, PORTRAIT = (40, 24), (22, 38)   # no multiple of the 16-pixel tile
MASKED = (0, 2, 5, 6)
# test_every = 3: test views 0 (landscape, masked), 3 (portrait), 6 (landscape, masked), 9 (portrait);
# train views 1, 2, 4, 5, 7, 8: three of each orientation


def make_mixed_capture(root, n=10):
    """Alternating landscape / portrait cameras; the masks (masks/<name>.png,
    white = counts) of images MASKED leave out their left third, the others'
    are white (the loader reads them as no mask)."""
    cams = {1: ("PINHOLE", *LANDSCAPE, [30.0, 30.0, LANDSCAPE[0] / 2, LANDSCAPE[1] / 2]),
            2: ("PINHOLE", *PORTRAIT, [29.0, 31.0, PORTRAIT[0] / 2 + 1.0, PORTRAIT[1] / 2 - 1.0])}
    images, sizes = [], {}
    for k in range(n):
        cid = 1 + k % 2
        w, h = cams[cid][1:3]
        name = f"{k:04d}.png"
        cap.save_image(root / "images" / name, rng.integers(30, 220, (h, w, 3), dtype=np.uint8))
        m = np.full((h, w), 255, np.uint8)
        if k in MASKED:
            m[:, : w // 3] = 0
        cap.save_image(root / "masks" / f"{name}.png", m)
        images.append((name, cid, cap.random_w2c(rng)))
        sizes[name] = (w, h)
    cap.write_colmap_text(root, cams, images, rng.normal(size=(300, 3)) * 0.5)
    return sizes


CONFIG = """\
[data]
path = {path}
eval_masked = true
test_every = 3

[train]
steps = 12
sh_degree = 0
densify_from = 4
densify_until = 8
densify_every = 4
init_points = 200

[backend]
backend = "cpu"

[output]
dir = {out}
eval_steps = [12]
render_views = 4
"""


def test_every_command_on_mixed_sizes_and_masks(tmp_path, capsys):
    scene = tmp_path / "mixed"
    sizes = make_mixed_capture(scene)
    out = tmp_path / "run"
    cfg = tmp_path / "mixed.toml"
    cfg.write_text(CONFIG.format(path=json.dumps(str(scene)), out=json.dumps(str(out))))

    rc, stdout, err = run_cli(capsys, "check", "--config", cfg)
    assert rc == 0, err
    assert "# images: 6 train views mixed sizes" in stdout and "on the device" in stdout, (stdout[-300:], err)

    rc, stdout, err = run_cli(capsys, "train", "--config", cfg, "--quiet")
    assert rc == 0, err
    assert "mixed sizes" in stdout and "images" in stdout and "on the device" in stdout, stdout
    metrics = json.loads((out / "metrics.json").read_text())
    views = {v["name"]: v for v in metrics["per_view"]}
    assert sorted(views) == ["0000.png", "0003.png", "0006.png", "0009.png"]
    # eval_masked: the masked test views (0000) report the share of pixels that counted
    assert views["0000.png"]["valid_fraction"] == pytest.approx(1 - (LANDSCAPE[0] // 3) / LANDSCAPE[0])
    assert "valid_fraction" not in views["0003.png"] and "valid_fraction" not in views["0009.png"]
    for name in views:
        w, h = sizes[name]
        im = Image.open(out / "renders" / "step_12" / name)
        assert im.size[1] == h and im.size[0] >= 2 * w       # render beside the ground truth
    ckpt = out / "checkpoint.npz"
    meta = splat.trainer.read_checkpoint(ckpt)[0]
    assert sorted(map(tuple, meta["sizes"])) == sorted([LANDSCAPE] * 3 + [PORTRAIT] * 3)

    results = tmp_path / "eval.json"
    rc, stdout, err = run_cli(capsys, "eval", "--checkpoint", ckpt, "--data", scene, "--json", results,
                          "--backend", "cpu")
    assert rc == 0, err
    plain = json.loads(results.read_text())
    rc, stdout, err = run_cli(capsys, "eval", "--checkpoint", ckpt, "--data", scene, "--json", results,
                          "--backend", "cpu", "--masked")
    assert rc == 0, err
    masked = json.loads(results.read_text())
    assert masked["masked"] and not plain["masked"]
    # splat eval of the run's checkpoint holds out the views the run did (its test_every)
    pv = {v["name"]: v for v in plain["per_view"]}
    mv = {v["name"]: v for v in masked["per_view"]}
    assert sorted(mv) == sorted(views)
    for name in views:   # masked as in training (eval_masked)
        assert mv[name]["psnr"] == pytest.approx(views[name]["psnr"], rel=1e-6), name
    assert mv["0003.png"]["psnr"] == pytest.approx(pv["0003.png"]["psnr"])   # no mask: the same
    assert mv["0000.png"]["psnr"] != pv["0000.png"]["psnr"]
    # a checkpoint outside its run folder has no config: the loader's default split (every 8th image)
    alone = tmp_path / "alone.npz"
    shutil.copyfile(ckpt, alone)
    rc, stdout, err = run_cli(capsys, "eval", alone, "--data", scene, "--json", results, "--backend", "cpu")
    assert rc == 0, err
    assert sorted(v["name"] for v in json.loads(results.read_text())["per_view"]) == ["0000.png", "0008.png"]

    renders = tmp_path / "renders"
    rc, stdout, err = run_cli(capsys, "render", "--checkpoint", ckpt, "--data", scene, "--split", "all",
                          "--out", renders, "--backend", "cpu")
    assert rc == 0, err
    files = sorted(renders.iterdir())
    assert len(files) == 10                              # every image, landscape and portrait
    for f in files:
        assert Image.open(f).size == sizes[f.name], f.name

    bench_out = tmp_path / "bench"
    rc, stdout, err = run_cli(capsys, "bench", "--config", cfg, "--checkpoint", ckpt, "--iters", 3, "--repeats", 1,
                          "--warmup", 1, "--out", bench_out)
    assert rc == 0, err
    res = json.loads(next(bench_out.glob("*.json")).read_text())
    assert res["image_size"] == list(LANDSCAPE) and res["image_sizes"] == 2 and res["views"] == 6
