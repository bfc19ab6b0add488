"""The Metal sources checked off a Mac: tools/check_metal.sh --shaders-only
compiles every shaders/metal entry point, every kernel body and the run-time
amalgamated source through the MSL shim (tools/msl) and its rule checker,
after the shim's self-test proves it rejects bad MSL, and checks the host
contract (kernel names, argument order and function-constant indices agree
between cpp/gpu/kernels.cpp, shaders/metal and shaders/cuda). Needs clang++
(19 preferred) and cmake; skipped otherwise."""
import os
import shutil
import subprocess

import pytest

# The source tree (SPLAT_SOURCE_ROOT when this folder was copied out of it).
ROOT = os.environ.get("SPLAT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "check_metal.sh")


def find_clang():
    for name in ("clang++-19", "clang++"):
        path = shutil.which(name)
        if path:
            return path
    return None


CLANG = find_clang()


@pytest.fixture(scope="module")
def check_output():
    if CLANG is None:
        pytest.skip("no clang++ (clang++-19 or clang++) on PATH: the MSL shim check needs one")
    if shutil.which("cmake") is None or shutil.which("bash") is None:
        pytest.skip("the MSL shim check needs bash and cmake")
    p = subprocess.run(["bash", SCRIPT, "--shaders-only", "--clang", CLANG], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    return p


def test_shaders_pass_the_msl_shim_check(check_output):
    p = check_output
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert "checks passed" in p.stdout


def test_shim_self_test_rejects_bad_msl(check_output):
    out = check_output.stdout
    for case in ("misspelled_function.metal rejected", "wrong_argument_count.metal rejected",
                 "missing_address_space.metal rejected", "good.metal accepted"):
        assert f"ok    {case}" in out, out[-6000:]


def test_host_contract_holds(check_output):
    assert "kernels match the host's kernel table and the CUDA entry points" in check_output.stdout, \
        check_output.stdout[-6000:]
