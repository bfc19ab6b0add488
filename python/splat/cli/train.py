"""`splat train`: a new run (built-in scene, a config, a scene folder) or `--resume`,
in a locked run folder, with evaluations, checkpoints and the final outputs written atomically."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from ._common import warn, write_json
from ._data import render_stems, scene_arg
from ..stop_signals import StopSignals
from ._shared import (LOSS_EVERY, SYNTHETIC_LABEL, SYNTHETIC_MARKER, SYNTHETIC_OUT, SYNTHETIC_SIZE,
                      SYNTHETIC_STEPS, UserError, is_builtin_run, _bytes, _clean,
                      _command_line_overrides, _config_setup, _make_backend, _pick_views, _progress, _side_by_side,
                      _write_png)


def _synthetic_setup(args):
    """The config of the built-in scene (its datasets: _datasets): its recipe scaled to
    --steps (or --set train.steps), then the other --set overrides written over it and
    checked like a config file's. [data] keys have no scene folder to apply to."""
    from ._data import parse_overrides
    from ..config import Config, ConfigError, OutputConfig, apply_overrides
    from ..data import synthetic
    overrides = parse_overrides(getattr(args, "set", None))
    if getattr(args, "fast", False) or "preset" in overrides.get("train", {}):
        what = "--fast" if getattr(args, "fast", False) else "--set train.preset"
        raise UserError(f"{what}: the built-in scene's recipe is already scaled to its --steps; a preset is for a "
                        f"scene folder PATH (or --config X.toml)")
    if overrides.get("data"):
        key = next(iter(overrides["data"]))
        raise UserError(f"--set data.{key}: the built-in scene has no [data] to set; give a scene folder PATH "
                        f"(or --config X.toml)")
    asked = overrides.get("train", {}).get("steps")
    valid = isinstance(asked, int) and not isinstance(asked, bool) and asked >= 1
    steps = args.steps or (asked if valid else SYNTHETIC_STEPS)
    cfg = Config()
    cfg.train = synthetic.default_train_config(steps, image_size=SYNTHETIC_SIZE)
    every = max(1, steps // 8)
    cfg.output = OutputConfig(dir=SYNTHETIC_OUT, eval_steps=list(range(every, steps + 1, every)),
                              checkpoint_steps=[], render_views=4, save_ply=True)
    cfg.backend = {"backend": "auto"}
    if overrides:
        raw = apply_overrides(cfg.to_dict(), overrides)
        raw["data"] = {k: v for k, v in raw["data"].items() if v is not None}
        try:
            cfg = Config.from_dict(raw)
        except ConfigError as exc:
            raise ConfigError(exc.errors, source="--set") from None
    cfg.train.steps = steps
    if args.backend:
        cfg.backend = dict(cfg.backend, backend=args.backend)
    return cfg


def _builtin_scene(args) -> bool:
    """Whether the command line trains (or checks) the built-in scene: no config, no scene
    folder (PATH / --data) and no --set data.path."""
    sets_path = any(item.partition("=")[0].strip() == "data.path" for item in getattr(args, "set", None) or [])
    return args.config is None and scene_arg(args) is None and not sets_path


def _load_split(cfg, key: str, path, name: str, frames, source=None):
    """One split of a run's scene; a frame selection that selects nothing names its
    config key (data.train_frames, data.test_frames), and `source` the config file."""
    from ..data import load_dataset
    try:
        return load_dataset(path, name, frames=frames, **cfg.data.loader_args())
    except ValueError as exc:
        if not str(exc).startswith("[splat] frames: "):
            raise
        where = f"{source}: " if source else ""
        raise ValueError(f"[splat] {where}data.{key}: {str(exc).removeprefix('[splat] frames: ')}") from None


def _train_dataset(cfg, synthetic: bool):
    """The training views alone (the ranks after the first)."""
    if synthetic:
        from ..data import synthetic as syn
        return syn.make_scene()[0]
    d = cfg.data
    return _load_split(cfg, "train_frames", d.path, d.train_split, d.train_frames)


def _datasets(cfg, synthetic: bool, source=None):
    """(train dataset, eval dataset) of a run; `source`: the config file errors name."""
    if synthetic:
        from ..data import synthetic as syn
        return syn.make_scene()
    d = cfg.data
    return (_load_split(cfg, "train_frames", d.path, d.train_split, d.train_frames, source),
            _load_split(cfg, "test_frames", d.eval_path or d.path, d.eval_split, d.test_frames, source))


def _image_budget(cfg, synthetic: bool) -> int:
    """Device bytes the training images may take (0: the backend's default)."""
    return 0 if synthetic else int(cfg.data.device_image_budget * (1 << 30))


def _largest_size(ds) -> list:
    """[width, height] of the dataset's largest view."""
    return list(max(ds.sizes, key=lambda s: (s[0] * s[1], s)))


def _capture_note(given, trained) -> str:
    """The note for the keys splat.schedule.capture_recipe changed from `given` (the run's
    config) to `trained` (the trainer's recipe); "" when it changed none."""
    parts, keys = [], []
    if trained.densify_grad_threshold != given.densify_grad_threshold:
        parts.append(f"clone / split above a gradient of {trained.densify_grad_threshold:g}")
        keys.append("train.densify_grad_threshold")
    if trained.densify_until != given.densify_until:
        parts.append(f"densification until step {trained.densify_until}")
        keys.append("train.densify_until")
    if trained.lr_final_fraction != given.lr_final_fraction:
        parts.append(f"every learning rate but the means' decaying to {trained.lr_final_fraction:g}x after "
                     f"densification")
        keys.append("train.lr_final_fraction")
    if trained.prune_near != given.prune_near:   # capture_keys sets it only where no resets come
        parts.append(f"what a view sees large from nearer than {trained.prune_near:g}x the extent pruned while "
                     f"densifying")
        keys.append("train.prune_near")
    if trained.num_downscales != given.num_downscales or trained.resolution_schedule != given.resolution_schedule:
        parts.append(f"views at 1/{1 << trained.num_downscales} size at first, doubling every "
                     f"{trained.resolution_schedule} steps")
        keys += ["train.num_downscales", "train.resolution_schedule"]
    return (f"note: a capture's recipe: {', '.join(parts)} ({' / '.join(keys)}: set them yourself)"
            if parts else "")


def _random_start_note(train) -> str:
    """The note for what a scene that starts from random points gets from its preset
    (TrainConfig.for_random_start) besides the keys the config sets; "" for none."""
    from ..config import PRESETS_RANDOM_START
    extra = PRESETS_RANDOM_START.get(train.preset) or {}
    given = getattr(train, "_given", None)
    if given is None or "strategy" in extra:   # the fast preset's MCMC recipe is printed by splat check
        return ""
    parts, keys = [], []
    if "batch_views" in extra and "batch_views" not in given and train.batch_views > 1:
        parts.append(f"{train.batch_views} views a step")
        keys.append("train.batch_views")
    if "prune_low_weight" in extra and "prune_low_weight" not in given and train.prune_low_weight > 0 \
            and train.strategy == "default" and train.densify_until <= train.steps:
        parts.append(f"the {train.prune_low_weight:.0%} of the Gaussians that blend least pruned at step "
                     f"{train.densify_until}")
        keys.append("train.prune_low_weight")
    return (f"note: a scene that starts from random points: {', '.join(parts)} ({' / '.join(keys)}: set them "
            f"yourself)" if parts else "")


def _storage_text(trainer) -> str:
    """Where the training images live, e.g. "images 1.23 GiB on the device"."""
    st = trainer.image_storage
    budget = f", budget {_bytes(st['budget_bytes'])}" if st["budget_bytes"] else ""
    if st["streamed"]:
        return (f"images {_bytes(st['image_bytes'])} streamed from host memory{budget}, "
                f"{_bytes(st['device_bytes'])} on the device")
    return f"images {_bytes(st['image_bytes'])} on the device{budget}"


class _KeepSome(dict):
    """A dict that only keeps the keys it was told to (for evaluate(renders=...))."""

    def __init__(self, keep):
        super().__init__()
        self.keep = set(keep)

    def __setitem__(self, key, value):
        if key in self.keep:
            super().__setitem__(key, value)


def _resume_setup(args, folder):
    """(config, synthetic) of the run in `folder`, --steps, --backend and --data applied."""
    from ..config import ConfigError, load_config
    from ..run_dir import CONFIG_NAME
    path = folder.path / CONFIG_NAME
    synthetic = is_builtin_run(path)
    moved = None if args.data is None else {"data": {"path": os.path.abspath(os.path.expanduser(args.data))}}
    if moved and synthetic:
        raise UserError(f"{path}: the built-in scene's run has no dataset for --data to replace")
    try:
        cfg = load_config(path, check_paths=not synthetic, overrides=moved)
    except ConfigError as exc:
        missing = [e for e in exc.errors if e.startswith(("data.path:", "data.eval_path:"))]
        if moved is None and missing:
            raise UserError(f"{path}: {_clean(missing[0])}; if the scene moved, give its new folder: "
                            f"--resume {folder.path} --data NEW_PATH") from None
        raise
    _keys_added_as_before(cfg, path)
    return _command_line_overrides(cfg, args, path), synthetic


def _size_note(level: int) -> str:
    """The progress bar's note while the resolution schedule trains below full size."""
    return f"  views at 1/{2 ** level} size" if level else ""


def _keys_added_as_before(cfg, path) -> None:
    """A run config written before a [train] key existed keeps what that run did
    (TRAIN_KEYS_ADDED), as its checkpoints do."""
    from ..config import _read_toml
    from ..trainer import TRAIN_KEYS_ADDED
    written = ((_read_toml(path)[0] or {}).get("train") or {})   # load_config has read it already
    for key, value in TRAIN_KEYS_ADDED.items():
        if key not in written:
            setattr(cfg.train, key, value)


def _resume_state(folder, cfg):
    """(header, arrays, path) of the newest usable checkpoint of the run, or None to
    start from step 0 where the run has nothing to lose (killed before its first
    checkpoint). Refuses, changing nothing, a run whose checkpoints cannot be
    continued from or whose results have no checkpoint, and a checkpoint of
    another recipe."""
    newest, skipped = folder.newest_checkpoint(sh_degree=cfg.train.sh_degree)
    again = f"to start it again from step 0: splat train --resume {folder.path} --overwrite"
    if newest is None:
        if skipped:
            path, why = skipped[-1]
            more = f" (and {len(skipped) - 1} more unusable)" if len(skipped) > 1 else ""
            why = _clean(why).removeprefix(f"checkpoint {path}: ")
            raise UserError(f"{path}: {why}; the run has no checkpoint to resume from{more}; {again}")
        done = [n for n in ("point_cloud.ply", "exposure.npy") if (folder.path / n).exists()]
        if done:
            raise UserError(f"run folder {folder.path}: holds {done[0]} but no checkpoint to resume from; {again}")
        return None
    for path, why in skipped:
        warn(f"skipping {path}: {_clean(why)}")
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
    from .train_ranks import follow, launch, rank_group
    if args.gpus and args.gpus > 1 and "RANK" not in os.environ:
        return launch(args)
    group = rank_group(args)   # one of several ranks (--gpus, torchrun): splat.parallel
    with StopSignals() as stop:
        if group is None:
            return _train(args, stop)
        with group:
            return follow(args, group, stop) if group.rank > 0 else _train(args, stop, group)


def _train(args, stop: StopSignals, group=None) -> int:
    """Takes the run folder (locked for the run), then trains in it."""
    from ..run_dir import RunFolder
    from ..recipe import recipe_warnings

    t_begin = time.perf_counter()
    resume = args.resume is not None
    if args.view:   # before the run folder is taken: a missing extra or a bad address is not a run
        from ..viewer.server import check_address, require_viser
        require_viser()
        args.view_port = check_address(args.view_host, args.view_port)   # the first free one if unset
    if resume and (args.config or args.out or args.scene is not None or getattr(args, "set", None)
                   or getattr(args, "fast", False)):
        raise UserError("--resume RUN_DIR takes the config from the run folder: drop PATH, --config, --set, "
                        "--fast and --out (--data NEW_PATH: the scene folder, if it moved)")
    if resume:
        out = Path(args.resume)
        folder = RunFolder.open(out, resume=True)
        cfg, synthetic = _resume_setup(args, folder)
    else:
        synthetic = _builtin_scene(args)
        cfg = _synthetic_setup(args) if synthetic else _config_setup(args)
        out = Path(args.out if args.out else cfg.output.dir)
        folder = RunFolder.open(out, overwrite=args.overwrite)
    with folder:
        if not synthetic:   # the built-in scene's recipe is scaled to --steps, not the user's
            from ._data import config_dataset_format
            for w in recipe_warnings(cfg.train, config_dataset_format(cfg)):
                warn(w)
        try:
            return _train_in(args, stop, folder, cfg, synthetic, resume, t_begin, group)
        except BaseException:
            # A new run that stops before it has any result (a dataset, kernel or viewer
            # error at setup) takes its config.toml and cameras.json with it, so the same
            # command can run again without --overwrite.
            if not resume and not folder.holds_results():
                folder.remove_run_files()
            raise


def run_milestones(cfg) -> tuple[list, list]:
    """The steps a run of `cfg` evaluates at (its eval_steps up to train.steps, and the last
    step) and saves checkpoints at (its checkpoint_steps up to train.steps)."""
    steps = cfg.train.steps
    return (sorted({s for s in cfg.output.eval_steps if s <= steps} | {steps}),
            sorted(s for s in cfg.output.checkpoint_steps if s <= steps))


def _train_in(args, stop, folder, cfg, synthetic: bool, resume: bool, t_begin: float, group=None) -> int:
    from ..config import OutputConfig
    from ..metrics import check_supersample, evaluate
    from ..plot import save_training_plot
    from ..trainer import Trainer, TrainingDiverged, check_checkpoint_sizes, reads_loss
    from ..warmup import warm_up

    out = folder.path
    train, test = _datasets(cfg, synthetic, folder.path / "config.toml" if resume else args.config)
    steps = cfg.train.steps
    supersample = 1 if synthetic else cfg.data.eval_supersample
    check_supersample(test, supersample, "data.eval_supersample")  # before training, not at the first evaluation
    lpips_net = None if cfg.data.eval_lpips == "none" else cfg.data.eval_lpips
    if lpips_net is not None:   # its weights and the view sizes, before training too
        from .. import metrics_lpips
        metrics_lpips.check_sizes(lpips_net, test.cameras)
        metrics_lpips.model(lpips_net)
    bc = _make_backend(cfg.backend)
    ranks = 1 if group is None else group.world_size
    if group is not None:
        from ..parallel import rank_backend_config
        bc = rank_backend_config(bc, group)
        cfg.train = cfg.train.one_view_a_rank()   # the ranks make the batch, a view each

    eval_steps, ckpt_steps = run_milestones(cfg)
    # The default evaluation steps (7000, 30000) past a shorter run (the fast preset's) go unsaid.
    asked_evals = [] if cfg.output.eval_steps == OutputConfig().eval_steps else list(cfg.output.eval_steps)
    skipped = [s for s in asked_evals + list(cfg.output.checkpoint_steps) if s > steps]
    if skipped:
        print(f"note: steps {sorted(set(skipped))} are past train.steps = {steps} and are skipped",
              file=sys.stderr)

    evals: list[dict] = []
    earlier: dict = {}
    start = None
    capture_note = ""   # a resumed run trains its recorded recipe
    restart = resume and args.overwrite   # the run's config, from step 0: its results are replaced
    if resume:
        try:
            earlier = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            earlier = {}
    if restart:
        for aside in folder.restart(cfg.train.sh_degree):
            warn(f"kept {aside.with_suffix('')} as {aside.name}: it cannot be read")
        earlier = {"config": earlier.get("config")} if isinstance(earlier, dict) else {}
        print(f"note: {out}: the run starts again from step 0 (--overwrite)", file=sys.stderr)
    elif resume:
        start = _resume_state(folder, cfg)
        if start is not None and earlier.get("finished") and start[0]["step"] >= steps:
            raise UserError(f"run folder {out}: finished at step {start[0]['step']}; pass --steps N "
                            f"(N > {start[0]['step']}) to train on")
    budget = _image_budget(cfg, synthetic)
    # Before the trainer: the warm-up trains on two of the views, which the trainer
    # then drops from the dataset as it copies them (one copy of the images on the host).
    seconds = warm_up(train, bc, cfg.train)
    if start is None:
        trainer = Trainer.from_dataset(train, cfg.train, bc, image_budget=budget, release_images=True)
        capture_note = _capture_note(cfg.train, trainer.config) or _random_start_note(cfg.train)
        cfg.train = trainer.config   # the recipe as the scene gets it (config.toml records it)
        if resume and not restart:
            print(f"note: {out} holds no checkpoint yet; the run starts again from step 0", file=sys.stderr)
            earlier = {}
    else:
        meta, arrays, path = start
        try:
            check_checkpoint_sizes(meta, train, path)
        except ValueError as exc:
            raise UserError(_clean(str(exc))) from None
        trainer = Trainer(train, cfg.train, bc, arrays, step=meta["step"], scene_extent=meta["scene_extent"],
                          image_budget=budget, release_images=True)
        at = trainer.step_count
        evals = [e for e in earlier.get("evals", []) if e.get("step", 0) <= at]
        trainer.history = [tuple(h) for h in earlier.get("history", []) if h and h[0] <= at]
    # Several ranks: the others start from this state; updates of one view per rank.
    runner = trainer
    if group is not None:
        from .train_ranks import hand_out_start
        runner = hand_out_start(args, group, cfg, synthetic, trainer, train)
    scene = SYNTHETIC_LABEL if synthetic else cfg.data.path
    eval_desc = "synthetic test views" if synthetic else \
        f"{cfg.data.eval_path or cfg.data.path} [{cfg.data.eval_split}]"
    begin = f"from step {trainer.step_count} to {steps}" if resume else f"{steps} steps"
    # The run's record first, then the announcement: once "splat train:" is printed, the
    # folder can be resumed whatever kills the process.
    if not resume or args.steps or args.data:
        cfg.output.dir = str(out.resolve())   # the run's config names the run folder it is in (--out too)
        _write_text_config(out / "config.toml", cfg, synthetic)
    _write_cameras(out, train, test)
    print(f"splat train: {scene}: {len(train)} views {train.size_summary()} ({_storage_text(trainer)}), "
          f"{trainer.num_gaussians:,} {'Gaussians' if resume else 'initial Gaussians'}, {begin} on "
          f"{trainer.backend}" + (f" x {ranks} ranks ({runner.exchange} exchange)" if ranks > 1 else "") + f"; eval on {len(test)} views of {eval_desc}"
          + (f" (rendered at {supersample}x)" if supersample > 1 else "") + f" -> {out}", flush=True)
    if cfg.train.opacity_reset == "auto" and cfg.train.strategy == "default" and not trainer.opacity_resets:
        print("note: no opacity resets: a capture whose cameras look at an object (train.opacity_reset = "
              "\"auto\"; \"on\" keeps them)", flush=True)
    if capture_note:
        print(capture_note, flush=True)

    if seconds is not None:
        print(f"compiled the {trainer.backend} kernels in {seconds:.1f} s (not counted as training)", flush=True)
    load_seconds = time.perf_counter() - t_begin
    show = [test.names[i] for i in _pick_views(len(test), cfg.output.render_views)]
    train_seconds = 0.0
    earlier_total = 0.0     # the wall time of the invocations before this one (a resumed run)
    if start is not None:   # as recorded with the checkpoint, else at the last evaluation before it
        recorded = earlier.get("steps") == trainer.step_count and earlier.get("train_seconds") is not None
        train_seconds = float(earlier["train_seconds"] if recorded else evals[-1]["train_seconds"] if evals else 0.0)
        before = earlier.get("total_seconds")
        if not isinstance(before, (int, float)):   # written before total_seconds was recorded
            before = sum(float(earlier.get(k) or 0.0) for k in ("train_seconds", "load_seconds", "eval_seconds"))
        earlier_total = max(float(before), train_seconds)
    resumed_seconds = train_seconds     # training time up to the step resumed from

    def total_seconds() -> float:
        """Wall time of the whole run: the earlier invocations' and this one's so far."""
        return earlier_total + time.perf_counter() - t_begin
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
            "ranks": ranks,
            "exchange": runner.exchange if ranks > 1 else None,   # several ranks: host or device
            "camera_layout": trainer.camera_layout,       # what prune_screen = "auto" followed
            "screen_prune_px": trainer.screen_prune_px,   # 0: off
            "opacity_resets": trainer.opacity_resets,     # what opacity_reset = "auto" chose
            "steps": trainer.step_count,
            "finished": final,
            "num_gaussians": trainer.num_gaussians,
            "train_seconds": train_seconds,
            "ms_per_step": 1000.0 * train_seconds / max(1, trainer.step_count),
            "load_seconds": load_seconds,
            "eval_seconds": eval_seconds,
            "total_seconds": total_seconds(),
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
                            gaussians=trainer.num_gaussians, rate=0.0,
                            size=_size_note(trainer.downscale_level(trainer.step_count + 1)))
    first_step = trainer.step_count
    ranks_stop = False
    saved_steps = set()   # checkpoints this run wrote (two milestones may share a step)

    def stopping() -> bool:
        """Several ranks stop together: after the update whose exchange carries a
        rank's stop (this one's signal included), not before it."""
        return stop.signum is not None if group is None else ranks_stop

    try:
        for milestone in sorted(set(eval_steps) | set(ckpt_steps)):
            done = milestone < first_step or (milestone == first_step and (
                milestone not in eval_steps or any(e["step"] == milestone for e in evals)))
            if done:    # before the checkpoint resumed from, or evaluated there already
                continue
            t0 = time.perf_counter()
            while trainer.step_count < milestone and not stopping():
                # The update's views: a batch ends at the milestone; several ranks train one each.
                i, j = (trainer.update_views(milestone) if group is None else
                        (trainer.step_count + 1, trainer.step_count + ranks))
                read = reads_loss(i, j, LOSS_EVERY, milestone)
                if group is None:
                    st = trainer.step(read_loss=read, until=milestone)
                else:
                    st = runner.step(read_loss=read, stop=stop.signum is not None)
                    ranks_stop = st.stop
                    if ranks_stop and stop.signum is None:   # another rank's signal
                        stop.signum = signal.SIGTERM
                if live is not None:
                    live(trainer)
                if read and bar is not None:
                    rate = (st.step - first_step) / max(train_seconds + time.perf_counter() - t0, 1e-9)
                    bar.update(task, completed=min(st.step, steps), loss=st.loss, gaussians=st.num_gaussians,
                               rate=rate, size=_size_note(trainer.downscale_level(st.step + 1)))
            train_seconds += time.perf_counter() - t0
            if stopping():
                break
            trainer.check_finite()
            # Several ranks a step: the first step at or past the milestone, which two
            # milestones can share (evaluated and saved once). A batch of views ends on it.
            if milestone in ckpt_steps and trainer.step_count not in saved_steps:
                trainer.save_checkpoint(out / f"checkpoint_{trainer.step_count}.npz")
                saved_steps.add(trainer.step_count)
            if milestone in eval_steps and not (evals and evals[-1]["step"] == trainer.step_count):
                t0 = time.perf_counter()
                renders = _KeepSome(show)
                ev = evaluate(trainer, test, supersample=supersample, renders=renders,
                              masked=not synthetic and cfg.data.eval_masked, lpips_net=lpips_net)
                if show:
                    step_dir = out / "renders" / f"step_{milestone}"
                    step_dir.mkdir(parents=True, exist_ok=True)
                    stems = render_stems(test.names)
                    for name in show:
                        j = test.names.index(name)
                        _write_png(step_dir / f"{stems[j]}.png",
                                   _side_by_side(renders[name], test.images[j]))
                evals.append({"step": trainer.step_count, "psnr": ev.psnr, "ssim": ev.ssim,
                              "num_gaussians": trainer.num_gaussians, "train_seconds": train_seconds,
                              "per_view": ev.per_view})
                if lpips_net is not None:
                    evals[-1]["lpips"] = ev.lpips
                eval_seconds += time.perf_counter() - t0
                log(f"step {trainer.step_count}: PSNR {ev.psnr:.2f} dB  SSIM {ev.ssim:.4f}  "
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
    # Both times are the whole run's: a resumed run adds the earlier invocations' (and says
    # what this one took), so training never reads longer than the total.
    since = "" if start is None else (f"; since step {start[0]['step']}: {train_seconds - resumed_seconds:.1f} s "
                                      f"training, {time.perf_counter() - t_begin:.1f} s total")
    print(f"PSNR {final['psnr']:.2f} dB  SSIM {final['ssim']:.4f}  on {len(test)} test views  "
          f"({trainer.num_gaussians:,} Gaussians, {steps} steps, {train_seconds:.1f} s training on "
          f"{trainer.backend}, {total_seconds():.1f} s total{since})")
    print(f"wrote {out}/: config.toml, cameras.json, metrics.json, checkpoint.npz"
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
    from ..viewer.live import LiveView
    live = LiveView(trainer, train, test, out, bc, host=args.view_host, port=args.view_port)
    print(f"viewer: open {live.url} to watch training", file=sys.stderr, flush=True)
    return live


def _write_cameras(out: Path, train, test) -> None:
    """cameras.json in the 3DGS reference's layout, for viewers that show the cameras."""
    from ..formats import save_cameras_json
    save_cameras_json(out / "cameras.json", train.cameras, train.names, test.cameras, test.names)


def _write_text_config(path: Path, cfg, synthetic: bool) -> None:
    from ..io.atomic import atomic_write_text
    text = cfg.to_toml()
    if synthetic:
        text = SYNTHETIC_MARKER + "\n" + text
    atomic_write_text(path, text)
