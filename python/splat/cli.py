"""The `splat` command line: train, check, render, eval, and bench (splat/bench.py).

    splat train [PATH] [--config X.toml] [--data PATH] [--set section.key=value ...] [--steps N]
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

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from ._cli_common import one_line, positive_int, warn, write_json
from ._cli_data import _safe_name, render_files, run_config, scene_arg
from .stop_signals import StopSignals, Terminated

__all__ = ["main"]

BACKENDS = ("auto", "cpu", "cuda", "metal")
SYNTHETIC_STEPS = 2000          # `splat train` with no config
SYNTHETIC_OUT = "runs/synthetic"
SYNTHETIC_SIZE = 80             # the width of synthetic.make_scene()'s images
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

SYNTHETIC_MARKER = "# the built-in synthetic scene (splat.data.synthetic.make_scene()); [data] is unused"


def _synthetic_setup(args):
    """The config of the built-in scene (its datasets: _datasets)."""
    from .config import Config, OutputConfig
    from .data import synthetic
    steps = args.steps or SYNTHETIC_STEPS
    cfg = Config()
    cfg.train = synthetic.default_train_config(steps, image_size=SYNTHETIC_SIZE)
    every = max(1, steps // 8)
    cfg.output = OutputConfig(dir=SYNTHETIC_OUT, eval_steps=list(range(every, steps + 1, every)),
                              checkpoint_steps=[], render_views=4, save_ply=True)
    cfg.backend = {"backend": args.backend or "auto"}
    return cfg


def _config_setup(args):
    """The config of a TOML file and / or a scene folder, with the command line's overrides."""
    return _command_line_overrides(run_config(args), args, args.config or "the run config")


def _command_line_overrides(cfg, args, source):
    """`cfg` with --steps and --backend applied (errors name `source`)."""
    if args.steps:
        cfg.train.steps = args.steps
        errors = cfg.train.errors()
        if errors:
            from .config import ConfigError
            raise ConfigError(errors, source=f"{source} with --steps {args.steps}")
    if args.backend:
        cfg.backend = dict(cfg.backend, backend=args.backend)
    return cfg


def _datasets(cfg, synthetic: bool, source=None):
    """(train dataset, eval dataset) of a run; `source`: the config file errors name."""
    if synthetic:
        from .data import synthetic as syn
        return syn.make_scene()
    from .data import load_dataset
    d = cfg.data
    common = d.loader_args()

    def split(key: str, path, name: str, frames):
        try:
            return load_dataset(path, name, frames=frames, **common)
        except ValueError as exc:  # a frame selection that selects nothing: name its config key
            if not str(exc).startswith("[splat] frames: "):
                raise
            where = f"{source}: " if source else ""
            raise ValueError(f"[splat] {where}data.{key}: {str(exc).removeprefix('[splat] frames: ')}") from None

    return (split("train_frames", d.path, d.train_split, d.train_frames),
            split("test_frames", d.eval_path or d.path, d.eval_split, d.test_frames))


def _largest_size(ds) -> list:
    """[width, height] of the dataset's largest view."""
    return list(max(ds.sizes, key=lambda s: (s[0] * s[1], s)))


def _storage_text(trainer) -> str:
    """Where the training images live, e.g. "images 1.23 GiB on the device"."""
    st = trainer.image_storage
    budget = f", budget {_bytes(st['budget_bytes'])}" if st["budget_bytes"] else ""
    if st["streamed"]:
        return (f"images {_bytes(st['image_bytes'])} streamed from host memory{budget}, "
                f"{_bytes(st['device_bytes'])} on the device")
    return f"images {_bytes(st['image_bytes'])} on the device{budget}"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


class _KeepSome(dict):
    """A dict that only keeps the keys it was told to (for evaluate(renders=...))."""

    def __init__(self, keep):
        super().__init__()
        self.keep = set(keep)

    def __setitem__(self, key, value):
        if key in self.keep:
            super().__setitem__(key, value)


def _resume_setup(args, folder):
    """(config, synthetic) of the run in `folder`, --steps and --backend applied."""
    from .config import load_config
    from .run_dir import CONFIG_NAME
    path = folder.path / CONFIG_NAME
    synthetic = path.read_text(encoding="utf-8").startswith(SYNTHETIC_MARKER)
    return _command_line_overrides(load_config(path, check_paths=not synthetic), args, path), synthetic


def _resume_state(folder, cfg):
    """(header, arrays, path) of the newest checkpoint of the run, or None to
    start from step 0. Refuses a checkpoint of another recipe."""
    newest, skipped = folder.newest_checkpoint()
    for path, why in skipped:
        warn(f"skipping {path}: {_clean(why)}")
    if newest is None:
        return None
    meta, _, path = newest
    recipe = dict(meta["train_config"], steps=cfg.train.steps)
    if recipe != cfg.train.to_dict():
        diff = sorted(k for k, v in cfg.train.to_dict().items() if recipe.get(k) != v)
        raise UserError(f"{path}: was written with another [train] recipe than {folder.path / 'config.toml'} "
                        f"({', '.join(diff[:4])})")
    if meta["step"] > cfg.train.steps:
        raise UserError(f"{path}: is at step {meta['step']}, past --steps {cfg.train.steps}")
    return newest


def cmd_train(args) -> int:
    with StopSignals() as stop:
        return _train(args, stop)


def _train(args, stop: StopSignals) -> int:
    """Takes the run folder (locked for the run), then trains in it."""
    from .run_dir import RunFolder
    from .schedule import schedule_warnings

    t_begin = time.perf_counter()
    resume = args.resume is not None
    if resume and (args.config or args.out or args.overwrite or scene_arg(args) is not None
                   or getattr(args, "set", None)):
        raise UserError("--resume RUN_DIR takes the config from the run folder: drop PATH, --config, --data, "
                        "--set, --out and --overwrite")
    if resume:
        out = Path(args.resume)
        folder = RunFolder.open(out, resume=True)
        cfg, synthetic = _resume_setup(args, folder)
    else:
        synthetic = args.config is None and scene_arg(args) is None and not getattr(args, "set", None)
        cfg = _synthetic_setup(args) if synthetic else _config_setup(args)
        out = Path(args.out if args.out else cfg.output.dir)
        folder = RunFolder.open(out, overwrite=args.overwrite)
    with folder:
        if not synthetic:   # the built-in scene's recipe is scaled to --steps, not the user's
            from .recipe import mode_warnings
            for w in schedule_warnings(cfg.train) + mode_warnings(cfg.train):
                warn(w)
        return _train_in(args, stop, folder, cfg, synthetic, resume, t_begin)


def _train_in(args, stop, folder, cfg, synthetic: bool, resume: bool, t_begin: float) -> int:
    from .metrics import check_supersample, evaluate
    from .plot import save_training_plot
    from .trainer import Trainer, TrainingDiverged, check_checkpoint_sizes
    from .warmup import warm_up

    out = folder.path
    train, test = _datasets(cfg, synthetic, folder.path / "config.toml" if resume else args.config)
    steps = cfg.train.steps
    supersample = 1 if synthetic else cfg.data.eval_supersample
    check_supersample(test, supersample, "data.eval_supersample")  # before training, not at the first evaluation
    lpips_net = None if cfg.data.eval_lpips == "none" else cfg.data.eval_lpips
    if lpips_net is not None:   # its weights and the view sizes, before training too
        from . import metrics_lpips
        metrics_lpips.check_sizes(lpips_net, test.cameras)
        metrics_lpips.model(lpips_net)
    bc = _make_backend(cfg.backend)

    eval_steps = sorted({s for s in cfg.output.eval_steps if s <= steps} | {steps})
    ckpt_steps = sorted(s for s in cfg.output.checkpoint_steps if s <= steps)
    skipped = [s for s in list(cfg.output.eval_steps) + list(cfg.output.checkpoint_steps) if s > steps]
    if skipped:
        print(f"note: steps {sorted(set(skipped))} are past train.steps = {steps} and are skipped",
              file=sys.stderr)

    evals: list[dict] = []
    earlier: dict = {}
    start = None
    if resume:
        start = _resume_state(folder, cfg)
        try:
            earlier = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            earlier = {}
        if start is not None and earlier.get("finished") and start[0]["step"] >= steps:
            raise UserError(f"run folder {out}: finished at step {start[0]['step']}; pass --steps N "
                            f"(N > {start[0]['step']}) to train on")
    budget = 0 if synthetic else int(cfg.data.device_image_budget * (1 << 30))
    if start is None:
        trainer = Trainer.from_dataset(train, cfg.train, bc, image_budget=budget)
        if resume:
            print(f"note: {out} holds no checkpoint yet; the run starts again from step 0", file=sys.stderr)
            earlier = {}
    else:
        meta, arrays, path = start
        try:
            check_checkpoint_sizes(meta, train, path)
        except ValueError as exc:
            raise UserError(_clean(str(exc))) from None
        trainer = Trainer(train, cfg.train, bc, arrays, step=meta["step"], scene_extent=meta["scene_extent"],
                          image_budget=budget)
        at = trainer.step_count
        evals = [e for e in earlier.get("evals", []) if e.get("step", 0) <= at]
        trainer.history = [tuple(h) for h in earlier.get("history", []) if h and h[0] <= at]
    scene = "built-in synthetic scene" if synthetic else cfg.data.path
    eval_desc = "synthetic test views" if synthetic else \
        f"{cfg.data.eval_path or cfg.data.path} [{cfg.data.eval_split}]"
    begin = f"from step {trainer.step_count} to {steps}" if resume else f"{steps} steps"
    print(f"splat train: {scene}: {len(train)} views {train.size_summary()} ({_storage_text(trainer)}), "
          f"{trainer.num_gaussians:,} {'Gaussians' if resume else 'initial Gaussians'}, {begin} on "
          f"{trainer.backend}; eval on {len(test)} views of {eval_desc}"
          + (f" (rendered at {supersample}x)" if supersample > 1 else "") + f" -> {out}", flush=True)
    if not resume or args.steps:
        _write_text_config(out / "config.toml", cfg, synthetic)
    _write_cameras(out, train, test)

    seconds = warm_up(train, bc, cfg.train)
    if seconds is not None:
        print(f"compiled the {trainer.backend} kernels in {seconds:.1f} s (not counted as training)", flush=True)
    load_seconds = time.perf_counter() - t_begin
    show = [test.names[i] for i in _pick_views(len(test), cfg.output.render_views)]
    train_seconds = 0.0
    if start is not None:   # as recorded with the checkpoint, else at the last evaluation before it
        recorded = earlier.get("steps") == trainer.step_count and earlier.get("train_seconds") is not None
        train_seconds = float(earlier["train_seconds"] if recorded else evals[-1]["train_seconds"] if evals else 0.0)
    eval_seconds = 0.0
    bar = _progress(steps, not args.quiet)
    task = None
    config_path = earlier.get("config") if resume else \
        (None if args.config is None else str(Path(args.config).resolve()))

    def metrics(final: bool, stopped: str | None = None) -> dict:
        last = evals[-1] if evals else {}
        m = {
            "scene": "synthetic" if synthetic else cfg.data.path,
            "config": config_path,
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
            "eval_size": _largest_size(test),
            "per_view": last.get("per_view", []),
            "evals": evals,
            "history": [list(h) for h in trainer.history],
        }
        if lpips_net is not None:
            m |= {"lpips": last.get("lpips"), "lpips_net": lpips_net}
        if stopped:
            m["stopped"] = stopped
        return m

    def log(msg: str) -> None:
        if bar is not None:
            bar.console.print(msg, highlight=False)
        else:
            print(msg, file=sys.stderr, flush=True)

    def last_checkpoint() -> str:
        done = [p for p in folder.checkpoints()]
        return f"the last checkpoint, {done[-1]}, is finite" if done else "no checkpoint was written"

    live = _live_view(args, trainer, train, test, out, bc)
    if bar is not None:
        bar.start()
        task = bar.add_task("train", total=steps, completed=trainer.step_count, loss=float("nan"),
                            gaussians=trainer.num_gaussians, rate=0.0)
    first_step = trainer.step_count
    try:
        for milestone in sorted(set(eval_steps) | set(ckpt_steps)):
            done = milestone < first_step or (milestone == first_step and (
                milestone not in eval_steps or any(e["step"] == milestone for e in evals)))
            if done:    # before the checkpoint resumed from, or evaluated there already
                continue
            t0 = time.perf_counter()
            while trainer.step_count < milestone and stop.signum is None:
                i = trainer.step_count + 1
                read = i % LOSS_EVERY == 0 or i == milestone
                st = trainer.step(read_loss=read)
                if live is not None:
                    live(trainer)
                if read and bar is not None:
                    rate = (i - first_step) / max(train_seconds + time.perf_counter() - t0, 1e-9)
                    bar.update(task, completed=i, loss=st.loss, gaussians=st.num_gaussians, rate=rate)
            train_seconds += time.perf_counter() - t0
            if stop.signum is not None:
                break
            trainer.check_finite()
            if milestone in ckpt_steps:
                trainer.save_checkpoint(out / f"checkpoint_{milestone}.npz")
            if milestone in eval_steps:
                t0 = time.perf_counter()
                renders = _KeepSome(show)
                ev = evaluate(trainer, test, supersample=supersample, renders=renders,
                              masked=not synthetic and cfg.data.eval_masked, lpips_net=lpips_net)
                if show:
                    step_dir = out / "renders" / f"step_{milestone}"
                    step_dir.mkdir(parents=True, exist_ok=True)
                    for name in show:
                        j = test.names.index(name)
                        _write_png(step_dir / render_files(test.names)[name],
                                   _side_by_side(renders[name], test.images[j]))
                evals.append({"step": milestone, "psnr": ev.psnr, "ssim": ev.ssim,
                              "num_gaussians": trainer.num_gaussians, "train_seconds": train_seconds,
                              "per_view": ev.per_view})
                if lpips_net is not None:
                    evals[-1]["lpips"] = ev.lpips
                eval_seconds += time.perf_counter() - t0
                log(f"step {milestone}: PSNR {ev.psnr:.2f} dB  SSIM {ev.ssim:.4f}  "
                    + ("" if lpips_net is None else f"LPIPS({lpips_net}) {ev.lpips:.4f}  ") +
                    f"{trainer.num_gaussians:,} Gaussians  ({train_seconds:.1f} s training)")
            if milestone in eval_steps or milestone in ckpt_steps:
                write_json(out / "metrics.json", metrics(final=False))
        trainer.check_finite()   # before the final (or the stop's) checkpoint
    except TrainingDiverged as exc:
        if bar is not None:
            bar.stop()
            bar = None
        raise UserError(f"{_clean(exc)}; {last_checkpoint()}; lower the learning rates") from None
    finally:
        if bar is not None:
            bar.stop()
        if live is not None:
            live.close(trainer)

    if stop.signum is not None:
        return _stopped(stop, trainer, out, metrics)

    trainer.save_checkpoint(out / "checkpoint.npz")
    if cfg.output.save_ply:
        trainer.save_ply(out / "point_cloud.ply")
    if cfg.train.exposure:
        trainer.save_exposure(out / "exposure.npy")
    final = evals[-1]
    title = (f"{'synthetic' if synthetic else Path(cfg.data.path).name}: {final['psnr']:.2f} dB PSNR, "
             f"SSIM {final['ssim']:.4f}, {trainer.num_gaussians:,} Gaussians, {steps} steps on "
             f"{trainer.backend} in {train_seconds:.1f} s")
    save_training_plot(out / "training.png", trainer.history, evals, title=title)
    write_json(out / "metrics.json", metrics(final=True))
    if final.get("lpips") is not None:
        print(f"LPIPS({lpips_net}) {final['lpips']:.4f}  on {len(test)} test views")
    print(f"PSNR {final['psnr']:.2f} dB  SSIM {final['ssim']:.4f}  on {len(test)} test views  "
          f"({trainer.num_gaussians:,} Gaussians, {steps} steps, {train_seconds:.1f} s training on "
          f"{trainer.backend}, {time.perf_counter() - t_begin:.1f} s total)")
    print(f"wrote {out}/: metrics.json, checkpoint.npz"
          + (", point_cloud.ply" if cfg.output.save_ply else "") + (", exposure.npy" if cfg.train.exposure else "")
          + ", training.png"
          + (", renders/" if show else ""))
    if stop.signum is not None:   # asked to stop while the final files were written: they are complete
        print(f"splat: {stop.name}: the run had finished", file=sys.stderr)
        return 128 + stop.signum
    return 0


def _stopped(stop: StopSignals, trainer, out: Path, metrics) -> int:
    """The end of a run asked to stop: a checkpoint of the last finished step."""
    step = trainer.step_count
    where = "no checkpoint (no step had finished)"
    if step > 0:
        path = out / f"checkpoint_{step}.npz"
        trainer.save_checkpoint(path)
        write_json(out / "metrics.json", metrics(final=False, stopped=stop.name))
        where = f"wrote {path}"
    print(f"splat: stopped by {stop.name} after step {step}: {where}; continue with: splat train --resume {out}",
          file=sys.stderr, flush=True)
    return 128 + stop.signum
def _live_view(args, trainer, train, test, out, bc):
    """With --view: the viewer served during training (a callable run after each step)."""
    if not args.view:
        return None
    from .viewer.live import LiveView
    live = LiveView(trainer, train, test, out, bc, host=args.view_host, port=args.view_port)
    print(f"viewer: open {live.url} to watch training", file=sys.stderr, flush=True)
    return live


def _write_cameras(out: Path, train, test) -> None:
    """cameras.json in the 3DGS reference's layout, for viewers that show the cameras."""
    from .formats import save_cameras_json
    save_cameras_json(out / "cameras.json", train.cameras, train.names, test.cameras, test.names)


def _write_text_config(path: Path, cfg, synthetic: bool) -> None:
    from .io.atomic import atomic_write_text
    text = cfg.to_toml()
    if synthetic:
        text = SYNTHETIC_MARKER + "\n" + text
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
    _print_image_footprint(cfg, resolved)
    from .recipe import describe, mode_warnings
    for line in describe(cfg.train):
        print(f"# {line}")
    if cfg.data.eval_lpips != "none":
        from . import metrics_lpips
        try:
            metrics_lpips.backbone_path(cfg.data.eval_lpips)
            metrics_lpips.heads_path(cfg.data.eval_lpips)
            print(f"# lpips: {cfg.data.eval_lpips} weights found")
        except (OSError, RuntimeError) as exc:
            warn(f"data.eval_lpips: {_clean(str(exc))} (splat train stops before training)")
    from .schedule import schedule_warnings
    for w in schedule_warnings(cfg.train) + mode_warnings(cfg.train):
        warn(w)
    print(f"{args.config}: OK", file=sys.stderr)
    return 0


def _print_image_footprint(cfg, backend: str) -> None:
    """`# images: ...`: the train split's device footprint against [data] device_image_budget."""
    from .data import load_dataset
    from .trainer import image_bytes
    d = cfg.data
    if d.path is None:
        return
    try:
        train = load_dataset(d.path, d.train_split, frames=d.train_frames, **d.loader_args())
    except (OSError, ValueError) as exc:
        warn(f"data.path: cannot load the train split to report the images' footprint: {_clean(str(exc))}")
        return
    rgb, mask = image_bytes(train)
    budget = int(d.device_image_budget * (1 << 30))
    if budget:
        where = f"streamed from host memory (over the budget {_bytes(budget)})" if rgb + mask > budget else             f"resident (budget {_bytes(budget)})"
    elif backend == "cpu":
        where = "resident"
    else:
        where = "resident unless over half the free device memory at start"
    print(f"# images: {len(train)} train views {train.size_summary()}, {_bytes(rgb + mask)} on the device"
          + (f" ({_bytes(mask)} of masks)" if mask else "") + f": {where}")


# --------------------------------------------------------------------------- render / eval


def _background(text):
    """argparse type: R,G,B in [0, 1]."""
    try:
        vals = tuple(float(v) for v in text.split(","))
    except ValueError:
        vals = ()
    if len(vals) != 3 or not all(0.0 <= v <= 1.0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected R,G,B with values in [0, 1], got {text!r}")
    return vals


def _open_model(args):
    from .render_path import open_model
    source = args.source or args.checkpoint
    if source is None:
        raise UserError("give a run folder, a scene file (.ply, .splat, .spz) or --checkpoint C.npz")
    if args.source and args.checkpoint:
        raise UserError(f"give the model once: {args.source} or --checkpoint {args.checkpoint}")
    bc = _make_backend({"backend": args.backend or "auto"})
    return open_model(source, bc, background=args.background, antialiased=args.antialiased)


def _load_split(args, model, split):
    from .data import load_dataset
    if not args.data:
        raise UserError(f"--path {split} needs the dataset: --data PATH")
    return load_dataset(args.data, split, background=model.background, frames=args.frames)


def _render_cameras(args, model):
    """(cameras, names, dataset or None, label) that `splat render` renders."""
    from .formats import load_cameras_json
    from .render_path import orbit_cameras, orbit_frame, resized
    path = args.path or ("split" if args.data else "orbit")
    if path == "orbit":
        frame = orbit_frame(model.gaussians, [c for _, c, s in model.cameras if s == "train"], up=args.up)
        if not frame.from_cameras and args.up is None:
            print("note: no cameras.json found: the orbit takes -y as up (--up to change)", file=sys.stderr)
        cams = orbit_cameras(frame, args.orbit_frames, args.width, args.height, fov_deg=args.fov,
                             radius_scale=args.radius_scale, elevation_deg=args.elevation)
        return cams, [f"orbit_{i:04d}" for i in range(len(cams))], None, "orbit"
    if path in ("split", "test", "train") and args.data:
        data = _load_split(args, model, args.split if path == "split" else path)
        cams = [resized(c, args.width, args.height) for c in data.cameras]
        files = render_files(data.names)   # 0000.jpg -> 0000.png
        return cams, [files[n][:-len(".png")] for n in data.names], data, f"{args.data} [{data.split}]"
    if path in ("train", "test", "split"):
        split = "test" if path == "test" else "train"
        named = [(n, c) for n, c, s in model.cameras if s == split]
        if not named:
            raise UserError(f"--path {path}: {model.source} has no {split} cameras in a cameras.json; "
                            f"give the dataset: --data PATH")
        label = f"the {split} cameras (cameras.json)"
    else:
        named = load_cameras_json(path)
        label = path
    if not named:
        raise UserError(f"{path}: no cameras")
    from .data import select_frames
    named = [named[i] for i in select_frames(len(named), args.frames)] if args.frames else named
    return [resized(c, args.width, args.height) for _, c in named], [_safe_name(n) for n, _ in named], None, label


def cmd_render(args) -> int:
    from .render_path import render_path
    model = _open_model(args)
    cams, names, data, label = _render_cameras(args, model)
    if args.compare and data is None:
        raise UserError("--compare needs dataset views (--data PATH)")
    base = model.run_dir if model.run_dir is not None else Path(model.source).resolve().parent
    tag = data.split if data is not None else Path(str(args.path or "orbit")).stem
    out = Path(args.out) if args.out else (None if args.video else base / f"renders_{tag}")
    k = args.supersample
    t0 = time.perf_counter()
    if args.compare:
        from .metrics import box_downsample
        out.mkdir(parents=True, exist_ok=True)
        for cam, img, name in zip(cams, data.images, names):
            render = model.renderer.render(cam.scaled(k) if k > 1 else cam, background=model.background)
            _write_png(out / f"{name}.png", _side_by_side(box_downsample(render, k), img))
    else:
        render_path(model.renderer, cams, names, out_dir=out, video=args.video, fps=args.fps, supersample=k,
                    progress=not args.quiet, background=model.background)
    where = " and ".join(str(p) for p in (out, args.video) if p)
    sizes = data.size_summary() if data is not None else f"{cams[0].width}x{cams[0].height}"
    print(f"rendered {len(cams)} views of {label} at {sizes}"
          + (f" (supersample {k})" if k > 1 else "") + (" antialiased" if model.antialiased else "")
          + f" on {model.renderer.backend} in "
          f"{time.perf_counter() - t0:.1f} s -> {where}")
    return 0


def cmd_eval(args) -> int:
    from .metrics import evaluate
    if not args.data:
        raise UserError("splat eval needs the dataset: --data PATH")
    model = _open_model(args)
    data = _load_split(args, model, args.split)
    t0 = time.perf_counter()
    renderer = model.renderer
    if args.exposure:  # the training views' learned colour corrections (splat/exposure.py)
        from .exposure import corrected_renderer
        renderer = corrected_renderer(model, data, args.split)
    ev = evaluate(renderer, data, supersample=args.supersample, masked=args.masked, lpips_net=args.lpips)
    seconds = time.perf_counter() - t0
    lp = (lambda v: f"  LPIPS({args.lpips}) {v:.4f}") if args.lpips else (lambda v: "")
    if args.per_view:
        for v in ev.per_view:
            print(f"  {v['name']}: PSNR {v['psnr']:.2f} dB  SSIM {v['ssim']:.4f}{lp(v.get('lpips'))}")
    print(f"PSNR {ev.psnr:.2f} dB  SSIM {ev.ssim:.4f}{lp(ev.lpips)}  on {len(data)} views of {args.data} [{args.split}]"
          + (f" (supersample {args.supersample})" if args.supersample > 1 else "")
          + (" antialiased" if model.antialiased else "")
          + (" with the learned exposure corrections" if args.exposure else ""))
    if args.json:
        is_ckpt = model.source.lower().endswith(".npz")
        result = ev.to_dict() | {"source": str(Path(model.source).resolve()),
                                 "checkpoint": str(Path(model.source).resolve()) if is_ckpt else None,
                                 "data": str(Path(args.data).resolve()), "split": args.split,
                                 "frames": args.frames, "supersample": args.supersample, "masked": args.masked,
                                 "antialiased": model.antialiased,
                                 "exposure": args.exposure,
                                 "views": len(data), "num_gaussians": model.renderer.num_gaussians,
                                 "step": model.renderer.step_count, "backend": model.renderer.backend,
                                 "seconds": seconds}
        write_json(args.json, result)
    return 0


def cmd_export(args) -> int:
    from . import formats
    scene = formats.load_scene(args.source)
    fmt = args.format or formats.format_for_path(args.out)
    formats.save(args.out, scene.gaussians, fmt)
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(scene.gaussians):,} Gaussians as {fmt} ({size / 1e6:.2f} MB) "
          f"from {scene.source}")
    return 0


def cmd_view(args) -> int:
    from .render_path import open_model
    from .viewer import Viewer
    bc = _make_backend({"backend": args.backend or "auto"})
    model = open_model(args.source, bc, background=args.background, antialiased=args.antialiased)
    cams = list(model.cameras)
    if args.data:
        from .data import load_dataset
        test = load_dataset(args.data, args.split, background=model.background)
        cams = [c for c in cams if c[2] != "test"] + [(n, c, "test") for n, c in zip(test.names, test.cameras)]
    save_dir = Path(args.save_dir) if args.save_dir else (model.run_dir or Path.cwd())
    viewer = Viewer(model.gaussians, cameras=cams, backend_config=bc, background=model.background,
                    antialiased=model.antialiased,
                    host=args.host, port=args.port, up=args.up, save_dir=save_dir, max_side=args.max_resolution,
                    max_fps=args.max_fps).start()
    print(f"splat view: {len(model.gaussians):,} Gaussians of {model.source}, {len(cams)} cameras; "
          f"open {viewer.url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        viewer.stop()


def cmd_bench(args) -> int:
    from . import bench
    return int(bench.main(args.bench_args) or 0)


# --------------------------------------------------------------------------- parser / main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="splat", description="3D Gaussian Splatting trainer.")
    from . import __version__
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
    t.add_argument("--out", metavar="DIR", help=f"run folder (default: output.dir, or {SYNTHETIC_OUT})")
    t.add_argument("--backend", choices=BACKENDS, help="override backend.backend (default auto)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--overwrite", action="store_true",
                   help="replace the run already in the run folder (its files are removed first)")
    t.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its newest checkpoint (its config.toml; "
                        "--steps N trains on to N)")
    t.add_argument("--view", action="store_true", help="serve the browser viewer during training (splat-gs[view])")
    t.add_argument("--view-port", type=positive_int, default=8080, metavar="PORT", help="viewer port (default 8080)")
    t.add_argument("--view-host", default="127.0.0.1", metavar="HOST", help="viewer address (default 127.0.0.1)")
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("check", help="validate a config and show it resolved (no config: the backends here)",
                       description="Print the resolved config and the backend's warnings, or every error. "
                                   "Without --config: each backend's availability on this machine and what "
                                   "backend 'auto' picks.")
    c.add_argument("--config", metavar="X.toml")
    c.set_defaults(func=cmd_check)

    def model_args(q):
        q.add_argument("source", nargs="?", metavar="RUN_DIR|FILE",
                       help="a run folder, a scene file (.ply, compressed .ply, .splat, .spz) or a checkpoint")
        q.add_argument("--checkpoint", metavar="C.npz", help="a checkpoint written by splat train (or any SOURCE)")
        q.add_argument("--data", metavar="PATH", help="scene folder (Blender or COLMAP)")
        q.add_argument("--split", default="test", help="split to use (default test)")
        q.add_argument("--frames", metavar="SPEC", help="subset of the views, e.g. 0::10 or 3")
        q.add_argument("--supersample", type=positive_int, default=1, metavar="K",
                       help="render at K times the image size and box-average down")
        q.add_argument("--background", type=_background, metavar="R,G,B",
                       help="background colour (default: the run's, else white)")
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
    e.add_argument("--per-view", action="store_true", help="print every view's values")
    e.add_argument("--masked", action="store_true",
                   help="leave out the pixels the views' masks exclude (as [data] eval_masked = true)")
    e.add_argument("--exposure", action="store_true",
                   help="apply the run's learned per-view colour corrections ([train] exposure = true); "
                        "training views only (--split train): test views have none")
    e.set_defaults(func=cmd_eval)

    v = sub.add_parser("view", help="look at a run or a scene file in the browser (needs viser: splat-gs[view])",
                       description="Serve a browser viewer of a run folder, scene file or checkpoint: splat's "
                                   "renders of the scene, the training (and test) cameras, jump to a view, "
                                   "save an image.")
    v.add_argument("source", metavar="RUN_DIR|FILE", help="a run folder, a scene file or a checkpoint")
    v.add_argument("--data", metavar="PATH", help="dataset, to offer its --split views as test cameras")
    v.add_argument("--split", default="test", help="the dataset split shown (default test)")
    v.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1; 0.0.0.0 for all)")
    v.add_argument("--port", type=positive_int, default=8080, help="port (default 8080; the next free one if taken)")
    v.add_argument("--up", choices=("+x", "-x", "+y", "-y", "+z", "-z"),
                   help="up axis (default: the training cameras' mean up, else -y)")
    v.add_argument("--max-resolution", type=positive_int, default=1024, metavar="PX",
                   help="longest side of the rendered image (default 1024; a slider in the page too)")
    v.add_argument("--max-fps", type=float, default=30.0, help="render rate cap (default 30)")
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
    _warnings_as_lines()
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
        return 1
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
