"""Fault runs of `splat train` (subprocesses on a tiny scene, CPU backend):
SIGTERM and SIGKILL at random points of training and of checkpoint writes,
after which every file of the run folder is complete or absent and
`--resume` ends with the same bytes as an uninterrupted run; the run-folder
lock; --overwrite; divergence."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _scenes import make_rng, write_blender_scene  # noqa: E402

pytestmark = [pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core"),
              pytest.mark.skipif(os.name != "posix", reason="POSIX signals")]

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

STEPS = 60
# A checkpoint every 3 steps, so that a good share of a run is spent writing them.
CONFIG = """\
[data]
path = {scene}

[train]
steps = {steps}
sh_degree = 1
sh_degree_interval = 20
densify_from = 10
densify_until = 50
densify_every = 10
densify_grad_threshold = 0.002
opacity_reset_every = 30
init_points = 300
init_extent = 1.0
{extra}
[backend]
backend = "cpu"
deterministic = true

[output]
dir = {out}
eval_steps = [30]
checkpoint_steps = [{checkpoints}]
render_views = 1
"""


def write_config(root, name, out, *, steps=STEPS, extra="", checkpoints=None):
    checkpoints = list(range(3, steps + 1, 3)) if checkpoints is None else checkpoints
    path = root / f"{name}.toml"
    path.write_text(CONFIG.format(scene=json.dumps(str(root / "scene")), out=json.dumps(str(out)), steps=steps,
                                  extra=extra, checkpoints=", ".join(map(str, checkpoints))))
    return path


def splat_cmd(*args):
    return [sys.executable, "-m", "splat", "train", "--quiet", *map(str, args)]


def env():
    e = dict(os.environ)
    e.pop("SPLAT_DEBUG", None)
    return e


def run(*args, timeout=300):
    return subprocess.run(splat_cmd(*args), capture_output=True, text=True, env=env(), timeout=timeout)


def start(*args):
    return subprocess.Popen(splat_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())


def wait_for_training(proc):
    """Returns once the run prints its first line, just before it trains."""
    line = proc.stdout.readline()
    assert line.startswith("splat train: "), (line, proc.communicate())


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    write_blender_scene(root / "scene", 32, n_test_views=2)
    return root


@pytest.fixture(scope="module")
def baseline(root):
    """An uninterrupted run: (folder, seconds from the start of its training
    to its end)."""
    out = root / "baseline"
    proc = start("--config", write_config(root, "baseline", out))
    wait_for_training(proc)
    t0 = time.perf_counter()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out, time.perf_counter() - t0


def assert_complete(folder):
    """Every file of the run folder reads back whole; temporary files of
    killed writes are the only others allowed."""
    from splat.io.ply import load_ply
    from splat.trainer import read_checkpoint
    for p in sorted(folder.rglob("*")):
        if p.is_dir() or p.name == ".splat.lock":
            continue
        if p.name.endswith(".tmp"):
            assert p.name.startswith("."), p
            continue
        if p.suffix == ".npz":
            meta, arrays = read_checkpoint(p)
            assert all(np.isfinite(a).all() for a in arrays.values()), p
            if p.name != "checkpoint.npz":
                assert meta["step"] == int(p.stem.split("_")[1]), p
        elif p.suffix == ".json":
            json.loads(p.read_text())
        elif p.suffix == ".toml":
            tomllib.loads(p.read_text())
        elif p.suffix == ".ply":
            load_ply(p)
        elif p.suffix == ".png":
            with Image.open(p) as im:
                im.load()
        else:
            raise AssertionError(f"unexpected file {p}")


def finished(folder) -> bool:
    path = folder / "metrics.json"
    return path.exists() and json.loads(path.read_text()).get("finished", False)


def assert_same_result(folder, baseline_folder):
    for name in ("checkpoint.npz", "point_cloud.ply"):
        assert (folder / name).read_bytes() == (baseline_folder / name).read_bytes(), name
    m, b = (json.loads((f / "metrics.json").read_text()) for f in (folder, baseline_folder))
    assert m["finished"] and m["steps"] == STEPS
    assert m["psnr"] == b["psnr"] and [e["step"] for e in m["evals"]] == [e["step"] for e in b["evals"]]


def kill_at_random(folder, config, rng, seconds, sig, *, resume=False):
    """Starts a run (or a resume), sends `sig` at a random point of its
    training; returns (returncode, stderr)."""
    args = ("--resume", folder) if resume else ("--config", config)
    proc = start(*args)
    wait_for_training(proc)
    time.sleep(float(rng.uniform(0.0, seconds)))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_writes_a_checkpoint_and_resume_is_exact(root, baseline, tmp_path, sig):
    rng, seed = make_rng()
    out = tmp_path / "run"
    config = write_config(root, "term", out)
    rc, err = kill_at_random(out, config, rng, 0.9 * baseline[1], sig)
    print(f"{sig.name}: exit status {rc}, {err.strip().splitlines()[-1:]}; seed {seed}")
    assert_complete(out)
    if finished(out):            # the signal came as the finished run was exiting
        assert rc in (0, 128 + sig, -sig) and "Traceback" not in err, err
    else:
        assert rc == 128 + sig, err
        line = err.strip().splitlines()[-1]
        assert line.startswith(f"splat: stopped by {sig.name} after step ") and "--resume" in line, err
        step = int(line.split("after step ")[1].split(":")[0])
        if step:
            assert (out / f"checkpoint_{step}.npz").is_file()
            assert not json.loads((out / "metrics.json").read_text())["finished"]
        p = run("--resume", out)
        assert p.returncode == 0, (p.stderr, seed)
    assert not list(out.rglob("*.tmp"))
    assert_same_result(out, baseline[0])


def kill_in_a_write(folder, args):
    """Starts a run, SIGKILLs it as soon as a temporary file of an atomic
    write shows up in the folder (a checkpoint or metrics half written).
    Returns (returncode, whether a write was caught)."""
    proc = start(*args)
    wait_for_training(proc)
    caught = False
    while proc.poll() is None:
        if any(n.endswith(".tmp") for n in os.listdir(folder)):
            proc.kill()
            caught = True
            break
    proc.communicate(timeout=120)
    return proc.returncode, caught


@pytest.mark.slow
def test_sigkill_anywhere_then_resume_is_exact(root, baseline, tmp_path):
    """SIGKILL at random points of training and in the middle of checkpoint
    writes, each time resumed (and killed again): every file stays complete
    or absent, and the run ends with the uninterrupted run's bytes."""
    rng, seed = make_rng()
    out = tmp_path / "run"
    config = write_config(root, "kill", out)
    rc, err = kill_at_random(out, config, rng, baseline[1], signal.SIGKILL)
    assert rc in (0, -signal.SIGKILL), err
    caught_writes = 0
    for attempt in range(4):
        assert_complete(out)
        if finished(out):
            break
        if attempt % 2 == 0:
            rc, caught = kill_in_a_write(out, ("--resume", out))
            caught_writes += caught
        else:
            rc, _ = kill_at_random(out, config, rng, 0.8 * baseline[1], signal.SIGKILL, resume=True)
        assert rc in (0, -signal.SIGKILL), seed
    if not finished(out):
        assert_complete(out)
        p = run("--resume", out)
        assert p.returncode == 0, (p.stderr, seed)
    p = run("--resume", out)         # a finished run: nothing left to do, said in one line
    assert p.returncode == 1 and "finished at step" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not list(out.rglob("*.tmp")), "stale temporary files are removed by the next run"
    assert_same_result(out, baseline[0])
    print(f"SIGKILL campaign: {caught_writes} kill(s) inside a write; seed {seed}")


def test_stale_temp_files_are_removed_and_overwrite_replaces_the_run(root, baseline, tmp_path):
    out = tmp_path / "run"
    import shutil
    shutil.copytree(baseline[0], out)
    stale = [out / ".checkpoint_9.npz.k3j_x9aQ.tmp", out / "renders" / "step_30" / ".v.png.abcdefgh.tmp"]
    for p in stale:
        p.write_bytes(b"half a file")
    config = write_config(root, "over", out, steps=20, checkpoints=[10])
    p = run("--config", config)
    assert p.returncode == 1 and "holds another run" in p.stderr and "--overwrite" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not any(s.exists() for s in stale)
    assert (out / "checkpoint_60.npz").is_file()           # refused: nothing of the old run removed
    p = run("--config", config, "--overwrite")
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in out.glob("checkpoint*.npz")) == ["checkpoint.npz", "checkpoint_10.npz"]
    assert not (out / "renders" / "step_30").exists()
    assert json.loads((out / "metrics.json").read_text())["steps"] == 20
    assert tomllib.loads((out / "config.toml").read_text())["train"]["steps"] == 20

    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for extra in ((), ("--overwrite",)):
        p = run("--config", config, "--out", foreign, *extra)
        assert p.returncode == 1 and "splat did not write" in p.stderr, p.stderr
    assert (foreign / "notes.txt").read_text() == "mine"


def test_a_busy_run_folder_is_refused_at_once(root, tmp_path):
    out = tmp_path / "run"
    first = start("--config", write_config(root, "busy", out, steps=10 ** 6, checkpoints=[]))
    try:
        wait_for_training(first)
        t0 = time.perf_counter()
        p = run("--config", write_config(root, "busy2", out, steps=10), "--overwrite")
        assert p.returncode == 1, p.stderr
        assert f"run folder {out}: in use by another splat train (process {first.pid})" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
        assert time.perf_counter() - t0 < 30
        p = run("--resume", out)
        assert p.returncode == 1 and "in use" in p.stderr
    finally:
        first.kill()
        first.communicate()
    # The lock dies with its process (SIGKILL included): the folder is free again.
    assert tomllib.loads((out / "config.toml").read_text())["train"]["steps"] == 10 ** 6
    p = run("--resume", out, "--steps", 12)
    assert p.returncode == 0, p.stderr
    assert json.loads((out / "metrics.json").read_text())["steps"] == 12


def test_divergence_stops_with_the_step_and_keeps_finite_checkpoints(root, tmp_path):
    out = tmp_path / "run"
    config = write_config(root, "diverge", out, steps=300, extra="log_scales_lr = 1000.0\n",
                          checkpoints=[50, 150, 250])
    p = run("--config", config)
    assert p.returncode == 1, p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("splat: warning:")]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("splat: error: training diverged at step "), p.stderr
    assert "splat: warning: train.log_scales_lr: 1000" in p.stderr
    step = int(lines[0].split("at step ")[1].split()[0])
    assert 0 < step < 300
    assert_complete(out)                    # every checkpoint written is finite
    assert not (out / "checkpoint.npz").exists() and not (out / "point_cloud.ply").exists()
    for s in (50, 150, 250):
        assert (out / f"checkpoint_{s}.npz").exists() == (s < step), (s, step)
    written = sorted(out.glob("checkpoint_*.npz"))
    if written:
        assert str(written[-1]) in lines[0]
    else:
        assert "no checkpoint was written" in lines[0]


def test_python_api_raises_on_divergence(root):
    from splat.data import load_dataset
    train = load_dataset(root / "scene", "train")
    cfg = splat.TrainConfig(steps=200, init_points=300, init_extent=1.0, sh_dc_lr=1e30)
    t = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
    with pytest.raises(splat.TrainingDiverged, match=r"training diverged at step \d+ \((the loss|non-finite)"):
        t.run(200, progress=False)
    step = t.diverged_step
    assert 0 < step <= 100 and t.step_count == step
    with pytest.raises(splat.TrainingDiverged, match=f"at step {step}"):
        t.step()
    with pytest.raises(splat.TrainingDiverged, match="not finite"):
        t.save_checkpoint(root / "never.npz")
    assert not (root / "never.npz").exists()
    assert isinstance(splat.TrainingDiverged("x"), RuntimeError)


def test_resume_refuses_what_it_cannot_continue(root, tmp_path, capsys):
    from splat import cli

    def fails(*argv, words):
        rc = cli.main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert rc == 1 and len(err.strip().splitlines()) == 1 and err.startswith("splat: error: "), err
        for w in words:
            assert w in err, err

    fails("train", "--resume", tmp_path / "nowhere", words=["nowhere", "nothing to resume"])
    (tmp_path / "empty").mkdir()
    fails("train", "--resume", tmp_path / "empty", words=["holds no run to resume"])
    fails("train", "--resume", tmp_path / "empty", "--config", root / "x.toml", words=["--resume", "--config"])
    (tmp_path / "file").write_text("x")
    fails("train", "--out", tmp_path / "file", "--steps", 3, words=["is not a folder"])


def test_resume_of_a_run_killed_at_its_last_step(root, baseline, tmp_path):
    """Killed after checkpoint_60.npz (the last step) and before the final
    evaluation: the resume evaluates and writes the final files, the same bytes."""
    import shutil
    out = tmp_path / "run"
    shutil.copytree(baseline[0], out)
    for name in ("checkpoint.npz", "point_cloud.ply", "training.png"):
        (out / name).unlink()
    shutil.rmtree(out / "renders" / f"step_{STEPS}")
    m = json.loads((out / "metrics.json").read_text())
    m.update(finished=False, evals=[e for e in m["evals"] if e["step"] < STEPS])
    (out / "metrics.json").write_text(json.dumps(m))
    p = run("--resume", out)
    assert p.returncode == 0, p.stderr
    assert (out / "renders" / f"step_{STEPS}").is_dir()
    assert_same_result(out, baseline[0])


def test_a_run_that_fails_at_setup_leaves_the_folder_reusable(root, tmp_path, monkeypatch, capsys):
    """A new run that stops before it has a result (here: the kernels fail at warm-up, or
    at the first step, after config.toml and cameras.json are written; or --view without
    viser) leaves no run files, so the same command runs again without --overwrite. A
    resumed run keeps its files whatever happens."""
    from splat import cli, trainer, warmup
    from _cli import assert_user_error, without_warnings
    out = tmp_path / "run"
    config = write_config(root, "setup", out, steps=30, checkpoints=[])

    def errors():
        return without_warnings(capsys.readouterr().err)

    def broken(*args, **kwargs):
        raise RuntimeError("[splat] kernel compilation failed (injected)")

    def broken_step(*args, **kwargs):
        assert (out / "config.toml").is_file() and (out / "cameras.json").is_file()   # written by now
        raise RuntimeError("[splat] kernel launch failed (injected)")

    monkeypatch.setattr(warmup, "warm_up", broken)
    assert_user_error(cli.main(["train", "--config", str(config), "--quiet"]), errors(), "kernel compilation failed")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []
    monkeypatch.undo()
    monkeypatch.setattr(trainer.Trainer, "step", broken_step)
    assert_user_error(cli.main(["train", "--config", str(config), "--quiet"]), errors(), "kernel launch failed")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "viser", None)   # `import viser` fails as where it is not installed
    assert_user_error(cli.main(["train", "--config", str(config), "--quiet", "--view"]), errors(), "needs viser",
                      "splat-gs[view]")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []
    from splat.viewer import server
    monkeypatch.setattr(server, "require_viser", lambda: None)   # as where viser is installed
    assert_user_error(cli.main(["train", "--config", str(config), "--quiet", "--view", "--view-host", "999.1.1.1"]),
                      errors(), "host", "999.1.1.1")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []
    monkeypatch.undo()
    assert cli.main(["train", "--config", str(config), "--quiet"]) == 0, capsys.readouterr().err
    assert (out / "checkpoint.npz").is_file()
    monkeypatch.setattr(warmup, "warm_up", broken)
    assert cli.main(["train", "--resume", str(out), "--steps", "33", "--quiet"]) == 1
    assert (out / "checkpoint.npz").is_file() and (out / "metrics.json").is_file()
