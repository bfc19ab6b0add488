"""How a `splat train` ends and what the command line says around it: no lock file left
in the run folder, the final line listing every file, a resumed run's times, the usage
of a mistyped flag, and why `auto` runs on the CPU said once and only where it matters."""
from __future__ import annotations

import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE  # noqa: E402
from _cli import assert_user_error, run_cli  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

QUICK = ["--backend", "cpu", "--quiet"]


def test_a_finished_or_failed_run_leaves_no_lock_file(tmp_path, capsys):
    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", "--steps", 8, "--out", out, *QUICK)
    assert rc == 0, err
    assert not (out / ".splat.lock").exists()
    rc, _, err = run_cli(capsys, "train", "--resume", out, "--steps", 10, *QUICK)
    assert rc == 0, err
    assert not (out / ".splat.lock").exists()
    # an error after the folder was taken (a scene folder that is no scene)
    (tmp_path / "empty").mkdir()
    rc, _, err = run_cli(capsys, "train", tmp_path / "empty", "--out", tmp_path / "bad", *QUICK)
    assert rc == 1
    assert not (tmp_path / "bad" / ".splat.lock").exists()


def test_the_lock_still_keeps_a_second_run_out(tmp_path):
    from splat.run_dir import LOCK_NAME, RunFolder, RunFolderError, _lock, _names_file
    first = RunFolder.open(tmp_path / "run")
    lock = tmp_path / "run" / LOCK_NAME
    assert lock.is_file()
    with pytest.raises(RunFolderError, match="in use by another splat train"):
        RunFolder.open(tmp_path / "run", resume=True)
    # a process that opened the lock file just before the run ended...
    late = os.open(lock, os.O_RDWR)
    first.close()
    assert not lock.exists()
    second = RunFolder.open(tmp_path / "run", overwrite=True)
    try:
        # ...can lock the removed file, but it is not the folder's lock file any more
        assert _lock(late) and not _names_file(lock, late)
        assert _names_file(lock, second._fd)
        with pytest.raises(RunFolderError, match="in use"):
            RunFolder.open(tmp_path / "run", overwrite=True)
    finally:
        os.close(late)
        second.close()


def test_the_final_lines_list_every_file_and_resumed_times_add_up(tmp_path, capsys):
    out = tmp_path / "run"
    rc, printed, err = run_cli(capsys, "train", "--steps", 8, "--out", out, *QUICK)
    assert rc == 0, err
    wrote = [ln for ln in printed.splitlines() if ln.startswith("wrote ")][-1]
    names = wrote.split(": ", 1)[1].split(", ")
    assert {"config.toml", "cameras.json", "metrics.json", "checkpoint.npz", "point_cloud.ply"} <= set(names)
    for name in names:
        assert (out / name.rstrip("/")).exists(), name
    first = json.loads((out / "metrics.json").read_text())
    rc, printed, err = run_cli(capsys, "train", "--resume", out, "--steps", 16, *QUICK)
    assert rc == 0, err
    line = [ln for ln in printed.splitlines() if ln.startswith("PSNR")][-1]
    m = re.search(r"([\d.]+) s training on \w+, ([\d.]+) s total; since step 8: ([\d.]+) s training, "
                  r"([\d.]+) s total\)", line)
    assert m, line
    training, total, training_now, total_now = map(float, m.groups())
    assert training <= total and training_now <= total_now
    assert total >= total_now and total >= first["total_seconds"] - 0.05
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_seconds"] <= metrics["total_seconds"]
    assert metrics["total_seconds"] >= first["total_seconds"]


@pytest.mark.parametrize("argv, usage, hint", [
    (["train", "--stpes", "100"], "usage: splat train", "did you mean --steps?"),
    (["eval", "run", "--backnd", "cpu"], "usage: splat eval", "did you mean --backend?"),
    (["render", "run", "--orbit-frams=3"], "usage: splat render", "did you mean --orbit-frames?"),
])
def test_a_mistyped_flag_gets_the_commands_usage_and_a_suggestion(capsys, argv, usage, hint):
    from splat import cli
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert hint in err and "unrecognized arguments" in err


def test_why_auto_runs_on_the_cpu_is_said_once_and_where_a_backend_is_chosen(tmp_path, capsys, monkeypatch):
    from splat import _backend_notice
    message = "[splat] backend 'auto' runs on the cpu: cuda: no NVIDIA driver (test)"
    monkeypatch.setattr(_backend_notice, "auto_fallback_message", lambda: message)
    monkeypatch.setattr(_backend_notice, "_told", False)

    def warnings(err):
        return [ln for ln in err.splitlines() if "runs on the cpu" in ln]

    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", "--steps", 6, "--out", out, "--quiet")   # backend auto
    assert rc == 0, err
    assert len(warnings(err)) == 1, err
    # a render or evaluation of it, its backend not chosen: not repeated (its line names the backend)
    monkeypatch.setattr(_backend_notice, "_told", False)
    rc, printed, err = run_cli(capsys, "eval", out, "--quiet")
    assert rc == 0, err
    assert not warnings(err), err
    assert "(cpu)" in printed
    rc, _, err = run_cli(capsys, "render", out, "--quiet", "--orbit-frames", 2, "--out", tmp_path / "f")
    assert rc == 0 and not warnings(err), err
    # asked for: said, once a process
    monkeypatch.setattr(_backend_notice, "_told", False)
    rc, _, err = run_cli(capsys, "eval", out, "--quiet", "--backend", "auto")
    assert rc == 0 and len(warnings(err)) == 1, err
    rc, _, err = run_cli(capsys, "train", "--steps", 6, "--out", tmp_path / "run2", "--quiet")
    assert rc == 0 and not warnings(err), err
    # splat check still says why, every time
    rc, _, err = run_cli(capsys, "check")
    assert rc == 0 and len(warnings(err)) == 1, err
    rc, _, err = run_cli(capsys, "export", out, "--out", tmp_path / "x.spz")
    assert rc == 0 and not warnings(err), err


def test_a_bad_flag_value_is_still_a_one_line_error(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "train", "--set", "train.steps=0", "--out", tmp_path / "r", "--quiet")
    assert_user_error(rc, err, "train.steps")
