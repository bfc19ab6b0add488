"""`splat train --resume` never destroys a run: a folder whose checkpoints cannot be
continued from (truncated, random bytes, an edited step, missing arrays) is refused in
one line naming the file, and every file of the folder keeps its bytes; starting over
is `--resume RUN --overwrite`, which keeps the unreadable file aside."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cli import assert_user_error  # noqa: E402
from _pkg import NATIVE  # noqa: E402
from _scenes import write_blender_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

CONFIG = """\
[data]
path = {scene}

[train]
steps = 4
sh_degree = 0
init_points = 100
init_extent = 1.0

[backend]
backend = "cpu"
deterministic = true

[output]
dir = {out}
eval_steps = [4]
checkpoint_steps = []
render_views = 1
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished run whose only checkpoint is checkpoint.npz (with point_cloud.ply)."""
    from splat import cli
    root = tmp_path_factory.mktemp("resume")
    write_blender_scene(root / "scene", 24, n_test_views=2, n_views=4)
    out = root / "run"
    config = root / "run.toml"
    config.write_text(CONFIG.format(scene=json.dumps(str(root / "scene")), out=json.dumps(str(out))))
    assert cli.main(["train", "--config", str(config), "--quiet"]) == 0
    assert (out / "checkpoint.npz").is_file() and (out / "point_cloud.ply").is_file()
    assert not list(out.glob("checkpoint_*.npz"))
    return out


def snapshot(folder) -> dict:
    """{relative path: sha256} of every file in the folder but the lock (which holds
    the pid of the last process to take the folder)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".splat.lock"}


def rewrite_checkpoint(path, *, step=None, drop=()):
    """The checkpoint at `path` written again with its header's step replaced and
    the arrays in `drop` left out."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes().decode())
    if step is not None:
        meta["step"] = step
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    for k in drop:
        arrays.pop(k)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def corrupt(path, kind: str, rng=None):
    data = path.read_bytes()
    rng = rng or np.random.default_rng(0)
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "random bytes":
        path.write_bytes(rng.integers(0, 256, len(data), dtype=np.uint8).tobytes())
    elif kind == "step -5":
        rewrite_checkpoint(path, step=-5)
    elif kind == "step 10**12":
        rewrite_checkpoint(path, step=10 ** 12)
    elif kind == "missing arrays":
        rewrite_checkpoint(path, drop=("means", "adam_m.means"))
    else:
        raise AssertionError(kind)


def refused_unchanged(capsys, folder, *words):
    """`splat train --resume FOLDER` fails in one line naming the checkpoint, and leaves
    every file of the folder as it was."""
    from splat import cli
    before = snapshot(folder)
    rc = cli.main(["train", "--resume", str(folder), "--quiet"])
    err = capsys.readouterr().err
    assert_user_error(rc, err, str(folder / "checkpoint.npz"), "--overwrite", *words)
    assert snapshot(folder) == before
    return err


KINDS = {"truncated": "not a readable splat checkpoint", "random bytes": "not a readable splat checkpoint",
         "step -5": "step", "step 10**12": "step", "missing arrays": "means"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_resume_without_a_usable_checkpoint_is_refused_and_changes_nothing(finished_run, tmp_path, capsys, kind):
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    corrupt(folder / "checkpoint.npz", kind)
    refused_unchanged(capsys, folder, KINDS[kind])
    # --steps would rewrite config.toml: refused before that too
    from splat import cli
    before = snapshot(folder)
    assert cli.main(["train", "--resume", str(folder), "--steps", "9", "--quiet"]) == 1
    assert snapshot(folder) == before


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 0.999), seed=st.integers(0, 2 ** 32 - 1), garble=st.booleans())
def test_any_damaged_checkpoint_is_refused_and_changes_nothing(finished_run, tmp_path_factory, capsys, cut, seed,
                                                               garble):
    folder = tmp_path_factory.mktemp("damaged") / "run"
    shutil.copytree(finished_run, folder)
    path = folder / "checkpoint.npz"
    data = bytearray(path.read_bytes())
    if garble:   # a run of random bytes from `cut` on (the zip's directory is at the end)
        rng = np.random.default_rng(seed)
        start = int(cut * len(data))
        data[start:] = rng.integers(0, 256, len(data) - start, dtype=np.uint8).tobytes()
    else:
        data = data[: int(cut * len(data))]
    path.write_bytes(bytes(data))
    refused_unchanged(capsys, folder)


@pytest.mark.parametrize("kind", ["truncated", "missing arrays"])
def test_resume_with_overwrite_starts_again_and_keeps_the_unreadable_file(finished_run, tmp_path, capsys, kind):
    from splat import cli
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    corrupt(folder / "checkpoint.npz", kind)
    damaged = (folder / "checkpoint.npz").read_bytes()
    rc = cli.main(["train", "--resume", str(folder), "--overwrite", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (folder / "checkpoint.npz.unreadable").read_bytes() == damaged
    from splat.trainer import read_checkpoint
    assert read_checkpoint(folder / "checkpoint.npz")[0]["step"] == 4
    assert json.loads((folder / "metrics.json").read_text())["finished"]
    # and the folder resumes as any other (a finished run: asks for more steps)
    rc = cli.main(["train", "--resume", str(folder), "--quiet"])
    assert_user_error(rc, capsys.readouterr().err, "finished at step 4")


def test_resume_of_results_without_a_checkpoint_is_refused(finished_run, tmp_path, capsys):
    """The checkpoint deleted (to save space), the PLY kept: nothing to continue from,
    and starting over would replace the PLY."""
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    (folder / "checkpoint.npz").unlink()
    from splat import cli
    before = snapshot(folder)
    rc = cli.main(["train", "--resume", str(folder), "--quiet"])
    assert_user_error(rc, capsys.readouterr().err, "point_cloud.ply", "--overwrite")
    assert snapshot(folder) == before
