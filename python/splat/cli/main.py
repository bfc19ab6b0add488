"""The `splat` argument parser and `main`: dispatch to the subcommands, and every user error as
one `splat: error: ...` line (SPLAT_DEBUG=1: the traceback)."""
from __future__ import annotations

import argparse
import os
import re
import sys

from ._common import one_line, positive_int, warn
from ..stop_signals import Terminated
from ._shared import BACKENDS, SYNTHETIC_OUT, UserError, _clean, _err, _exc_message
from .check import cmd_check
from .scene import _background, cmd_bench, cmd_eval, cmd_export, cmd_render, cmd_view
from .train import cmd_train

FAST_HELP = ("the fast preset (train.preset = 'fast'): a compressed schedule, about a fifth of the default's "
             "time (MCMC with a 250k budget for a scene that starts from random points, such as a Blender "
             "scene); keys the config or --set give explicitly still win")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="splat", description="3D Gaussian Splatting trainer.")
    from .. import __version__
    p.add_argument("--version", action="version", version=f"splat {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = sub.add_parser("train", help="train a scene folder or config (neither: the built-in synthetic scene)",
                       description="Train on a scene folder, on the scene of a TOML config, or without "
                                   "either on the built-in synthetic scene. Writes metrics.json, checkpoints, point_cloud.ply, "
                                   "renders and training.png into the run folder.")
    t.add_argument("scene", nargs="?", metavar="PATH",
                   help="scene folder (COLMAP, nerfstudio or Blender); without --config it trains with "
                        "the default recipe into runs/<scene name>")
    t.add_argument("--config", metavar="X.toml", help="run configuration (see configs/)")
    t.add_argument("--data", metavar="PATH", help="override data.path")
    t.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override any config key (repeatable), e.g. --set train.steps=7000")
    t.add_argument("--steps", type=positive_int, metavar="N", help="override train.steps")
    t.add_argument("--fast", action="store_true", help=FAST_HELP)
    t.add_argument("--out", metavar="DIR", help=f"run folder (default: output.dir, or {SYNTHETIC_OUT})")
    t.add_argument("--backend", choices=BACKENDS, help="override backend.backend (default auto)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--overwrite", action="store_true",
                   help="replace the run already in the run folder (its files are removed first); with "
                        "--resume: start that run again from step 0 (unreadable checkpoints kept as "
                        "NAME.unreadable)")
    t.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its newest checkpoint (its config.toml; "
                        "--steps N trains on to N; --data PATH where the scene folder has moved)")
    t.add_argument("--view", action="store_true", help="serve the browser viewer during training (splat-gs[view])")
    t.add_argument("--view-port", type=int, metavar="PORT",
                   help="viewer port, 1..65535, free (default: the first free one from 8080)")
    t.add_argument("--view-host", default="127.0.0.1", metavar="HOST", help="viewer address (default 127.0.0.1)")
    t.add_argument("--gpus", type=positive_int, metavar="N",
                   help="train on N GPUs of this host, data-parallel: N ranks, one view each per update, rank 0 "
                        "writes the run folder (splat-gs[torch]; with --backend cpu: N processes)")
    t.add_argument("--exchange", choices=("auto", "host", "device"), default="auto",
                   help="with several ranks: average the gradients on the GPUs (device: NCCL, splat-gs[multigpu]; "
                        "CUDA only) or through the host (gloo); auto (the default): device where every rank "
                        "can, host otherwise")
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("check", help="validate a config and show it resolved (no config: the backends here)",
                       description="Print the config `splat train` would run with the same arguments, resolved, "
                                   "with what its recipe does and every warning, or every error. Without a "
                                   "config or scene: each backend's availability on this machine and what "
                                   "backend 'auto' picks.")
    c.add_argument("scene", nargs="?", metavar="PATH", help="scene folder, as for splat train")
    c.add_argument("--config", metavar="X.toml", help="run configuration (see configs/)")
    c.add_argument("--data", metavar="PATH", help="override data.path")
    c.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="override any config key (repeatable)")
    c.add_argument("--steps", type=positive_int, metavar="N", help="override train.steps")
    c.add_argument("--fast", action="store_true", help=FAST_HELP)
    c.add_argument("--backend", choices=BACKENDS, help="override backend.backend")
    c.set_defaults(func=cmd_check)

    def model_args(q):
        q.add_argument("source", nargs="?", metavar="RUN_DIR|FILE",
                       help="a run folder, a scene file (.ply, compressed .ply, .splat, .spz) or a checkpoint")
        q.add_argument("--checkpoint", metavar="C.npz", help="a checkpoint written by splat train (or any SOURCE)")
        q.add_argument("--data", metavar="PATH", help="scene folder (default: the run's [data] path, read as "
                                                      "its config.toml reads it)")
        q.add_argument("--split", help="split to use (default: the run's eval split, else test)")
        q.add_argument("--frames", metavar="SPEC", help="subset of the views, e.g. 0::10 or 3 (default: the "
                                                       "run's selection of that split)")
        q.add_argument("--downscale", type=positive_int, metavar="N",
                       help="image downscale factor (default: the run's [data] downscale, else 1)")
        q.add_argument("--supersample", type=positive_int, default=1, metavar="K",
                       help="render at K times the image size and box-average down")
        q.add_argument("--background", type=_background, metavar="R,G,B",
                       help="background colour (default: the run's, else the dataset's: black for a capture, "
                            "white for a Blender scene; white without a dataset)")
        q.add_argument("--backend", choices=BACKENDS, help="backend (default auto)")
        antialiased_arg(q)

    def antialiased_arg(q):
        q.add_argument("--antialiased", action=argparse.BooleanOptionalAction, default=None,
                       help="render with the antialiased 2D filter, or not (--no-antialiased); default: the "
                            "run's [train] antialiased (a scene file alone carries no mode: off)")

    r = sub.add_parser("render", help="render a run or a scene file along a camera path, to PNG or MP4",
                       description="Render a run folder, a scene file or a checkpoint: an orbit around the "
                                   "scene (default), the training or test cameras, or the cameras of a JSON "
                                   "file (the cameras.json layout); to PNGs and/or an MP4 (--video).")
    model_args(r)
    r.add_argument("--path", metavar="orbit|train|test|FILE.json",
                   help="camera path (default: the --split views with --data, else orbit)")
    r.add_argument("--video", metavar="OUT.mp4", help="also (without --out: only) write an MP4 (needs imageio-ffmpeg)")
    r.add_argument("--fps", type=float, default=30.0, help="video frame rate (default 30)")
    r.add_argument("--orbit-frames", type=positive_int, default=120, metavar="N", help="orbit frames (default 120)")
    r.add_argument("--width", type=positive_int, metavar="W", help="image width (default: the cameras')")
    r.add_argument("--height", type=positive_int, metavar="H", help="image height (default: from the aspect)")
    r.add_argument("--fov", type=float, metavar="DEG", help="orbit horizontal field of view (default: the "
                                                             "training cameras', else 50)")
    r.add_argument("--up", choices=("+x", "-x", "+y", "-y", "+z", "-z"),
                   help="orbit up axis (default: the training cameras' mean up, else -y)")
    r.add_argument("--elevation", type=float, metavar="DEG", help="orbit elevation (default: the cameras')")
    r.add_argument("--radius-scale", type=float, default=1.0, metavar="S", help="orbit radius factor (default 1)")
    r.add_argument("--out", metavar="DIR", help="PNG folder (default: renders_<path> in the run folder)")
    r.add_argument("--compare", action="store_true", help="put the ground truth next to each render (--data)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_render)

    e = sub.add_parser("eval", help="PSNR and SSIM of a run, scene file or checkpoint on a dataset split")
    model_args(e)
    e.add_argument("--lpips", choices=("alex", "vgg"), help="also LPIPS with this backbone (needs splat-gs[lpips] "
                   "and its weights on this machine; README, Metrics)")
    e.add_argument("--json", metavar="OUT.json", help="also write the results (with per-view values)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.add_argument("--per-view", action="store_true", help="print every view's values")
    e.add_argument("--masked", action="store_true",
                   help="leave out the pixels the views' masks exclude (as [data] eval_masked = true)")
    e.add_argument("--exposure", action="store_true",
                   help="apply the run's learned per-view colour corrections ([train] exposure = true); "
                        "training views only (--split train): test views have none")
    e.add_argument("--fit-exposure", action="store_true",
                   help="fit each view's colour correction on its left half (least squares, 3x3 + bias) and "
                        "score its right half: how a model trained with exposure compensation is compared")
    e.set_defaults(func=cmd_eval)

    v = sub.add_parser("view", help="look at a run or a scene file in the browser (needs viser: splat-gs[view])",
                       description="Serve a browser viewer of a run folder, scene file or checkpoint: splat's "
                                   "renders of the scene, the training (and test) cameras, jump to a view, "
                                   "save an image.")
    v.add_argument("source", metavar="RUN_DIR|FILE", help="a run folder, a scene file or a checkpoint")
    v.add_argument("--data", metavar="PATH", help="dataset, to offer its --split views as test cameras")
    v.add_argument("--split", help="the dataset split shown (default: the run's eval split, else test)")
    v.add_argument("--frames", metavar="SPEC", help="subset of that split's views (default: the run's)")
    v.add_argument("--downscale", type=positive_int, metavar="N",
                   help="image downscale factor (default: the run's [data] downscale, else 1)")
    v.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1; 0.0.0.0 for all)")
    v.add_argument("--port", type=int, help="port, 1..65535, free (default: the first free one from 8080)")
    v.add_argument("--up", choices=("+x", "-x", "+y", "-y", "+z", "-z"),
                   help="up axis (default: the training cameras' mean up, else -y)")
    v.add_argument("--max-resolution", type=positive_int, default=1024, metavar="PX",
                   help="longest side of the rendered image (default 1024; a slider in the page too)")
    v.add_argument("--max-fps", type=float, default=30.0, help="render rate cap in frames a second (default 30)")
    v.add_argument("--background", type=_background, metavar="R,G,B", help="background (default: the run's)")
    v.add_argument("--save-dir", metavar="DIR", help="where 'Save image' writes (default: the run folder)")
    v.add_argument("--backend", choices=BACKENDS, help="backend (default auto)")
    antialiased_arg(v)
    v.set_defaults(func=cmd_view)

    x = sub.add_parser("export", help="write a run's Gaussians as .ply, .splat, .spz or compressed .ply",
                       description="Convert a run folder (its point_cloud.ply or checkpoint.npz) or a scene "
                                   "file (.ply, compressed .ply, .splat, .spz) to another format.")
    x.add_argument("source", metavar="RUN_DIR|FILE", help="a run folder or a scene file")
    x.add_argument("--format", choices=("ply", "splat", "spz", "compressed-ply"),
                   help="output format (default: from --out: .ply, .compressed.ply, .splat, .spz)")
    x.add_argument("--out", required=True, metavar="FILE", help="the file to write")
    x.set_defaults(func=cmd_export)

    b = sub.add_parser("bench", help="replay benchmark, A/B comparison and parity checks (splat bench -h)",
                       add_help=False)
    b.set_defaults(func=cmd_bench)      # its arguments are passed on as they are
    p.set_defaults(subcommands=sub.choices)
    return p


def _unrecognized(parser, command: str, extra: list[str]) -> None:
    """The usage error for arguments `command` does not take: its own usage line, and the
    option each unknown one most likely meant (argparse's exit status 2)."""
    import difflib
    sub = parser.get_default("subcommands").get(command, parser)
    options = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-"):
            close = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
            if close:
                hints.append(f"did you mean {close[0]}?")
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))


def _config_error_lines(exc) -> list[str]:
    """One line per error of a ConfigError, each prefixed by the config file
    (unless the error already starts with it)."""
    text = str(exc)
    if len(exc.errors) == 1:
        first = one_line(text.splitlines()[0]) if text else ""
        where = first[: len(first) - len(exc.errors[0])] if first.endswith(exc.errors[0]) else ""
    else:
        m = re.match(r"\[splat\] (.*?)\d+ configuration errors:", text)
        where = m.group(1) if m else ""
    source = where[:-2] if where.endswith(": ") else where
    return [_clean(e) if source and e.startswith(source) else _clean(f"{where}{e}") for e in exc.errors]


def _warnings_as_lines() -> None:
    """Library warnings (too few SfM points, ...) print as one `splat: warning:` line."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        warn(_clean(str(message)))
    warnings.showwarning = show


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 user error, 2 usage)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)   # what `splat train --gpus N` starts N times
    if args.command == "bench":
        args.bench_args = extra
    elif extra:
        _unrecognized(parser, args.command, extra)
    debug = bool(os.environ.get("SPLAT_DEBUG"))
    from .._dist import DISTRIBUTION, foreign_package_message
    package = sys.modules.get(__package__.partition(".")[0])  # the top-level splat package
    if getattr(package, "__distribution__", None) != DISTRIBUTION:  # another project's splat/__init__.py
        _err(foreign_package_message(package))
        return 1
    _warnings_as_lines()
    try:
        from ..config import ConfigError
        from ..data import DatasetError
    except ImportError as exc:  # the native module is missing or broken
        _err(f"cannot import splat ({exc}); reinstall with: pip install --force-reinstall {DISTRIBUTION}")
        return 1
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("splat: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("splat: terminated", file=sys.stderr)
        return 143
    except ConfigError as exc:
        if debug:
            raise
        for line in _config_error_lines(exc):
            _err(line)
        return 1
    except (DatasetError, ValueError, OSError, RuntimeError, UserError) as exc:
        if debug:
            raise
        _err(_exc_message(exc))
        return getattr(exc, "exit_status", 1)   # 2: a usage error (a viewer port out of range or taken)
    except TypeError as exc:  # argument checks raise TypeError with a [component] prefix; others are bugs
        if debug or not str(exc).startswith("["):
            raise
        _err(_exc_message(exc))
        return 1
    except MemoryError:
        if debug:
            raise
        _err("out of memory (a smaller scene, fewer Gaussians or a lower resolution may fit)")
        return 1
