"""Checks that the installed package is the given wheel: `splat.__version__`,
`splat --version`, the installed metadata and the wheel's own METADATA agree,
and `splat` is imported from site-packages.

    python tools/check_installed.py dist/splat_gs-*.whl   (run outside the source tree)
"""
from __future__ import annotations

import email
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import zipfile


def main(argv) -> int:
    wheel = argv[1]
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        wheel_meta = email.message_from_bytes(z.read(meta))
    import splat
    cli = subprocess.run([os.path.join(os.path.dirname(sys.executable), "splat"), "--version"],
                         capture_output=True, text=True, check=True).stdout.strip()
    seen = {
        "wheel METADATA": wheel_meta["Version"],
        "installed metadata": importlib.metadata.version(wheel_meta["Name"]),
        "splat.__version__": splat.__version__,
        "splat --version": cli.removeprefix("splat "),
    }
    for k, v in seen.items():
        print(f"  {k}: {v}")
    problems = []
    if len(set(seen.values())) != 1:
        problems.append(f"versions disagree: {seen}")
    if wheel_meta["Name"] != "splat-gs" or splat.__distribution__ != wheel_meta["Name"]:
        problems.append(f"distribution name {wheel_meta['Name']!r}, splat.__distribution__ {splat.__distribution__!r}")
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    where = os.path.realpath(splat.__file__)
    print(f"  splat imported from {where}")
    if not where.startswith(site + os.sep):
        problems.append(f"splat is imported from {where}, not from {site}")
    for p in problems:
        print(f"check_installed: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
