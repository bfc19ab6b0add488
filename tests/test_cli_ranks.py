"""`splat train --gpus N` on the CPU backend (N processes through gloo), as a
user runs it: a subprocess, the built-in scene.

Oracles: the run's checkpoint against the same two-rank batches computed in
one process from the run's own config.toml and initial state, bit for bit; a
signal stops both ranks after the same update, with rank 0's checkpoint, and
one process resumes it; a rank that dies stops the run with rank 0's error,
not a hang."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import splat
from _cli import assert_user_error, run_cli

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
PARAMS = ("means", "log_scales", "quats", "opacity_logits", "sh")


def splat_train(*args, **popen):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return subprocess.Popen([sys.executable, "-m", "splat", "train", *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def wait_for_banner(proc, timeout=120):
    """Reads stdout up to the run's announcement: the ranks are training."""
    t0 = time.monotonic()
    lines = []
    while time.monotonic() - t0 < timeout:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("splat train:"):
            return lines
    proc.kill()
    pytest.fail(f"no announcement: {''.join(lines)}{proc.stderr.read()[-3000:]}")


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return sorted(out)


@pytest.mark.parametrize("recipe", [[], ["--set", "train.exposure=true"], ["--set", "train.visible_adam=true"]],
                         ids=["default", "exposure", "visible_adam"])
def test_two_ranks_train_the_batches_of_one_process(tmp_path, recipe):
    run = tmp_path / "run"
    proc = splat_train("--gpus", 2, "--backend", "cpu", "--steps", 40, "--out", run, "--quiet", *recipe)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "on cpu x 2 ranks (host exchange)" in out and "Traceback" not in err
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["ranks"] == 2 and metrics["steps"] == 40 and metrics["finished"]
    assert metrics["exchange"] == "host"   # auto: the CPU backend has no device exchange
    # The built-in scene's cameras orbit it: screen-size pruning at 15% of 80 px.
    assert metrics["camera_layout"] == "object" and metrics["screen_prune_px"] == pytest.approx(12.0)
    assert metrics["opacity_resets"] is True   # not a capture: "auto" keeps the resets
    # The same batches in one process, from the run's recipe and its initial state.
    sys.path.insert(0, HERE)
    from test_parallel import simulate_batches
    from splat.config import load_config
    from splat.data import synthetic
    cfg = load_config(run / "config.toml", check_paths=False).train
    train = synthetic.make_scene()[0]
    cpu = splat.BackendConfig(backend="cpu")
    start = splat.Trainer.from_dataset(train, cfg, cpu).state()
    want = simulate_batches(train, cfg, {k: start[k] for k in PARAMS}, 20, backend_config=cpu).state()
    _, got = splat.trainer.read_checkpoint(run / "checkpoint.npz")
    exposure = "train.exposure=true" in recipe
    for k in PARAMS + (("exposure",) if exposure else ()):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    if exposure:  # rank 0 wrote the corrections the ranks trained together
        np.testing.assert_array_equal(np.load(run / "exposure.npy"), want["exposure"])


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the ranks through /proc")
def test_a_signal_stops_both_ranks_after_one_update_and_one_process_resumes(tmp_path):
    run = tmp_path / "run"
    proc = splat_train("--gpus", 2, "--backend", "cpu", "--steps", 30000, "--out", run, "--quiet")
    wait_for_banner(proc)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "stopped by SIGINT after step" in err and "Traceback" not in err, err[-3000:]
    step = int(err.split("stopped by SIGINT after step ")[1].split(":")[0])
    assert step > 0 and step % 2 == 0  # whole updates of two views
    assert (run / f"checkpoint_{step}.npz").is_file()
    rc, out, err = splat_train_in_process(["--resume", run, "--steps", step + 10, "--quiet"])
    assert rc == 0, err
    assert json.loads((run / "metrics.json").read_text())["steps"] == step + 10


def splat_train_in_process(args):
    proc = splat_train(*args)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the ranks through /proc")
def test_a_rank_that_dies_stops_the_run_with_rank_0s_error(tmp_path):
    run = tmp_path / "run"
    proc = splat_train("--gpus", 2, "--backend", "cpu", "--steps", 30000, "--out", run, "--quiet")
    wait_for_banner(proc)
    ranks = children(proc.pid)
    assert len(ranks) == 2, ranks
    t0 = time.monotonic()
    os.kill(ranks[1], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    assert "splat: error: rank 0 of 2: all_reduce failed" in err, err[-3000:]
    assert "Traceback" not in err
    assert time.monotonic() - t0 < 60


def test_gpus_is_refused_inside_a_rank(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    rc, out, err = run_cli(capsys, "train", "--gpus", "2", "--backend", "cpu", "--steps", "10")
    assert_user_error(rc, err, "--gpus", "already a rank")


def test_the_device_exchange_needs_cuda(tmp_path):
    proc = splat_train("--gpus", 2, "--backend", "cpu", "--exchange", "device", "--steps", 20, "--out",
                       tmp_path / "run", "--quiet")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    assert "splat: error: exchange='device' reduces through NCCL on CUDA devices; backend cpu" in err, err[-3000:]
    assert "Traceback" not in err


def test_gpus_spelt_as_argparse_takes_it(tmp_path):
    # --gpu=2 (an abbreviation) starts the same two ranks as --gpus 2.
    run = tmp_path / "run"
    proc = splat_train("--gpu=2", "--backend", "cpu", "--steps", 4, "--out", run, "--quiet")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads((run / "metrics.json").read_text())["ranks"] == 2
