"""Checks a built wheel's contents: the package's Python files, the native
module with every kernel source embedded, splat.metallib in a macOS wheel,
and nothing else (no tests, no data, no bytecode).

    python tools/check_wheel.py dist/splat_gs-*.whl
"""
from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_SUFFIXES = (".npz", ".npy", ".png", ".jpg", ".jpeg", ".ply", ".exr", ".bin", ".toml")


def check(wheel: Path) -> list[str]:
    problems = []
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        package = [n for n in names if n.startswith("splat/")]
        others = [n for n in names if not n.startswith("splat/") and ".dist-info/" not in n]
        if others:
            problems.append(f"files outside splat/ and the dist-info: {others[:5]}")
        for n in package:
            if "__pycache__" in n or n.endswith(".pyc") or "/tests/" in n or n.endswith(DATA_SUFFIXES):
                problems.append(f"does not belong in the wheel: {n}")
        source = sorted(str(p.relative_to(ROOT / "python")) for p in (ROOT / "python" / "splat").rglob("*.py"))
        missing = [s for s in source if s not in names]
        if missing:
            problems.append(f"package files missing: {missing}")
        native = [n for n in package if re.match(r"splat/_core\..*(so|pyd|dylib)$", n)]
        if len(native) != 1:
            problems.append(f"expected one native module splat/_core.*, got {native}")
        else:
            blob = z.read(native[0])
            shaders = ROOT / "shaders"
            for f in sorted(shaders.rglob("*")):
                if f.suffix not in (".h", ".cu", ".metal") or f.name.startswith("."):
                    continue
                rel = str(f.relative_to(shaders))
                # The embedded text is the file's bytes; its first line is enough to find it.
                first = next((ln for ln in f.read_bytes().splitlines() if ln.strip()), b"")
                if rel.encode() not in blob or first not in blob:
                    problems.append(f"kernel source {rel} is not embedded in {native[0]}")
        if "macosx" in wheel.name and "splat/splat.metallib" not in names:
            problems.append("a macOS wheel without splat/splat.metallib")
        print(f"{wheel.name}: {len(names)} files")
        for n in sorted(names):
            print(f"  {n}  ({z.getinfo(n).file_size} bytes)")
    return problems


def main(argv) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    bad = 0
    for w in argv[1:]:
        for p in check(Path(w)):
            print(f"check_wheel: {p}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
