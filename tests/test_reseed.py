"""`pytest --reseed N` (tests/_reseed.py), run on a small test file in a subprocess."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

TESTS = '''
import os
from pathlib import Path
from _scenes import make_rng

LOG = Path(os.environ["RESEED_LOG"])


def note(what):
    with open(LOG, "a") as f:
        f.write(what + "\\n")


def test_one_seed_in_four_fails():
    rng, seed = make_rng()
    note(f"fails {seed}")
    assert seed % 4 != 0, f"seed {seed}"


def test_seeded_and_sound(tmp_path):
    assert not any(tmp_path.iterdir()), "a run saw the last run's tmp_path"
    (tmp_path / "x").write_text("x")
    rng, seed = make_rng()
    note(f"sound {seed} {rng.integers(1 << 30)}")


def test_draws_no_seed():
    note("plain")
'''


def _run(tmp_path, *args, env=None):
    work = tmp_path / "suite"
    work.mkdir(exist_ok=True)
    shutil.copy(HERE / "conftest.py", work / "conftest.py")
    (work / "test_seeded.py").write_text(TESTS)
    log = tmp_path / "log.txt"
    log.unlink(missing_ok=True)
    e = {k: v for k, v in os.environ.items() if k != "SPLAT_TEST_SEED"}
    e.update(PYTHONPATH=os.pathsep.join([str(HERE), e.get("PYTHONPATH", "")]), RESEED_LOG=str(log), **(env or {}))
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, str(work)],
                       cwd=work, env=e, capture_output=True, text=True, timeout=300)
    lines = log.read_text().splitlines() if log.exists() else []
    return p, lines


def test_reseed_repeats_seeded_tests_and_names_a_failing_seed(tmp_path):
    p, lines = _run(tmp_path, "--reseed", "40")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    sound = [ln for ln in lines if ln.startswith("sound")]
    fails = [int(ln.split()[1]) for ln in lines if ln.startswith("fails")]
    assert len(sound) == 40, out                        # every run passed: all 40 ran
    assert len({ln.split()[1] for ln in sound}) == 40   # each with a seed of its own
    assert lines.count("plain") == 1                    # no seed drawn: run once
    # Repeated until its first failure, which is the one reported, with its seed.
    assert all(s % 4 for s in fails[:-1]) and fails[-1] % 4 == 0, fails
    assert re.search(rf"SPLAT_TEST_SEED={fails[-1]} pytest '\S*test_one_seed_in_four_fails'", out), out
    assert "2 tests drew seeds" in out and f"{40 + len(fails)} runs" in out, out
    assert "1 failed, 2 passed" in out, out
    # The seed replays the failure.
    p, lines = _run(tmp_path, "-k", "four", env={"SPLAT_TEST_SEED": str(fails[-1])})
    assert p.returncode == 1 and f"seed {fails[-1]}" in p.stdout, p.stdout


def test_reseed_refuses_a_fixed_seed_and_a_bad_count(tmp_path):
    p, _ = _run(tmp_path, "--reseed", "3", env={"SPLAT_TEST_SEED": "5"})
    assert p.returncode == 4 and "unset SPLAT_TEST_SEED" in p.stderr, p.stderr
    p, _ = _run(tmp_path, "--reseed", "-2")
    assert p.returncode == 4 and "--reseed: -2 runs" in p.stderr, p.stderr
    # Without --reseed each test runs once.
    p, lines = _run(tmp_path, "-k", "sound or draws")
    assert p.returncode == 0 and len(lines) == 2, p.stdout
