"""The SIMT emulator's checks as the tests build and run them: tools/simt_emu
runs kernel bodies of shaders/kernels on the host (each threadgroup as fibers,
SIMD operations and barriers as rendezvous). Needs a C++17 compiler and POSIX
ucontext."""
import os
import shutil
import subprocess

# The source tree (SPLAT_SOURCE_ROOT when the tests folder was copied out of it).
ROOT = os.environ.get("SPLAT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def simt_source(name):
    """tools/simt_emu/NAME."""
    return os.path.join(ROOT, "tools", "simt_emu", name)


def find_compiler():
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def compile_check(cxx, sources, exe, defines=()):
    """Builds an emulator check. No FMA contraction: the host's arithmetic is
    then the plain IEEE operations the GPU kernels run (NVRTC --fmad=false)."""
    folders = ("tools/simt_emu", "shaders/common", "shaders/kernels", "cpp/cpu", "cpp/include")
    includes = [f"-I{os.path.join(ROOT, d)}" for d in folders]
    cmd = [cxx, "-std=c++17", "-O1", "-ffp-contract=off", *includes, *[f"-D{d}" for d in defines], *sources,
           "-pthread", "-o", exe]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return exe


def run_check(exe, *args) -> dict:
    """Runs an emulator check with `args` (turned into strings); its `name value` lines."""
    p = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return dict(line.split() for line in p.stdout.splitlines())
