"""`splat check`: the backends this machine offers, or a config resolved and validated, with
what its recipe does and the warnings about it."""
from __future__ import annotations

import sys

from ._common import warn
from ._shared import _bytes, _clean, _config_setup, _err


def _check_backends() -> int:
    """`splat check` without a config: the backends of this machine."""
    from .. import __version__, backend_available, resolve_backend
    from .._backend_notice import auto_fallback_message
    from .._core import nvrtc_available
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
    """The config `splat train` would run with the same arguments, or every error in it;
    without a config or scene, the backends."""
    from .. import backend_available, resolve_backend
    from ._data import scene_arg
    from ..config import ConfigError
    from .train import _builtin_scene, _synthetic_setup, run_milestones
    scene = scene_arg(args)
    given = any((args.set, args.steps, args.backend))
    if args.config is None and scene is None and not given:
        return _check_backends()
    synthetic = _builtin_scene(args)   # as splat train decides
    source = args.config or scene or ("the built-in scene" if synthetic else "--set data.path")
    try:
        cfg = _synthetic_setup(args) if synthetic else _config_setup(args)
    except ConfigError as exc:
        for e in exc.errors:
            _err(e)
        n = len(exc.errors)
        _err(f"{source}: {n} problem{'s' if n != 1 else ''}")
        return 1
    from .. import BackendConfig
    from ..data.layout import pose_layout
    from ..schedule import capture_recipe
    from ._data import config_dataset_format
    bc = BackendConfig(**cfg.backend)
    headers = _read_headers(cfg)
    fmt = config_dataset_format(cfg)
    layout = pose_layout(headers[1]) if headers is not None and fmt is not None else None
    # The keys a capture's recipe adds are part of what splat train runs with (and records).
    cfg.train = capture_recipe(cfg.train, fmt, layout)
    print(f"# {source}, resolved")
    print(cfg.to_toml().rstrip())
    asked = bc.backend
    resolved = resolve_backend(asked)
    ok, why = backend_available(resolved)
    print(f"# backend: {asked}" + (f" -> {resolved}" if asked != resolved else "")
          + ("" if ok else " (not available on this machine)"))
    if not ok:
        warn(f"backend {resolved!r} is not available on this machine: {_clean(why)}")
    if asked == "auto":
        from .._backend_notice import auto_fallback_message
        fallback = auto_fallback_message()
        if fallback:
            warn(_clean(fallback))
    for w in bc.validate(resolved):
        warn(_clean(w))
    if headers is not None:
        _print_image_footprint(cfg, resolved, headers[0])
    from ..recipe import describe, recipe_warnings
    for line in describe(cfg.train, fmt, layout):
        print(f"# {line}")
    # What the run does with [output]: eval_steps past train.steps (the fast preset's) are skipped.
    evals, ckpts = run_milestones(cfg)
    print(f"# evaluates at steps {', '.join(map(str, evals))}; "
          + (f"checkpoints at {', '.join(map(str, ckpts))}" if ckpts else "no checkpoints"))
    if cfg.data.eval_lpips != "none":
        from .. import metrics_lpips
        try:
            metrics_lpips.backbone_path(cfg.data.eval_lpips)
            metrics_lpips.heads_path(cfg.data.eval_lpips)
            print(f"# lpips: {cfg.data.eval_lpips} weights found")
        except (OSError, RuntimeError) as exc:
            warn(f"data.eval_lpips: {_clean(str(exc))} (splat train stops before training)")
    for w in recipe_warnings(cfg.train, fmt, layout):
        warn(w)
    print(f"{source}: OK", file=sys.stderr)
    return 0


def _read_headers(cfg) -> tuple[list, list] | None:
    """(view sizes, poses) of the train split from the image headers and the cameras
    (nothing decoded: the check of a large scene takes no memory); None without a
    path or, with a warning, when the split cannot be read."""
    from ..data import view_headers
    d = cfg.data
    if d.path is None:
        return None
    try:
        return view_headers(d.path, d.train_split, frames=d.train_frames, **d.loader_args())
    except (OSError, ValueError) as exc:
        warn(f"data.path: cannot read the train split to report the images' footprint: {_clean(str(exc))}")
        return None


def _print_image_footprint(cfg, backend: str, sizes: list) -> None:
    """`# images: ...`: the train split's device footprint (view sizes from the headers)
    against [data] device_image_budget."""
    from ..data.dataset import size_summary
    from ..trainer import packed_bytes
    d = cfg.data
    rgb, mask = packed_bytes(sizes)
    budget = int(d.device_image_budget * (1 << 30))
    if budget:
        where = f"streamed from host memory (over the budget {_bytes(budget)})" if rgb + mask > budget \
            else f"resident (budget {_bytes(budget)})"
    elif backend == "cpu":
        where = "resident"
    else:
        where = "resident unless over half the free device memory at start"
    print(f"# images: {len(sizes)} train views {size_summary([(w, h) for w, h, _ in sizes])}, "
          f"{_bytes(rgb + mask)} on the device" + (f" (up to {_bytes(mask)} of masks)" if mask else "")
          + f": {where}")
