"""The `splat` command line: train, check, render, eval, and bench (splat/bench.py).

    splat train [--config X.toml] [--steps N] [--out DIR] [--backend B]
    splat check [--config X.toml]
    splat render --checkpoint C --data PATH [--split test] [--out DIR] [--frames 0::10] [--supersample K]
    splat eval --checkpoint C --data PATH [--split test] [--frames ..] [--supersample K] [--json out.json]

User errors (a bad config, missing data, an unreadable file, a backend that
is not available) print one `splat: error: ...` line per problem to stderr
and exit with status 1; set SPLAT_DEBUG=1 to get the traceback instead.
Every file a command writes is written atomically.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from ._cli_common import one_line, positive_int, warn, write_json

__all__ = ["main"]

BACKENDS = ("auto", "cpu", "cuda", "metal")
SYNTHETIC_STEPS = 2000          # `splat train` with no config
SYNTHETIC_OUT = "runs/synthetic"
LOSS_EVERY = 10                 # read the loss back every this many steps (as Trainer.run)


class UserError(Exception):
    """A problem the user can fix; printed as one line, no traceback."""


# --------------------------------------------------------------------------- helpers


def _err(msg: str) -> None:
    print(f"splat: error: {msg}", file=sys.stderr, flush=True)


def _clean(msg: str) -> str:
    return one_line(msg) or "unknown error"


def _exc_message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename and not str(exc).startswith("[splat]"):
        return f"{exc.filename}: {exc.strerror}"
    return _clean(str(exc)) if str(exc) else type(exc).__name__


def _to_uint8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(np.asarray(img, np.float32) * 255.0), 0, 255).astype(np.uint8)


def _write_png(path, rgb_uint8: np.ndarray) -> None:
    from PIL import Image

    from .io.atomic import atomic_write
    with atomic_write(path, "wb") as f:
        Image.fromarray(rgb_uint8).save(f, format="PNG")


def _side_by_side(render: np.ndarray, target_uint8: np.ndarray) -> np.ndarray:
    """[render | ground truth] with a thin grey gap."""
    r = _to_uint8(render)
    h = r.shape[0]
    gap = np.full((h, max(2, r.shape[1] // 100), 3), 128, np.uint8)
    return np.concatenate([r, gap, target_uint8], axis=1)


def _safe_name(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._")
    return stem or "view"


def _pick_views(count: int, n: int) -> list[int]:
    """n indices spread evenly over count views (all of them when n >= count)."""
    if n <= 0:
        return []
    if n >= count:
        return list(range(count))
    return sorted({int(round(x)) for x in np.linspace(0, count - 1, n)})


def _make_backend(table: dict):
    """BackendConfig from a [backend] table, its warnings printed."""
    from . import BackendConfig
    try:
        bc = BackendConfig(**table)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    for w in bc.validate():
        warn(_clean(w))
    from ._backend_notice import claim_auto_fallback_message
    fallback = claim_auto_fallback_message(bc.backend)   # said here once, not again by the Trainer
    if fallback:
        warn(_clean(fallback))
    return bc


def _progress(total: int, enabled: bool):
    """A rich progress bar on stderr (a no-op object when disabled)."""
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    columns = (TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.4f}  {task.fields[gaussians]:,} Gaussians  "
                          "{task.fields[rate]:.1f} steps/s"), TimeRemainingColumn())
    return Progress(*columns, console=Console(stderr=True), transient=False)


# --------------------------------------------------------------------------- train


def _synthetic_setup(args):
    """(config, train dataset, eval dataset) of the built-in scene."""
    from .config import Config, OutputConfig
    from .data import synthetic
    steps = args.steps or SYNTHETIC_STEPS
    train, test = synthetic.make_scene()
    cfg = Config()
    cfg.train = synthetic.default_train_config(steps, image_size=train.width)
    every = max(1, steps // 8)
    cfg.output = OutputConfig(dir=SYNTHETIC_OUT, eval_steps=list(range(every, steps + 1, every)),
                              checkpoint_steps=[], render_views=4, save_ply=True)
    cfg.backend = {"backend": args.backend or "auto"}
    return cfg, train, test


def _config_setup(args):
    """(config, train dataset, eval dataset) from a TOML config."""
    from .config import load_config
    from .data import load_dataset
    cfg = load_config(args.config)
    if args.steps:
        cfg.train.steps = args.steps
        errors = cfg.train.errors()
        if errors:
            from .config import ConfigError
            raise ConfigError(errors, source=f"{args.config} with --steps {args.steps}")
    if args.backend:
        cfg.backend = dict(cfg.backend, backend=args.backend)
    d = cfg.data
    common = dict(background=d.background, downscale=d.downscale, test_every=d.test_every, format=d.format)
    train = load_dataset(d.path, d.train_split, frames=d.train_frames, **common)
    test = load_dataset(d.eval_path or d.path, d.eval_split, frames=d.test_frames, **common)
    return cfg, train, test


class _KeepSome(dict):
    """A dict that only keeps the keys it was told to (for evaluate(renders=...))."""

    def __init__(self, keep):
        super().__init__()
        self.keep = set(keep)

    def __setitem__(self, key, value):
        if key in self.keep:
            super().__setitem__(key, value)


def cmd_train(args) -> int:
    from .metrics import evaluate
    from .plot import save_training_plot
    from .trainer import Trainer

    t_begin = time.perf_counter()
    synthetic = args.config is None
    cfg, train, test = _synthetic_setup(args) if synthetic else _config_setup(args)
    out = Path(args.out if args.out else cfg.output.dir)
    steps = cfg.train.steps
    supersample = 1 if synthetic else cfg.data.eval_supersample
    bc = _make_backend(cfg.backend)

    eval_steps = sorted({s for s in cfg.output.eval_steps if s <= steps} | {steps})
    ckpt_steps = sorted(s for s in cfg.output.checkpoint_steps if s <= steps)
    skipped = [s for s in list(cfg.output.eval_steps) + list(cfg.output.checkpoint_steps) if s > steps]
    if skipped:
        print(f"note: steps {sorted(set(skipped))} are past train.steps = {steps} and are skipped",
              file=sys.stderr)

    trainer = Trainer.from_dataset(train, cfg.train, bc)
    if (out / "metrics.json").exists():
        print(f"note: {out} holds an earlier run; its files are replaced as this run writes them",
              file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    scene = "built-in synthetic scene" if synthetic else cfg.data.path
    eval_desc = "synthetic test views" if synthetic else \
        f"{cfg.data.eval_path or cfg.data.path} [{cfg.data.eval_split}]"
    print(f"splat train: {scene}: {len(train)} views {train.width}x{train.height}, "
          f"{trainer.num_gaussians:,} initial Gaussians, {steps} steps on {trainer.backend}; "
          f"eval on {len(test)} views of {eval_desc}"
          + (f" (rendered at {supersample}x)" if supersample > 1 else "") + f" -> {out}", flush=True)
    _write_text_config(out / "config.toml", cfg, synthetic)

    load_seconds = time.perf_counter() - t_begin
    show = [test.names[i] for i in _pick_views(len(test), cfg.output.render_views)]
    evals: list[dict] = []
    train_seconds = 0.0
    eval_seconds = 0.0
    bar = _progress(steps, not args.quiet)
    task = None

    def metrics(final: bool) -> dict:
        last = evals[-1] if evals else {}
        return {
            "scene": "synthetic" if synthetic else cfg.data.path,
            "config": None if synthetic else str(Path(args.config).resolve()),
            "backend": trainer.backend,
            "steps": trainer.step_count,
            "finished": final,
            "num_gaussians": trainer.num_gaussians,
            "train_seconds": train_seconds,
            "ms_per_step": 1000.0 * train_seconds / max(1, trainer.step_count),
            "load_seconds": load_seconds,
            "eval_seconds": eval_seconds,
            "psnr": last.get("psnr"),
            "ssim": last.get("ssim"),
            "eval_views": len(test),
            "eval_supersample": supersample,
            "eval_size": [test.width, test.height],
            "per_view": last.get("per_view", []),
            "evals": evals,
            "history": [list(h) for h in trainer.history],
        }

    def log(msg: str) -> None:
        if bar is not None:
            bar.console.print(msg, highlight=False)
        else:
            print(msg, file=sys.stderr, flush=True)

    if bar is not None:
        bar.start()
        task = bar.add_task("train", total=steps, loss=float("nan"), gaussians=trainer.num_gaussians, rate=0.0)
    try:
        for milestone in sorted(set(eval_steps) | set(ckpt_steps)):
            t0 = time.perf_counter()
            while trainer.step_count < milestone:
                i = trainer.step_count + 1
                read = i % LOSS_EVERY == 0 or i == milestone
                st = trainer.step(read_loss=read)
                if read:
                    if not math.isfinite(st.loss):
                        raise RuntimeError(f"training diverged at step {st.step} (loss {st.loss})")
                    if bar is not None:
                        rate = i / max(train_seconds + time.perf_counter() - t0, 1e-9)
                        bar.update(task, completed=i, loss=st.loss, gaussians=st.num_gaussians, rate=rate)
            train_seconds += time.perf_counter() - t0
            if milestone in ckpt_steps:
                trainer.save_checkpoint(out / f"checkpoint_{milestone}.npz")
            if milestone in eval_steps:
                t0 = time.perf_counter()
                renders = _KeepSome(show)
                ev = evaluate(trainer, test, supersample=supersample, renders=renders)
                if show:
                    folder = out / "renders" / f"step_{milestone}"
                    folder.mkdir(parents=True, exist_ok=True)
                    for name in show:
                        j = test.names.index(name)
                        _write_png(folder / f"{_safe_name(name)}.png", _side_by_side(renders[name], test.images[j]))
                evals.append({"step": milestone, "psnr": ev.psnr, "ssim": ev.ssim,
                              "num_gaussians": trainer.num_gaussians, "train_seconds": train_seconds,
                              "per_view": ev.per_view})
                eval_seconds += time.perf_counter() - t0
                log(f"step {milestone}: PSNR {ev.psnr:.2f} dB  SSIM {ev.ssim:.4f}  "
                    f"{trainer.num_gaussians:,} Gaussians  ({train_seconds:.1f} s training)")
                write_json(out / "metrics.json", metrics(final=False))
    finally:
        if bar is not None:
            bar.stop()

    trainer.save_checkpoint(out / "checkpoint.npz")
    if cfg.output.save_ply:
        trainer.save_ply(out / "point_cloud.ply")
    final = evals[-1]
    title = (f"{'synthetic' if synthetic else Path(cfg.data.path).name}: {final['psnr']:.2f} dB PSNR, "
             f"SSIM {final['ssim']:.4f}, {trainer.num_gaussians:,} Gaussians, {steps} steps on "
             f"{trainer.backend} in {train_seconds:.1f} s")
    save_training_plot(out / "training.png", trainer.history, evals, title=title)
    write_json(out / "metrics.json", metrics(final=True))
    print(f"PSNR {final['psnr']:.2f} dB  SSIM {final['ssim']:.4f}  on {len(test)} test views  "
          f"({trainer.num_gaussians:,} Gaussians, {steps} steps, {train_seconds:.1f} s training on "
          f"{trainer.backend}, {time.perf_counter() - t_begin:.1f} s total)")
    print(f"wrote {out}/: metrics.json, checkpoint.npz"
          + (", point_cloud.ply" if cfg.output.save_ply else "") + ", training.png"
          + (", renders/" if show else ""))
    return 0


def _write_text_config(path: Path, cfg, synthetic: bool) -> None:
    from .io.atomic import atomic_write_text
    text = cfg.to_toml()
    if synthetic:
        text = "# the built-in synthetic scene (splat.data.synthetic.make_scene()); [data] is unused\n" + text
    atomic_write_text(path, text)


# --------------------------------------------------------------------------- check


def _check_backends() -> int:
    """`splat check` without a config: the backends of this machine."""
    from . import __version__, backend_available, resolve_backend
    from ._backend_notice import auto_fallback_message
    from ._core import nvrtc_available
    print(f"# splat {__version__}")
    for name in ("cpu", "cuda", "metal"):
        ok, why = backend_available(name)
        print(f"{name}: " + ("available" if ok else f"not available: {_clean(why)}"))
    ok, info = nvrtc_available()
    print(f"nvrtc: {_clean(info) if ok else 'not loaded: ' + _clean(info.split(' Tried:')[0])}")
    print(f"# backend: auto -> {resolve_backend('auto')}")
    fallback = auto_fallback_message()
    if fallback:
        warn(_clean(fallback))
    return 0


def cmd_check(args) -> int:
    from . import backend_available, resolve_backend
    from .config import check_config, load_config
    if args.config is None:
        return _check_backends()
    errors = check_config(args.config)
    if errors:
        for e in errors:
            _err(e)
        _err(f"{args.config}: {len(errors)} problem{'s' if len(errors) != 1 else ''}")
        return 1
    cfg = load_config(args.config)
    from . import BackendConfig
    bc = BackendConfig(**cfg.backend)
    print(f"# {args.config}, resolved")
    print(cfg.to_toml().rstrip())
    asked = bc.backend
    resolved = resolve_backend(asked)
    ok, why = backend_available(resolved)
    print(f"# backend: {asked}" + (f" -> {resolved}" if asked != resolved else "")
          + ("" if ok else " (not available on this machine)"))
    if not ok:
        warn(f"backend {resolved!r} is not available on this machine: {_clean(why)}")
    if asked == "auto":
        from ._backend_notice import auto_fallback_message
        fallback = auto_fallback_message()
        if fallback:
            warn(_clean(fallback))
    for w in bc.validate(resolved):
        warn(_clean(w))
    print(f"{args.config}: OK", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- render / eval


def _read_checkpoint_meta(path) -> dict:
    from .trainer import read_checkpoint
    return read_checkpoint(path)[0]


def _load_model(args):
    """(trainer holding the checkpoint, dataset to render/evaluate)."""
    from .camera import Camera
    from .data import Dataset, load_dataset
    from .trainer import Trainer
    meta = _read_checkpoint_meta(args.checkpoint)
    background = tuple(meta.get("background", (1.0, 1.0, 1.0)))
    data = load_dataset(args.data, args.split, background=background, frames=args.frames)
    # The checkpoint's trainer wants a dataset of its own image size; the
    # views to render are independent of it, so a one-view stand-in does.
    w, h = int(meta["width"]), int(meta["height"])
    stand_in = Dataset(cameras=[Camera(np.eye(4), w, w, 0.5 * w, 0.5 * h, w, h)],
                       images=np.zeros((1, h, w, 3), np.uint8), names=["checkpoint"],
                       background=background, scene_extent=meta.get("scene_extent", 1.0))
    bc = _make_backend({"backend": args.backend or "auto"})
    trainer = Trainer.load_checkpoint(args.checkpoint, stand_in, bc)
    return trainer, data


def cmd_render(args) -> int:
    from .metrics import box_downsample
    trainer, data = _load_model(args)
    out = Path(args.out) if args.out else Path(args.checkpoint).resolve().parent / f"renders_{args.split}"
    out.mkdir(parents=True, exist_ok=True)
    k = args.supersample
    t0 = time.perf_counter()
    for cam, img, name in zip(data.cameras, data.images, data.names):
        render = trainer.render(cam.scaled(k) if k > 1 else cam, background=data.background)
        render = box_downsample(render, k)
        pixels = _side_by_side(render, img) if args.compare else _to_uint8(render)
        _write_png(out / f"{_safe_name(name)}.png", pixels)
    print(f"rendered {len(data)} views of {args.data} [{args.split}] at {data.width}x{data.height}"
          + (f" (supersample {k})" if k > 1 else "") + f" on {trainer.backend} in "
          f"{time.perf_counter() - t0:.1f} s -> {out}")
    return 0


def cmd_eval(args) -> int:
    from .metrics import evaluate
    trainer, data = _load_model(args)
    t0 = time.perf_counter()
    ev = evaluate(trainer, data, supersample=args.supersample)
    seconds = time.perf_counter() - t0
    if args.per_view:
        for v in ev.per_view:
            print(f"  {v['name']}: PSNR {v['psnr']:.2f} dB  SSIM {v['ssim']:.4f}")
    print(f"PSNR {ev.psnr:.2f} dB  SSIM {ev.ssim:.4f}  on {len(data)} views of {args.data} [{args.split}]"
          + (f" (supersample {args.supersample})" if args.supersample > 1 else ""))
    if args.json:
        result = ev.to_dict() | {"checkpoint": str(Path(args.checkpoint).resolve()),
                                 "data": str(Path(args.data).resolve()), "split": args.split,
                                 "frames": args.frames, "supersample": args.supersample,
                                 "views": len(data), "num_gaussians": trainer.num_gaussians,
                                 "step": trainer.step_count, "backend": trainer.backend,
                                 "seconds": seconds}
        write_json(args.json, result)
    return 0


def cmd_bench(args) -> int:
    from . import bench
    return int(bench.main(args.bench_args) or 0)


# --------------------------------------------------------------------------- parser / main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="splat", description="3D Gaussian Splatting trainer.")
    from . import __version__
    p.add_argument("--version", action="version", version=f"splat {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = sub.add_parser("train", help="train a scene (no config: the built-in synthetic scene)",
                       description="Train on the scene of a TOML config, or without one on the built-in "
                                   "synthetic scene. Writes metrics.json, checkpoints, point_cloud.ply, "
                                   "renders and training.png into the run folder.")
    t.add_argument("--config", metavar="X.toml", help="run configuration (see configs/)")
    t.add_argument("--steps", type=positive_int, metavar="N", help="override train.steps")
    t.add_argument("--out", metavar="DIR", help=f"run folder (default: output.dir, or {SYNTHETIC_OUT})")
    t.add_argument("--backend", choices=BACKENDS, help="override backend.backend (default auto)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("check", help="validate a config and show it resolved (no config: the backends here)",
                       description="Print the resolved config and the backend's warnings, or every error. "
                                   "Without --config: each backend's availability on this machine and what "
                                   "backend 'auto' picks.")
    c.add_argument("--config", metavar="X.toml")
    c.set_defaults(func=cmd_check)

    def model_args(q):
        q.add_argument("--checkpoint", required=True, metavar="C.npz", help="a checkpoint written by splat train")
        q.add_argument("--data", required=True, metavar="PATH", help="scene folder (Blender or COLMAP)")
        q.add_argument("--split", default="test", help="split to use (default test)")
        q.add_argument("--frames", metavar="SPEC", help="subset of the split, e.g. 0::10 or 3")
        q.add_argument("--supersample", type=positive_int, default=1, metavar="K",
                       help="render at K times the image size and box-average down")
        q.add_argument("--backend", choices=BACKENDS, help="backend (default auto)")

    r = sub.add_parser("render", help="render dataset views with a checkpoint to PNG")
    model_args(r)
    r.add_argument("--out", metavar="DIR", help="output folder (default: renders_<split> next to the checkpoint)")
    r.add_argument("--compare", action="store_true", help="put the ground truth next to each render")
    r.set_defaults(func=cmd_render)

    e = sub.add_parser("eval", help="PSNR and SSIM of a checkpoint on a dataset split")
    model_args(e)
    e.add_argument("--json", metavar="OUT.json", help="also write the results (with per-view values)")
    e.add_argument("--per-view", action="store_true", help="print every view's values")
    e.set_defaults(func=cmd_eval)

    b = sub.add_parser("bench", help="replay benchmark, A/B comparison and parity checks (splat bench -h)",
                       add_help=False)
    b.set_defaults(func=cmd_bench)      # its arguments are passed on as they are
    return p


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


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 user error, 2 usage)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":
        args.bench_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    debug = bool(os.environ.get("SPLAT_DEBUG"))
    from ._dist import DISTRIBUTION, foreign_package_message
    package = sys.modules.get(__package__)
    if getattr(package, "__distribution__", None) != DISTRIBUTION:  # another project's splat/__init__.py
        _err(foreign_package_message(package))
        return 1
    try:
        from .config import ConfigError
        from .data import DatasetError
    except ImportError as exc:  # the native module is missing or broken
        _err(f"cannot import splat ({exc}); reinstall with: pip install --force-reinstall {DISTRIBUTION}")
        return 1
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("splat: interrupted", file=sys.stderr)
        return 130
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
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
