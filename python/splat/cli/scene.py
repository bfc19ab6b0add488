"""`splat render`, `splat eval`, `splat export`, `splat view` and `splat bench`: the commands
that open a trained scene (run folder, checkpoint or scene file)."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from ._common import write_json
from ._data import render_stems
from ._shared import SYNTHETIC_LABEL, UserError, _clean, _make_backend, _side_by_side, _write_png, is_builtin_run


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
    from ..render_path import open_model
    source = args.source or args.checkpoint
    if source is None:
        raise UserError("give a run folder, a scene file (.ply, .splat, .spz) or --checkpoint C.npz")
    if args.source and args.checkpoint:
        raise UserError(f"give the model once: {args.source} or --checkpoint {args.checkpoint}")
    # the render / eval line names the backend; why 'auto' is the CPU is said where asked
    bc = _make_backend({"backend": args.backend or "auto"}, explain_fallback=args.backend is not None)
    return open_model(source, bc, background=args.background, antialiased=args.antialiased)


BUILTIN = object()   # _run_data's answer for a run of the built-in scene


def _run_data(model):
    """The [data] table of the run `model` comes from (its config.toml), BUILTIN for a
    run of the built-in scene, or None (a scene file outside a run)."""
    from ..config import ConfigError, load_config
    path = None if model.run_dir is None else Path(model.run_dir) / "config.toml"
    if path is None or not path.is_file():
        return None
    if is_builtin_run(path):
        return BUILTIN
    try:
        data = load_config(path, check_paths=False).data
    except ConfigError as exc:
        from ._common import warn
        warn(f"{path}: not used to find the dataset ({_clean(str(exc))})")
        return None
    return data if data.path is not None else None


def _dataset_source(args, model, split):
    """(folder, split, load_dataset keyword arguments) of the views a command reads:
    --data, --split, --frames and --downscale where given, else what the run's
    config.toml trained and evaluated on (its eval split for the default split), so
    `splat eval RUN_DIR` repeats the run's own evaluation. The folder is BUILTIN for
    a run of the built-in scene (its views are made again: _load_views)."""
    run = _run_data(model)
    kwargs = dict(background=model.background, frames=args.frames)
    if run is BUILTIN and args.data is None:
        if getattr(args, "downscale", None) is not None:
            raise UserError(f"--downscale: {model.run_dir} is a run of the {SYNTHETIC_LABEL}, whose views are "
                            f"made at their one size; give --data PATH to evaluate on a dataset folder")
        return BUILTIN, split or "test", kwargs
    if run is not None and run is not BUILTIN:
        kwargs.update({k: v for k, v in run.loader_args().items() if k != "background"})
        split = split or run.eval_split
        if split == run.eval_split:
            folder, frames = run.eval_path or run.path, run.test_frames
        else:
            folder, frames = run.path, run.train_frames if split == run.train_split else None
        if args.frames is None:
            kwargs["frames"] = frames
    else:
        split, folder = split or "test", None
    if args.data is not None:
        folder = args.data
    elif folder is None:
        raise UserError(f"{model.source} is not part of a run with a dataset: give --data PATH")
    elif not Path(folder).is_dir():
        raise UserError(f"{folder}, the dataset of {Path(model.run_dir) / 'config.toml'}, is not an existing "
                        f"folder: give --data PATH")
    if getattr(args, "downscale", None) is not None:
        kwargs["downscale"] = args.downscale
    if model.background_default:   # a scene file outside a run: the dataset's own default background
        from ..data import default_background
        model.use_background(default_background(folder, split, kwargs.get("format", "auto")))
        kwargs["background"] = model.background
    return folder, split, kwargs


def _load_views(args, model, split):
    """(dataset, label of where its views come from, folder or BUILTIN, split, kwargs) of
    `split` (None: the default split) that --data / the run name."""
    folder, split, kwargs = _dataset_source(args, model, split)
    if folder is BUILTIN:
        from ..data import synthetic
        if split not in ("train", "test"):
            raise UserError(f"--split {split}: the {SYNTHETIC_LABEL} has the splits train and test")
        train, test = synthetic.make_scene(background=model.background)
        data = train if split == "train" else test
        if kwargs["frames"] is not None:
            data = data.subset(kwargs["frames"])
        return data, f"the {SYNTHETIC_LABEL}", folder, split, kwargs
    from ..data import load_dataset
    return load_dataset(folder, split, **kwargs), str(folder), folder, split, kwargs


def _load_split(args, model, split):
    """The views of `split` (None: the default split) that --data / the run name."""
    return _load_views(args, model, split)[0]


def _render_cameras(args, model):
    """(cameras, names, dataset or None, label) that `splat render` renders."""
    from ..formats import load_cameras_json
    from ..render_path import orbit_cameras, orbit_frame, resized
    path = args.path or ("split" if args.data else "orbit")
    if path == "orbit":
        frame = orbit_frame(model.gaussians, [c for _, c, s in model.cameras if s == "train"], up=args.up)
        if not frame.from_cameras and args.up is None:
            print("note: no cameras.json found: the orbit takes -y as up (--up to change)", file=sys.stderr)
        cams = orbit_cameras(frame, args.orbit_frames, args.width, args.height, fov_deg=args.fov,
                             radius_scale=args.radius_scale, elevation_deg=args.elevation)
        return cams, [f"orbit_{i:04d}" for i in range(len(cams))], None, "orbit"
    if path in ("split", "test", "train") and (args.data or args.compare):   # --compare: the run's views
        data, where, _, _, _ = _load_views(args, model, args.split if path == "split" else path)
        cams = [resized(c, args.width, args.height) for c in data.cameras]
        return cams, render_stems(data.names), data, f"{where} [{data.split}]"   # 0000.jpg -> 0000
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
    from ..data import select_frames
    named = [named[i] for i in select_frames(len(named), args.frames)] if args.frames else named
    return [resized(c, args.width, args.height) for _, c in named], render_stems(n for n, _ in named), None, label


def _output_file(flag: str, path) -> None:
    """Refuse, before any work, an output file that cannot be written: a folder, or
    one inside a path whose parent is a file."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {path}: is a folder; give a file name")
    parent = next((q for q in p.parents if q.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UserError(f"{flag} {path}: {parent} is a file, not a folder")


def _output_folder(flag: str, path) -> None:
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise UserError(f"{flag} {path}: exists and is not a folder")


def cmd_render(args) -> int:
    from ..render_path import render_path
    _output_folder("--out", args.out)
    _output_file("--video", args.video)
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
        from ..metrics import box_downsample
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


@contextlib.contextmanager
def _view_progress(label: str, total: int, enabled: bool):
    """A progress callable (done, total) drawing a bar on stderr while the block runs
    (None when disabled or stderr is no terminal: a log gets no bar); the bar is gone
    when the block ends."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from ..render_path import progress_bar
    with progress_bar(label, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done, _total: bar.update(task, completed=done)


def cmd_eval(args) -> int:
    from ..metrics import evaluate
    _output_file("--json", args.json)
    if args.exposure and args.fit_exposure:
        raise ValueError("[splat] --exposure, --fit-exposure: choose one (the learned corrections of training "
                         "views, or corrections fitted on each view's left half)")
    model = _open_model(args)
    data, where, folder, split, kwargs = _load_views(args, model, args.split)
    t0 = time.perf_counter()
    renderer = model.renderer
    if args.exposure:  # the training views' learned colour corrections (splat/exposure.py)
        from ..exposure import corrected_renderer
        renderer = corrected_renderer(model, data, split)
    with _view_progress("eval", len(data), not args.quiet) as progress:
        ev = evaluate(renderer, data, supersample=args.supersample, masked=args.masked, lpips_net=args.lpips,
                      progress=progress, fit_exposure=args.fit_exposure)
    seconds = time.perf_counter() - t0
    lp = (lambda v: f"  LPIPS({args.lpips}) {v:.4f}") if args.lpips else (lambda v: "")
    if args.per_view:
        for v in ev.per_view:
            print(f"  {v['name']}: PSNR {v['psnr']:.2f} dB  SSIM {v['ssim']:.4f}{lp(v.get('lpips'))}")
    views = f"{len(data)} view{'s' if len(data) != 1 else ''}"
    print(f"PSNR {ev.psnr:.2f} dB  SSIM {ev.ssim:.4f}{lp(ev.lpips)}  on {views} of {where} [{split}]"
          + (f" at downscale {kwargs['downscale']}" if kwargs.get("downscale", 1) != 1 else "")
          + (f" (supersample {args.supersample})" if args.supersample > 1 else "")
          + (" antialiased" if model.antialiased else "")
          + (" with the chunked stop" if model.blend_stop == "chunk" else "")
          + (" with the learned exposure corrections" if args.exposure else "")
          + (" on right halves, exposure fitted on the left" if args.fit_exposure else "")
          + f" ({model.renderer.backend})")
    if args.json:
        is_ckpt = model.source.lower().endswith(".npz")
        result = ev.to_dict() | {"source": str(Path(model.source).resolve()),
                                 "checkpoint": str(Path(model.source).resolve()) if is_ckpt else None,
                                 "data": "synthetic" if folder is BUILTIN else str(Path(folder).resolve()), "split": split,
                                 "frames": kwargs["frames"], "downscale": kwargs.get("downscale", 1), "supersample": args.supersample, "masked": args.masked,
                                 "antialiased": model.antialiased, "blend_stop": model.blend_stop,
                                 "background": list(model.background),
                                 "exposure": args.exposure, "fit_exposure": args.fit_exposure,
                                 "views": len(data), "num_gaussians": model.renderer.num_gaussians,
                                 "step": model.renderer.step_count, "backend": model.renderer.backend,
                                 "seconds": seconds}
        write_json(args.json, result)
    return 0


def cmd_export(args) -> int:
    from .. import formats
    scene = formats.load_scene(args.source)
    fmt = args.format or formats.format_for_path(args.out)
    _output_file("--out", args.out)
    _check_export_target(args.out, fmt, scene.source)
    formats.save(args.out, scene.gaussians, fmt)
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(scene.gaussians):,} Gaussians as {fmt} ({size / 1e6:.2f} MB) "
          f"from {scene.source}")
    return 0


def _check_export_target(out, fmt: str, source) -> None:
    """Refuse an --out that would lose data or mislead a reader: the file being
    read, or a name whose extension says another format (readers go by the name;
    a compressed PLY may be named .ply, as SuperSplat writes it)."""
    from .. import formats
    if Path(out).resolve() == Path(source).resolve():
        raise UserError(f"--out {out} is the file being read ({source}); write to another file")
    try:
        named = formats.format_for_path(out)
    except ValueError:  # no known extension: the name says nothing
        return
    if named != fmt and not (fmt == "compressed-ply" and named == "ply"):
        ext = {"ply": ".ply", "compressed-ply": ".compressed.ply", "splat": ".splat", "spz": ".spz"}[fmt]
        raise UserError(f"--out {out}: the name says {named} but --format is {fmt}; name it *{ext}")


def cmd_view(args) -> int:
    from ..render_path import open_model
    from ..viewer import Viewer
    from ..viewer.server import check_address
    args.port = check_address(args.host, args.port)   # before the model loads; the first free one if unset
    bc = _make_backend({"backend": args.backend or "auto"}, explain_fallback=args.backend is not None)
    model = open_model(args.source, bc, background=args.background, antialiased=args.antialiased)
    cams = list(model.cameras)
    if args.data:
        test = _load_split(args, model, args.split)
        cams = [c for c in cams if c[2] != "test"] + [(n, c, "test") for n, c in zip(test.names, test.cameras)]
    save_dir = Path(args.save_dir) if args.save_dir else (model.run_dir or Path.cwd())
    viewer = Viewer(model.gaussians, cameras=cams, backend_config=bc, background=model.background,
                    antialiased=model.antialiased, blend_stop=model.blend_stop,
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
    from .. import bench
    return int(bench.main(args.bench_args) or 0)
