"""The README's examples run as written: each ```python block runs in a fresh
interpreter, in an empty temporary folder, with a time limit, and so do the
"First run" commands that name no placeholder (`splat train`, `splat eval
runs/synthetic`).

A block that must not run (a fragment, one needing a GPU or data from outside) starts
with the line `# readme: not run` and says why after it; a block needing an optional
package that is missing here (torch, viser, ...) is skipped with that reason."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import INSTALLED, NATIVE, ROOT  # noqa: E402

NOT_RUN = "# readme: not run"
OPTIONAL = ("torch", "viser", "lpips", "tifffile", "imageio_ffmpeg")
README = os.path.join(os.environ.get("SPLAT_SOURCE_ROOT") or ROOT, "README.md")


def python_blocks() -> list[tuple[int, str]]:
    """(line number, code) of every ```python block of the README."""
    if not os.path.isfile(README):
        return []
    text = open(README, encoding="utf-8").read()
    return [(text[:m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def test_the_readme_has_python_examples():
    if not os.path.isfile(README):
        pytest.skip(f"no README.md at {README}")
    assert len(python_blocks()) >= 3


@pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
@pytest.mark.parametrize("line, code", python_blocks(), ids=lambda v: f"line{v}" if isinstance(v, int) else "")
def test_readme_python_block_runs(line, code, tmp_path):
    if code.lstrip().startswith(NOT_RUN):
        pytest.skip(f"README line {line}: marked {NOT_RUN!r}")
    for module in OPTIONAL:
        if re.search(rf"^\s*(from|import) {module}\b|splat\.{module}\b|from splat\.{module}\b", code, re.M) \
                and importlib.util.find_spec(module) is None:
            pytest.skip(f"README line {line}: needs {module}, not installed here")
    env = dict(os.environ)
    if not INSTALLED:   # the source tree's package, as the other tests import it
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "python"), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, f"README line {line}:\n{proc.stderr[-3000:]}"


def first_run_commands() -> list[str]:
    """The `splat ...` lines of the README's "First run" block that name no placeholder
    (PATH), comments dropped: what a newcomer types first, verbatim."""
    if not os.path.isfile(README):
        return []
    text = open(README, encoding="utf-8").read()
    m = re.search(r"^## First run\n.*?^```bash\n(.*?)^```", text, re.S | re.M)
    if not m:
        return []
    lines = [ln.split("#", 1)[0].strip() for ln in m.group(1).splitlines()]
    return [ln for ln in lines if ln.startswith("splat ") and not re.search(r"\b[A-Z]{2,}\b", ln)]


@pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
def test_readme_first_run_commands_run_verbatim(tmp_path):
    """`splat train` then `splat eval runs/synthetic`, as the README gives them, in an
    empty folder: both succeed and eval repeats the PSNR the run reported."""
    import json
    import shlex
    commands = first_run_commands()
    assert commands[:2] == ["splat train", "splat eval runs/synthetic"], commands
    env = dict(os.environ)
    if not INSTALLED:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "python"), env.get("PYTHONPATH")) if p)
    outputs = []
    for cmd in commands:
        proc = subprocess.run([sys.executable, "-m", "splat", *shlex.split(cmd)[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{cmd}:\n{proc.stderr[-3000:]}"
        outputs.append(proc.stdout)
    reported = json.loads((tmp_path / "runs" / "synthetic" / "metrics.json").read_text())
    final = reported["evals"][-1]["psnr"]
    again = float(re.search(r"PSNR ([0-9.]+) dB", outputs[1]).group(1))
    assert abs(again - final) <= 0.01, (again, final)
