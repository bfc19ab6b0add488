"""The `splat` command line: train, check, render, eval, and bench (splat/bench/).

    splat train [PATH] [--config X.toml] [--data PATH] [--set section.key=value ...] [--steps N] [--fast]
                [--out DIR] [--backend B] [--overwrite] [--view]
    splat train --resume RUN_DIR [--steps N]
    splat check [--config X.toml]
    splat render RUN_DIR|FILE [--path orbit|train|test|FILE.json] [--video OUT.mp4] [--out DIR] ...
    splat render --checkpoint C --data PATH [--split test] [--out DIR] [--frames 0::10] [--supersample K]
    splat eval RUN_DIR|FILE|--checkpoint C --data PATH [--split test] [--frames ..] [--json out.json]
    splat export RUN_DIR|FILE [--format ply|splat|spz|compressed-ply] --out FILE
    splat view RUN_DIR|FILE [--port 8080] [--data PATH]

User errors (a bad config, missing data, an unreadable file, a backend that
is not available) print one `splat: error: ...` line per problem to stderr
and exit with status 1; set SPLAT_DEBUG=1 to get the traceback instead.
Every file a command writes is written atomically. `splat train` holds its
run folder locked (splat/run_dir.py); SIGINT and SIGTERM make it finish the
step, write a checkpoint and exit 130 / 143 (`--resume` continues from it).
"""
from __future__ import annotations

from ._data import render_files
from .main import build_parser, main

__all__ = ["main", "build_parser", "render_files"]
