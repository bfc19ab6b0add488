"""splat.torch against gsplat: forward + backward ms per call, side by side.

    python bench/torch_raster.py                      # 300k / 1M / 4M at 800x800 and 1920x1080
    python bench/torch_raster.py --sizes 300000 --res 800x800 --device cpu   # a CPU smoke run

One call is gsplat's `rasterization(...)` (or `splat.torch.rasterization`, the
same signature) on identical CUDA tensors, then `backward()` of a weighted sum
of the image and alpha; timed with CUDA events on torch's stream after
--warmup calls, median over --iters. Both run with packed=False, SH degree 3,
a white background (a CPU tensor for splat, which reads backgrounds on the
host), render_mode RGB. The scene is random Gaussians in the Blender
initialisation box, 4 units from the camera.

Prediction (before the first run): splat.torch is faster in every cell, by
1.3-2x at 300k and 1M (its forward and backward kernels are the training
step's, 1.5 ms a whole step at lego_800's 317k), closer at 4M where both are
bound by the blend; its extra per-call costs are the pair-count read-back
(gsplat has the same one), the 48-byte camera upload and the means2d/depth
values computed in torch.

Host time, measured (H200 host, 1M Gaussians at 800x800, torch's profiler with CPU
activity): a call's GPU work is 2.62 ms and its wall 3.5 ms, because the GPU waits for
Python. At 10k Gaussians, where the GPU has little to do, a call still takes 2.4 ms.
Before a call's first native kernel, the Python side ran about a millisecond of torch
ops on the idle GPU (the camera upload, the projection for meta's means2d and depths,
the parameter activations). Prediction for launching the native passes first and
projecting after (RGB renders), the camera matrix uploaded from pinned memory without
blocking (torch's blocking upload of pageable memory waits for the stream, which would now
hold the rasterizer's passes), single-camera views instead of stacks, cameras checked
once per distinct value, the default pool found without a new config, tensors handed
over as capsules made in C (torch's __dlpack__ is Python) and the opacity clamp folded
into the logit: 1M at 800x800 from 3.5 to about 3.1 ms, the other cells 0.2-0.4 ms less.
Measured after (H200, one run with gsplat side by side): 1M at 800x800 3.06 ms against
gsplat's 3.55; every cell 0.2-1.2 ms below the run before (300k 2.10, 4M 6.25; at
1920x1080 2.73, 3.88, 9.30), all six ahead of gsplat; 10k at 800x800 1.55 ms (gsplat
1.83). Profiled at 1M 800x800: GPU busy 2.52 ms of a 2.96 ms call.
(On a 2-core CPU machine, CPU tensors, 200 Gaussians at 32x32, where the native passes
are small: a whole call, forward, loss and backward, went from 1.19 to 0.91 ms.)
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

import splat
import splat.torch as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timeline import exported_trace, gpu_events, print_summary, summarize  # noqa: E402

SIZES = (300_000, 1_000_000, 4_000_000)
RESOLUTIONS = ((800, 800), (1920, 1080))


def scene(n: int, width: int, height: int, device: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = lambda a: torch.tensor(a.astype(np.float32), device=device)  # noqa: E731
    means = t(rng.uniform(-1.3, 1.3, size=(n, 3)))
    scales = t(rng.uniform(0.004, 0.02, size=(n, 3)))
    quats = t(rng.normal(size=(n, 4)))
    opacities = t(rng.uniform(0.1, 0.9, size=n))
    sh = rng.normal(scale=0.2, size=(n, 16, 3))
    sh[:, 0] = rng.uniform(-1.0, 1.0, size=(n, 3))
    colors = t(sh)
    eye = np.array([4.0, -1.0, 1.5])
    z = -eye / np.linalg.norm(eye)
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    w2c = np.eye(4)
    w2c[:3, :3] = np.stack([x, np.cross(z, x), z])
    w2c[:3, 3] = -w2c[:3, :3] @ eye
    f = 0.5 * width / np.tan(np.radians(25.0))
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]])
    return dict(means=means, quats=quats, scales=scales, opacities=opacities, colors=colors), \
        torch.tensor(w2c[None].astype(np.float32)), torch.tensor(K[None].astype(np.float32))


def make_call(fn, params, viewmats, Ks, width, height, device, bg):
    """One call of the benchmark: fn's render of fresh leaf copies of params, then the
    backward of a weighted sum of image and alpha."""
    x = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    weights = torch.rand(1, height, width, 3, device=device)

    def call():
        for v in x.values():
            v.grad = None
        colors, alphas, meta = fn(x["means"], x["quats"], x["scales"], x["opacities"], x["colors"], viewmats, Ks,
                                  width, height, sh_degree=3, packed=False, backgrounds=bg)
        ((colors * weights).sum() + alphas.sum()).backward()

    return call


def count_syncs(call, calls=5, pool=None):
    """(torch's synchronising operations a call, as torch.cuda.set_sync_debug_mode
    reports them; the native side's host transfers a call, a dict, when its pool is
    given): what a warm call waits for besides its kernels."""
    import warnings
    call()
    torch.cuda.synchronize()
    before = pool.host_transfers() if pool is not None else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(calls):
                call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    syncs = sum("synchroniz" in str(w.message).lower() for w in caught) / calls
    native = None
    if before is not None:
        after = pool.host_transfers()
        native = {k: (after[k] - before.get(k, 0)) / calls for k in after}
    return syncs, native


def time_calls(fn, params, viewmats, Ks, width, height, device, bg, warmup, iters, profile_calls=0):
    """(median ms of a call, the kernel timeline of profile_calls more calls
    (bench/timeline.py's summary) or None without them)."""
    call = make_call(fn, params, viewmats, Ks, width, height, device, bg)
    for _ in range(warmup):
        call()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            import time
            t0 = time.perf_counter()
            call()
            times.append(1e3 * (time.perf_counter() - t0))
    if not profile_calls:
        return statistics.median(times), None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(profile_calls):
            call()
        torch.cuda.synchronize()
    return statistics.median(times), summarize(gpu_events(exported_trace(prof)), profile_calls)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated Gaussian counts")
    ap.add_argument("--res", default=",".join(f"{w}x{h}" for w, h in RESOLUTIONS), help="e.g. 800x800,1920x1080")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--backend-set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a splat.BackendConfig field for splat's runs (repeatable)")
    ap.add_argument("--profile", type=int, default=0, metavar="CALLS",
                    help="after timing, record this many splat.torch calls per cell with torch's profiler and "
                         "print the kernels' ms a call (bench/timeline.py's table; cuda only)")
    ap.add_argument("--syncs", action="store_true",
                    help="after timing, count what a warm call waits for: torch's synchronising operations "
                         "(splat and gsplat) and splat's native host transfers (cuda only)")
    ap.add_argument("--compare", metavar="FIELD=VALUE",
                    help="also time splat with this BackendConfig field, beside the first (A/B ratio)")
    args = ap.parse_args(argv)
    if args.profile < 0 or (args.profile and args.device != "cuda"):
        ap.error("--profile: a count of calls >= 0, with --device cuda")
    if args.syncs and args.device != "cuda":
        ap.error("--syncs: with --device cuda")
    base = dict(kv.split("=", 1) for kv in args.backend_set)
    config_a = splat.BackendConfig(backend=args.device, **base)
    config_b = None
    if args.compare:
        field, value = args.compare.split("=", 1)
        config_b = splat.BackendConfig(backend=args.device, **dict(base, **{field: value}))
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_raster: torch has no CUDA device (use --device cpu for a smoke run)", file=sys.stderr)
        return 1
    try:
        import gsplat
        gsplat_fn = gsplat.rasterization if args.device == "cuda" else None
    except ImportError:
        gsplat_fn = None
    sizes = [int(s) for s in args.sizes.split(",")]
    res = [tuple(int(v) for v in r.split("x")) for r in args.res.split(",")]
    b_head = f" {args.compare + ' ms':>28} {'B/A':>6}" if config_b is not None else ""
    print(f"{'gaussians':>10} {'size':>10} {'splat ms':>9}{b_head} {'gsplat ms':>10} {'gsplat/splat':>13}  target >= 1")
    met = []
    for w, h in res:
        for n in sizes:
            params, viewmats, Ks = scene(n, w, h, args.device)
            ms_a, timeline = time_calls(functools.partial(st.rasterization, config=config_a), params, viewmats, Ks,
                                        w, h, args.device, torch.ones(1, 3), args.warmup, args.iters, args.profile)
            ms = ms_a
            b_cell = ""
            if config_b is not None:
                ms_b, _ = time_calls(functools.partial(st.rasterization, config=config_b), params, viewmats, Ks,
                                     w, h, args.device, torch.ones(1, 3), args.warmup, args.iters)
                b_cell = f" {ms_b:28.2f} {ms_b / ms_a:6.2f}"
                ms = min(ms, ms_b)  # gsplat's ratio against the faster variant
            if gsplat_fn is not None:
                g_ms, _ = time_calls(gsplat_fn, params, viewmats.cuda(), Ks.cuda(), w, h, args.device,
                                     torch.ones(1, 3, device="cuda"), args.warmup, args.iters)
                met.append(g_ms >= ms)
                tail = f"{g_ms:10.2f} {g_ms / ms:13.2f}  {'met' if g_ms >= ms else 'not met'}"
            else:
                tail = f"{'-':>10} {'-':>13}"
            print(f"{n:10d} {f'{w}x{h}':>10} {ms_a:9.2f}{b_cell} {tail}", flush=True)
            if args.syncs:
                syncs, native = count_syncs(make_call(functools.partial(st.rasterization, config=config_a), params,
                                                      viewmats, Ks, w, h, args.device, torch.ones(1, 3)),
                                            pool=st.rasterizer_pool(args.device, config_a))
                line = (f"  a warm call waits: splat {syncs:g} torch syncs, native {native.get('downloads', 0):g} "
                        f"downloads ({native.get('download_bytes', 0):g} bytes), {native.get('uploads', 0):g} uploads")
                if gsplat_fn is not None:
                    g_syncs, _ = count_syncs(make_call(gsplat_fn, params, viewmats.cuda(), Ks.cuda(), w, h, args.device,
                                                       torch.ones(1, 3, device="cuda")))
                    line += f"; gsplat {g_syncs:g} torch syncs"
                print(line, flush=True)
            if timeline is not None:
                print_summary(timeline, ms_a, n, per="call")
            del params
            if args.device == "cuda":
                torch.cuda.empty_cache()
    if gsplat_fn is None:
        print("(gsplat is not importable: splat.torch alone)")
    else:
        print(f"target (splat.torch faster than gsplat in every cell): {sum(met)} of {len(met)} cells met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
