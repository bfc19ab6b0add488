"""`splat train PATH` on a capture without a config, `--set` and `--data`
overrides, render file names."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402,F401
from _cli import run_cli  # noqa: E402
import _captures as cap  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat import cli  # noqa: E402

rng = np.random.default_rng()
FAST = ["--set", "train.steps=12", "--set", "output.eval_steps=[12]", "--set", "train.densify_from=4",
        "--set", "train.densify_until=8", "--set", "train.densify_every=4", "--set", "train.init_points=200",
        "--set", "output.render_views=2", "--set", "train.sh_degree=0", "--backend", "cpu", "--quiet"]


def make_capture(root, n=9, w=32, h=24, ext="jpg"):
    cams = {1: ("PINHOLE", w, h, [28.0, 28.0, w / 2, h / 2])}
    images = []
    for k in range(n):
        name = f"{k:04d}.{ext}"
        img = rng.integers(30, 220, (h, w, 3), dtype=np.uint8)
        cap.save_image(root / "images" / name, img)
        images.append((name, 1, cap.random_w2c(rng)))
    cap.write_colmap_text(root, cams, images, rng.normal(size=(300, 3)) * 0.5)
    return root


def test_train_a_capture_folder_without_config(tmp_path, capsys, monkeypatch):
    scene = make_capture(tmp_path / "garden")
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, "train", scene, *FAST)
    assert rc == 0, err
    run_dir = tmp_path / "runs" / "garden"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 12 and metrics["finished"]
    assert metrics["scene"] == str(scene.resolve())
    # The cameras look at the origin: a capture of an object trains without opacity resets.
    assert metrics["camera_layout"] == "object" and metrics["opacity_resets"] is False
    # No resets: the screen-size pruning runs near the cameras only (prune_near), at 15%
    # of the largest view's larger side.
    sides = [max(s) for s in splat.load_dataset(scene, "train").sizes]
    assert metrics["screen_prune_px"] > 0 and metrics["screen_prune_px"] == pytest.approx(0.15 * max(sides))
    assert "note: no opacity resets: a capture whose cameras look at an object" in out
    renders = sorted(p.name for p in (run_dir / "renders" / "step_12").iterdir())
    assert renders == ["0000.png", "0008.png"]          # the test views, named like their images
    text = (run_dir / "config.toml").read_text()
    assert "steps = 12" in text and 'alpha = "composite"' in text


def test_set_and_data_override_a_config(tmp_path, capsys, monkeypatch):
    scene = make_capture(tmp_path / "a")
    other = make_capture(tmp_path / "b", n=10)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[data]\npath = "{scene}"\n[output]\ndir = "{tmp_path / "out"}"\n')
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, "train", "--config", cfg, "--data", other, *FAST,
                       "--set", "data.background=[0.5, 0.5, 0.5]", "--set", "train.opacity_reset=on")
    assert rc == 0, err
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["scene"] == str(other.resolve())
    assert metrics["opacity_resets"] is True and "no opacity resets" not in out   # train.opacity_reset=on
    text = (tmp_path / "out" / "config.toml").read_text()
    assert "background = [0.5, 0.5, 0.5]" in text


@pytest.mark.parametrize("item, words", [
    ("train.stepz=5", ["train.stepz", "unknown key", "steps"]),
    ("train.steps=many", ["train.steps", "integer"]),
    ("data.alpha=blend", ["data.alpha", "composite"]),
    ("nosection=3", ["--set", "section.key=value"]),
    ("render.x=1", ["render", "unknown section"]),
])
def test_set_errors_name_the_key(tmp_path, capsys, item, words):
    scene = make_capture(tmp_path / "s", n=3)
    rc, out, err = run_cli(capsys, "train", scene, "--set", item, "--backend", "cpu")
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("splat: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_two_scene_folders_is_an_error(tmp_path, capsys):
    a, b = make_capture(tmp_path / "a", n=3), make_capture(tmp_path / "b", n=3)
    rc, _, err = run_cli(capsys, "train", a, "--data", b)
    assert rc == 1 and "two scene folders" in err


def test_render_file_names():
    files = cli.render_files(["0000.jpg", "0001.JPG", "sub/dir/x.png", "a.jpg", "a.png", "noext"])
    assert files["0000.jpg"] == "0000.png" and files["0001.JPG"] == "0001.png"
    assert files["sub/dir/x.png"] == "sub_dir_x.png"
    assert files["a.jpg"] != files["a.png"] and files["a.jpg"].endswith(".png")
    assert files["noext"] == "noext.png"
    assert len(set(files.values())) == len(files)
    ns = cli.render_files(["images/frame_00001.jpg", "images/frame_00002.jpg"])
    assert list(ns.values()) == ["frame_00001.png", "frame_00002.png"]


def test_a_scene_file_of_a_capture_evaluates_on_the_captures_background(tmp_path, capsys):
    """An exported file outside its run carries no background: eval and render take the
    dataset's default one (black for a capture), as the run itself did."""
    scene = make_capture(tmp_path / "thermos")
    run_dir = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", scene, *FAST, "--out", run_dir)
    assert rc == 0, err
    elsewhere = tmp_path / "shared"
    elsewhere.mkdir()
    got = tmp_path / "eval.json"
    for name in ("th.spz", "th.ply"):
        rc, _, err = run_cli(capsys, "export", run_dir, "--out", elsewhere / name)
        assert rc == 0, err
        psnr = {}
        for bg in (None, "0,0,0", "1,1,1"):
            rc, _, err = run_cli(capsys, "eval", elsewhere / name, "--data", scene, "--backend", "cpu", "--quiet",
                                 "--json", got, *(() if bg is None else ("--background", bg)))
            assert rc == 0, err
            e = json.loads(got.read_text())
            psnr[bg] = e["psnr"]
            if bg is None:
                assert e["background"] == [0.0, 0.0, 0.0], name
        assert psnr[None] == psnr["0,0,0"] != psnr["1,1,1"], (name, psnr)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert psnr[None] == pytest.approx(metrics["psnr"], abs=1e-4)      # the PLY: what the run reported
    # render with the dataset's views: the same background as eval
    out = tmp_path / "frames"
    rc, _, err = run_cli(capsys, "render", elsewhere / "th.ply", "--data", scene, "--path", "test",
                         "--frames", "0", "--out", out, "--backend", "cpu", "--quiet")
    assert rc == 0, err
    from PIL import Image
    from splat.render_path import SceneRenderer
    from splat.formats import load
    from splat.data import load_dataset
    test = load_dataset(scene, "test", frames="0")
    want = SceneRenderer(load(elsewhere / "th.ply"), splat.BackendConfig(backend="cpu"),
                         background=(0.0, 0.0, 0.0)).render(test.cameras[0])
    img = np.asarray(Image.open(next(out.glob("*.png"))))
    assert np.abs(img.astype(np.float64) - np.clip(np.rint(want * 255), 0, 255)).max() <= 1


def drop_from_checkpoint(path, key):
    """The checkpoint at `path` as a release before [train] `key` wrote it: without the key."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes().decode())
    del meta["train_config"][key]
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path, **arrays)


@pytest.mark.parametrize("written_before", [False, True], ids=["auto", "before-the-key"])
def test_resume_keeps_the_opacity_resets_a_run_was_written_with(tmp_path, capsys, written_before):
    """A run folder written before [train] opacity_reset existed (no key in its
    config.toml nor in its checkpoint) resumes with resets, as it was trained; a
    newer one keeps what "auto" chose."""
    scene = make_capture(tmp_path / "cap")
    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", scene, *FAST, "--out", out)
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["opacity_resets"] is False
    if written_before:
        text = (out / "config.toml").read_text()
        assert 'opacity_reset = "auto"' in text
        (out / "config.toml").write_text(text.replace('opacity_reset = "auto"\n', ""))
        assert "opacity_reset" not in tomllib.loads((out / "config.toml").read_text())["train"]
        drop_from_checkpoint(out / "checkpoint.npz", "opacity_reset")
    rc, _, err = run_cli(capsys, "train", "--resume", out, "--steps", 16, "--quiet")
    assert rc == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 16 and metrics["opacity_resets"] is written_before


def test_a_run_written_before_prune_near_resumes_without_it(tmp_path, capsys):
    """A run folder written before [train] prune_near existed (no key in its config.toml
    nor in its checkpoint) resumes with 0, as it was trained; a newer one keeps 0.3."""
    scene = make_capture(tmp_path / "cap")
    for written_before in (False, True):
        out = tmp_path / f"run{int(written_before)}"
        rc, _, err = run_cli(capsys, "train", scene, *FAST, "--out", out)
        assert rc == 0, err
        assert "prune_near = 0.3\n" in (out / "config.toml").read_text()
        if written_before:
            text = (out / "config.toml").read_text()
            (out / "config.toml").write_text(text.replace("prune_near = 0.3\n", ""))
            drop_from_checkpoint(out / "checkpoint.npz", "prune_near")
        rc, _, err = run_cli(capsys, "train", "--resume", out, "--steps", 16, "--quiet")
        assert rc == 0, err
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["steps"] == 16
        assert (metrics["screen_prune_px"] == 0) is written_before, written_before
        assert ("prune_near = 0.3\n" in (out / "config.toml").read_text()) is not written_before


def test_check_prints_the_train_section_splat_train_records(tmp_path, capsys):
    """`splat check` resolves a capture's recipe (its keys depend on the format and the
    camera layout) before printing: its [train] is the one splat train records."""
    scene = make_capture(tmp_path / "cap")
    rc, printed, err = run_cli(capsys, "check", scene, *(a for a in FAST if a != "--quiet"))
    assert rc == 0, err
    checked = tomllib.loads(printed.split("\n# backend:")[0])["train"]
    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", scene, *FAST, "--out", out)
    assert rc == 0, err
    recorded = tomllib.loads((out / "config.toml").read_text())["train"]
    assert checked == recorded
    # The capture's own keys are among them (an object: no resets, pruning near the cameras).
    assert checked["prune_near"] == 0.3 and checked["densify_grad_threshold"] == 6e-4


def test_check_states_the_steps_splat_train_evaluates_and_saves_at(tmp_path, capsys):
    """`splat check` says where the run evaluates and saves: eval and checkpoint steps past
    train.steps are dropped and the last step is always evaluated, as splat train does."""
    scene = make_capture(tmp_path / "cap")
    # After FAST's output.eval_steps=[12]: the later --set wins.
    milestones = ["--set", "output.eval_steps=[5, 30]", "--set", "output.checkpoint_steps=[6, 40]"]
    rc, printed, err = run_cli(capsys, "check", scene, *(a for a in FAST if a != "--quiet"), *milestones)
    assert rc == 0, err
    assert "# evaluates at steps 5, 12; checkpoints at 6" in printed.splitlines()
    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", scene, *FAST, *milestones, "--out", out)
    assert rc == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert [e["step"] for e in metrics["evals"]] == [5, 12]
    assert sorted(p.name for p in out.glob("checkpoint_*.npz")) == ["checkpoint_6.npz"]
