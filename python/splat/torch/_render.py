"""`splat.torch.rasterize`: splat's parametrisation as a torch autograd Function.

One `_RasterizeView` call renders one camera on a native `ViewRasterizer`
(cpp/bindings/raster_views.cpp), which reads the parameters and writes the
torch-allocated outputs in place: CPU tensors through the CPU backend's host
entry points, CUDA tensors through the CUDA backend's device entry points on
torch's current stream. Batches loop over the cameras; depth is a second pass
whose colour is each Gaussian's camera depth (python/splat/_passes.py), written
in torch so autograd carries dL/dz back to the means.
"""
from __future__ import annotations

import atexit
import threading
import weakref

import numpy as np
import torch
import torch.utils.dlpack

from .. import _core
from .._passes import DEFAULT_POOL_SIZE, SH_C0, NativePool
from ..gaussians import MAX_SH_DEGREE

RENDER_MODES = ("RGB", "D", "ED", "RGB+D", "RGB+ED")
RASTERIZE_MODES = ("classic", "antialiased")
_BACKEND_OF_DEVICE = {"cpu": "cpu", "cuda": "cuda", "mps": "metal"}


_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()
# The natives go before the interpreter's teardown (their devices release GPU memory).
atexit.register(_POOLS.clear)


def rasterizer_pool(device, config=None) -> NativePool:
    """The pool of native rasterizers that renders tensors of `device` with `config`
    (a splat.BackendConfig; its backend is the device's: cpu, cuda, or metal for mps)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # "cuda" is the current device: one pool for both names
        device = torch.device("cuda", torch.cuda.current_device())
    # The default configuration's pool is also filed under None: the common
    # case, found without making a config.
    default_key = (device.type, device.index, None) if config is None else None
    pool = _POOLS.get(default_key)  # one lookup: empty_cache() may run between two
    if pool is not None:
        return pool
    backend = _BACKEND_OF_DEVICE.get(device.type, "cpu")
    if config is None:
        config = _core.BackendConfig(backend=backend)
    elif not isinstance(config, _core.BackendConfig):
        raise TypeError(f"[splat] config: expected a splat.BackendConfig, got {type(config).__name__}")
    elif str(config.backend) not in ("auto", backend):
        raise ValueError(f"[splat] config: backend {str(config.backend)!r} cannot render {device.type} tensors "
                         f"(they need backend {backend!r})")
    else:
        config = _core.BackendConfig(dict(config.to_dict(), backend=backend))
    key = (device.type, device.index, repr(config))
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = NativePool(config, DEFAULT_POOL_SIZE, _core.ViewRasterizer)
        if default_key is not None:
            _POOLS[default_key] = pool
    return pool


def empty_cache() -> None:
    """Give back the device memory splat.torch keeps between calls: the pools of
    native rasterizers, each holding buffers sized to the largest call it has
    rendered. A pool with a pass still waiting for its backward stays until the
    next empty_cache(). The next call makes new natives (the compiled kernels
    stay loaded in the process). Never needed for correctness, as
    torch.cuda.empty_cache()."""
    with _POOLS_LOCK:
        for key in [k for k, pool in _POOLS.items() if not pool.busy()]:
            del _POOLS[key]


def _queue(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


class _Camera:
    """One view's host-side camera: world-to-camera [4,4] float32 and intrinsics."""

    __slots__ = ("w2c", "fx", "fy", "cx", "cy", "width", "height", "near", "far")

    def __init__(self, w2c, K, width, height, near, far):
        self.w2c = np.ascontiguousarray(w2c, dtype=np.float32)
        self.fx, self.fy, self.cx, self.cy = float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2])
        self.width, self.height, self.near, self.far = int(width), int(height), float(near), float(far)


class _RasterizeView(torch.autograd.Function):
    """(image [H,W,3], alpha [H,W], radii [N] int32) of one camera; differentiable in
    means, quats, log_scales, opacity_logits, sh and means2d (a proxy whose gradient
    is dL/d mean2d: its value is not read)."""

    @staticmethod
    def forward(ctx, means, quats, log_scales, opacity_logits, sh, means2d, pool, cam, sh_degree, background,
                mode):
        native, lease = pool.take()
        if not any(ctx.needs_input_grad):
            lease.done = True  # no backward will need this state
        dev = means.device
        n = means.shape[0]
        image = torch.empty((cam.height, cam.width, 3), dtype=torch.float32, device=dev)
        alpha = torch.empty((cam.height, cam.width), dtype=torch.float32, device=dev)
        radii = torch.empty((n,), dtype=torch.int32, device=dev)
        params = (means.detach(), log_scales.detach(), quats.detach(), opacity_logits.detach(), sh.detach())
        with pool.slot_lock(lease.slot):
            token = _native_forward(native, params, cam, sh_degree, background, mode, image, alpha, radii, dev)
        ctx.save_for_backward(means, quats, log_scales, opacity_logits, sh)
        # The graph holds the pool weakly: a graph kept to the interpreter's exit (outputs
        # in a script's globals) must not keep the natives past the atexit clear below,
        # or their devices outlive the module and nanobind reports them as leaked.
        ctx.pool, ctx.lease, ctx.token = weakref.ref(pool), lease, token
        ctx.cam, ctx.sh_degree, ctx.background, ctx.mode = cam, sh_degree, background, mode
        ctx.means2d_shape = None if means2d is None else means2d.shape  # [N,2], or [1,N,2] for one camera
        ctx.mark_non_differentiable(radii)
        ctx.set_materialize_grads(False)
        return image, alpha, radii

    @staticmethod
    def backward(ctx, d_image, d_alpha, _d_radii):
        means, quats, log_scales, opacity_logits, sh = ctx.saved_tensors  # torch checks in-place changes here
        if d_image is None and d_alpha is None:
            return (None,) * 11
        dev = means.device
        n = means.shape[0]
        pool = ctx.pool()
        if pool is None:
            raise RuntimeError("[splat.torch] backward: the rasterizers were released (the interpreter is exiting)")
        native = pool.native(ctx.lease.slot)
        with pool.slot_lock(ctx.lease.slot):
            params = (means.detach(), log_scales.detach(), quats.detach(), opacity_logits.detach(), sh.detach())
            if native.last_token != ctx.token:
                # The device has rendered something else since: render this view again.
                cam = ctx.cam
                scratch = (torch.empty((cam.height, cam.width, 3), dtype=torch.float32, device=dev),
                           torch.empty((cam.height, cam.width), dtype=torch.float32, device=dev),
                           torch.empty((n,), dtype=torch.int32, device=dev))
                ctx.token = _native_forward(native, params, cam, ctx.sh_degree, ctx.background, ctx.mode,
                                            *scratch, dev)
            if d_image is None:
                d_image = torch.zeros((ctx.cam.height, ctx.cam.width, 3), dtype=torch.float32, device=dev)
            d_image = d_image.to(torch.float32).contiguous()
            if d_alpha is not None:
                d_alpha = d_alpha.to(torch.float32).contiguous()
            g = [torch.empty_like(p) for p in params]
            g_means2d = torch.empty((n, 2), dtype=torch.float32, device=dev)
            native.backward(_dl(d_image), None if d_alpha is None else _dl(d_alpha), *(_dl(x) for x in g),
                            _dl(g_means2d), ctx.token, _queue(dev))
        ctx.lease.done = True
        g_means, g_log_scales, g_quats, g_opacity, g_sh = g
        g_means2d = None if ctx.means2d_shape is None else g_means2d.view(ctx.means2d_shape)
        return (g_means, g_quats, g_log_scales, g_opacity, g_sh, g_means2d,
                None, None, None, None, None)


# Tensors go to the native side as DLPack capsules made in C: a tensor's own
# __dlpack__ is Python code, ten times slower, and a pass hands over 8 or 9.
_dl = torch.utils.dlpack.to_dlpack


def _native_forward(native, params, cam, sh_degree, background, mode, image, alpha, radii, dev) -> int:
    """mode: (antialiased, chunked_stop)."""
    means, log_scales, quats, opacity_logits, sh = (_dl(p) for p in params)
    return native.forward(means, log_scales, quats, opacity_logits, sh, cam.w2c, cam.fx, cam.fy, cam.cx, cam.cy,
                          cam.width, cam.height, sh_degree, background, cam.near, cam.far, _dl(image), _dl(alpha),
                          _dl(radii), _queue(dev), mode[0], mode[1])


def _check_float(name, t, shape):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"[splat] {name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"[splat] {name}: expected float32, got {t.dtype}")
    ok = t.dim() == len(shape) and all(s is None or s == d for s, d in zip(shape, t.shape))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"[splat] {name}: expected shape {want}, got {list(t.shape)}")
    return t.contiguous()


def _positive_int(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"[splat] {name}: expected a positive integer, got {v!r}")
    return int(v)


# How far a viewmat's rotation part may be from orthonormal (max |R R^T - I|) and
# its last row from [0, 0, 0, 1]: float32 matrices inverted or composed in float32
# are within ~1e-5 of both; a scale, shear or transposed matrix is far outside.
RIGID_TOL = 1e-3
_EYE3 = np.eye(3)
_LAST_ROW = np.array([0.0, 0.0, 0.0, 1.0])


def check_cameras(viewmats, Ks) -> None:
    """Host float64 viewmats [C,4,4] and Ks [C,3,3] checked as splat.Camera checks its
    values: finite, positive focal lengths, and a rigid world-to-camera matrix (a
    rotation with determinant +1 and last row [0, 0, 0, 1], within RIGID_TOL).
    Errors name the argument and the camera index."""
    def first(bad):
        return int(np.flatnonzero(bad)[0])

    if not (np.isfinite(viewmats).all() and np.isfinite(Ks).all()):
        for name, m in (("viewmats", viewmats), ("Ks", Ks)):
            bad = ~np.isfinite(m).all(axis=(1, 2))
            if bad.any():
                raise ValueError(f"[splat] {name}[{first(bad)}]: not finite (NaN or Inf)")
    fx, fy = Ks[:, 0, 0], Ks[:, 1, 1]
    if not ((fx > 0).all() and (fy > 0).all()):
        i = first(~((fx > 0) & (fy > 0)))
        raise ValueError(f"[splat] Ks[{i}]: focal lengths must be positive, got fx {fx[i]:g}, fy {fy[i]:g}")
    r = viewmats[:, :3, :3]
    ortho = np.abs(np.matmul(r, r.transpose(0, 2, 1)) - _EYE3).max(axis=(1, 2))
    det = (r[:, 0, 0] * (r[:, 1, 1] * r[:, 2, 2] - r[:, 1, 2] * r[:, 2, 1])
           - r[:, 0, 1] * (r[:, 1, 0] * r[:, 2, 2] - r[:, 1, 2] * r[:, 2, 0])
           + r[:, 0, 2] * (r[:, 1, 0] * r[:, 2, 1] - r[:, 1, 1] * r[:, 2, 0]))
    last = np.abs(viewmats[:, 3] - _LAST_ROW).max(axis=1)
    bad = (ortho > RIGID_TOL) | (det < 0) | (last > RIGID_TOL)
    if bad.any():
        i = first(bad)
        if last[i] > RIGID_TOL:
            raise ValueError(f"[splat] viewmats[{i}]: last row must be [0, 0, 0, 1], got "
                             f"{np.array2string(viewmats[i, 3], precision=4)} (a transposed matrix?)")
        raise ValueError(f"[splat] viewmats[{i}]: not a rigid world-to-camera matrix (its 3x3 part: "
                         f"max |R R^T - I| {ortho[i]:.3g}, det {det[i]:.4g}; expected a rotation, "
                         f"within {RIGID_TOL:g})")


# Cameras already checked, by their host values: a loop over a dataset's views
# checks each view once (the check is the bulk of a call's camera handling).
_CAMERA_CACHE_SIZE = 1024
_CAMERA_CACHE: dict = {}
_CAMERA_CACHE_LOCK = threading.Lock()


def _checked_cameras(vm_host, k_host, width, height, near, far) -> list:
    """check_cameras(vm_host, k_host), then one _Camera per view; remembered by value."""
    key = (vm_host.tobytes(), k_host.tobytes(), width, height, near, far)
    with _CAMERA_CACHE_LOCK:
        cams = _CAMERA_CACHE.get(key)
    if cams is None:
        check_cameras(vm_host, k_host)
        cams = [_Camera(vm_host[i], k_host[i], width, height, near, far) for i in range(vm_host.shape[0])]
        with _CAMERA_CACHE_LOCK:
            if len(_CAMERA_CACHE) >= _CAMERA_CACHE_SIZE:
                _CAMERA_CACHE.pop(next(iter(_CAMERA_CACHE)))  # the oldest entry
            _CAMERA_CACHE[key] = cams
    return cams


def rasterize(means, quats, log_scales, opacity_logits, sh, viewmats, Ks, width, height, *, sh_degree,
              backgrounds=None, render_mode="RGB", near=0.01, far=1e10, config=None, rasterize_mode="classic",
              blend_stop="splat"):
    """Render N Gaussians from C cameras, differentiably.

    means [N,3], quats [N,4] (w,x,y,z, any norm), log_scales [N,3], opacity_logits [N],
    sh [N,K,3] or per camera [C,N,K,3] (colour = max(SH(dir) + 0.5, 0)); viewmats [C,4,4]
    world-to-camera (OpenCV axes), Ks [C,3,3] pinhole intrinsics; backgrounds [C,3] or [3].
    render_mode: "RGB", "D" (accumulated depth sum_i w_i z_i), "ED" (D / alpha), "RGB+D",
    "RGB+ED". rasterize_mode (gsplat's naming): "classic", or "antialiased", the
    mip-splatting 2D filter (opacity x sqrt(det(cov2d) / det(cov2d + 0.3 I))).
    blend_stop: "splat" (the 3DGS stop, gsplat's) or "chunk" (splat's chunked stop,
    `[train] blend_stop`; Rasterizer.forward's docs). Returns
    (render_colors [C,H,W,ch], render_alphas [C,H,W,1], meta) with meta
    "radii" [C,N,2] int32, "means2d" [C,N,2] (a leaf: its .grad is dL/d mean2d in pixels),
    "depths" [C,N] camera z, "width", "height", "n_cameras". Gradients reach every
    Gaussian parameter (not the cameras). Cameras are checked (check_cameras): a
    non-finite value, a focal length <= 0 or a viewmat that is not rigid is a
    ValueError naming the argument and the camera index.
    """
    if render_mode not in RENDER_MODES:
        raise ValueError(f"[splat] render_mode: expected one of {', '.join(RENDER_MODES)}, got {render_mode!r}")
    if rasterize_mode not in RASTERIZE_MODES:
        raise ValueError(f"[splat] rasterize_mode: expected one of {', '.join(RASTERIZE_MODES)}, "
                         f"got {rasterize_mode!r}")
    from ..rasterizer import is_chunked_stop
    mode = (rasterize_mode == "antialiased", is_chunked_stop(blend_stop))
    width, height = _positive_int("width", width), _positive_int("height", height)
    if isinstance(sh_degree, bool) or not isinstance(sh_degree, (int, np.integer)) or \
            not 0 <= sh_degree <= MAX_SH_DEGREE:
        raise ValueError(f"[splat] sh_degree: expected an integer in 0..{MAX_SH_DEGREE}, got {sh_degree!r}")
    if not (near > 0 and far > near):
        raise ValueError(f"[splat] near, far: need 0 < near < far, got {near!r}, {far!r}")
    means = _check_float("means", means, (None, 3))
    n = means.shape[0]
    dev = means.device
    quats = _check_float("quats", quats, (n, 4))
    log_scales = _check_float("log_scales", log_scales, (n, 3))
    opacity_logits = _check_float("opacity_logits", opacity_logits, (n,))
    viewmats = _check_float("viewmats", viewmats, (None, 4, 4))
    c = viewmats.shape[0]
    if c == 0:
        raise ValueError("[splat] viewmats: no camera")
    Ks = _check_float("Ks", Ks, (c, 3, 3))
    if not isinstance(sh, torch.Tensor) or sh.dim() not in (3, 4):
        raise ValueError(f"[splat] sh: expected shape [N,K,3] or [C,N,K,3], got "
                         f"{list(sh.shape) if isinstance(sh, torch.Tensor) else type(sh).__name__}")
    sh = _check_float("sh", sh, (n, None, 3) if sh.dim() == 3 else (c, n, None, 3))
    if sh.shape[-2] < (sh_degree + 1) ** 2:
        raise ValueError(f"[splat] sh: degree {sh_degree} needs {(sh_degree + 1) ** 2} coefficients, "
                         f"got {sh.shape[-2]}")
    for name, t in (("quats", quats), ("log_scales", log_scales), ("opacity_logits", opacity_logits), ("sh", sh)):
        if t.device != dev:
            raise ValueError(f"[splat] {name}: on {t.device}, means on {dev}")

    # The cameras on the host (the native side takes them by value): one copy
    # for both where they share a device, so one wait for the queue, not two.
    if viewmats.device.type == Ks.device.type == "cpu":  # no copy to make: numpy views, widened
        vm_host = viewmats.detach().numpy().astype(np.float64)
        k_host = Ks.detach().numpy().astype(np.float64)
    elif viewmats.device == Ks.device:
        both = torch.cat([viewmats.detach().reshape(c, 16), Ks.detach().reshape(c, 9)], 1).to("cpu", torch.float64)
        vm_host, k_host = both[:, :16].reshape(c, 4, 4).numpy(), both[:, 16:].reshape(c, 3, 3).numpy()
    else:
        vm_host = viewmats.detach().to("cpu", torch.float64).numpy()
        k_host = Ks.detach().to("cpu", torch.float64).numpy()
    cams = _checked_cameras(vm_host, k_host, width, height, near, far)

    # Devices the native side cannot view (mps) go through host memory.
    run_dev = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")
    pool = rasterizer_pool(dev, config)
    if run_dev != dev:
        means, quats, log_scales, opacity_logits, sh = (t.to(run_dev) for t in
                                                       (means, quats, log_scales, opacity_logits, sh))
    bg_host, bg_torch = _backgrounds(backgrounds, c, run_dev)

    need_grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (means, quats, log_scales, opacity_logits, sh))
    want_rgb = render_mode in ("RGB", "RGB+D", "RGB+ED")
    want_depth = render_mode != "RGB"
    # means2d is a leaf whose gradient the native backward writes; its value is
    # meta only. RGB renders launch the native passes first and project after,
    # so that torch work runs while the GPU rasterizes; the depth pass needs the
    # depths (whose gradient it carries) before it renders.
    hom = _project(means, vm_host, k_host, viewmats, Ks, run_dev) if want_depth else None
    means2d = torch.empty((c, n, 2), dtype=torch.float32, device=run_dev)
    if need_grad:
        means2d.requires_grad_(True)

    colors, alphas, radii = [], [], []
    for i, cam in enumerate(cams):
        # One camera takes the whole leaf: no select, so no select's backward.
        m2d = (means2d if c == 1 else means2d[i]) if need_grad else None
        alpha = None
        out = []
        if want_rgb:
            sh_i = sh if sh.dim() == 3 else sh[i]
            if run_dev.type == "cuda" and sh_i.shape[1] % 4 == 0 and sh_i.data_ptr() % 16:
                sh_i = sh_i.clone()  # the GPU reads such rows as 16-byte quads
            image, alpha, r = _RasterizeView.apply(means, quats, log_scales, opacity_logits, sh_i, m2d, pool, cam,
                                                   int(sh_degree), bg_host[i], mode)
            if bg_torch is not None:
                image = image + (1.0 - alpha)[..., None] * bg_torch[i]
            out.append(image)
        if want_depth:
            z = hom[i, :, 2]
            rest = torch.full_like(z, -0.5 / SH_C0)
            sh_z = torch.stack([(z - 0.5) / SH_C0, rest, rest], dim=-1)[:, None, :].contiguous()
            d, alpha_d, r_d = _RasterizeView.apply(means, quats, log_scales, opacity_logits, sh_z, m2d, pool, cam,
                                                   0, _ZERO3, mode)
            if alpha is None:
                alpha, r = alpha_d, r_d
            d = d[..., :1]
            if render_mode.endswith("ED"):
                d = d / alpha[..., None].clamp(min=1e-10)
            out.append(d)
        colors.append(out[0] if len(out) == 1 else torch.cat(out, dim=-1))
        alphas.append(alpha[..., None])
        radii.append(r)
    # One camera: views, not copies (a stack is a copy and a node in the backward).
    render_colors = colors[0][None] if c == 1 else torch.stack(colors)
    render_alphas = alphas[0][None] if c == 1 else torch.stack(alphas)
    radii = radii[0][None] if c == 1 else torch.stack(radii)
    if hom is None:
        hom = _project(means, vm_host, k_host, viewmats, Ks, run_dev)
    depths = hom[..., 2]
    with torch.no_grad():
        torch.div(hom[..., :2], hom[..., 2:3], out=means2d)
    if run_dev != dev:
        render_colors, render_alphas, radii = render_colors.to(dev), render_alphas.to(dev), radii.to(dev)
    meta = {
        "radii": torch.stack([radii, radii], dim=-1),
        "means2d": means2d,
        "depths": depths,
        "width": width,
        "height": height,
        "n_cameras": c,
        "n_batches": 1,
        "tile_size": 16,
        "camera_ids": None,
        "gaussian_ids": None,
    }
    return render_colors, render_alphas, meta


_ZERO3 = np.zeros(3, np.float32)


def _project(means, vm_host, k_host, viewmats, Ks, run_dev):
    """K [R|t] applied to the means: [C,N,3] homogeneous pixel coordinates (x z, y z, z),
    differentiable in means. P is made in float64 on the GPU where the cameras and the
    Gaussians both are (no upload, so no wait for the queue); else from the host copies."""
    if viewmats.device == Ks.device == run_dev and run_dev.type != "cpu":
        P = torch.matmul(Ks.detach().double(), viewmats.detach()[:, :3, :].double()).float()
    else:
        P = torch.from_numpy(np.matmul(k_host, vm_host[:, :3, :]).astype(np.float32))
        if run_dev.type == "cuda":
            # From pinned memory and without blocking: torch's blocking upload of
            # pageable memory waits for the queue, here the rasterizer's passes.
            P = P.pin_memory().to(run_dev, non_blocking=True)
    c = P.shape[0]
    # One batched multiply-add: t + means R^T per camera.
    return torch.baddbmm(P[:, None, :, 3], means.expand(c, -1, -1), P[:, :, :3].transpose(1, 2))


def _backgrounds(backgrounds, c, dev):
    """(per-camera host backgrounds for the native blend, or a torch [C,3] to composite
    in torch: CUDA or differentiable backgrounds are never read on the host)."""
    if backgrounds is None:
        return [_ZERO3] * c, None
    if not isinstance(backgrounds, torch.Tensor):
        backgrounds = torch.as_tensor(np.asarray(backgrounds, np.float32))
    if backgrounds.dtype != torch.float32:
        raise TypeError(f"[splat] backgrounds: expected float32, got {backgrounds.dtype}")
    if backgrounds.shape == (3,):
        backgrounds = backgrounds.expand(c, 3)
    if backgrounds.shape != (c, 3):
        raise ValueError(f"[splat] backgrounds: expected shape [{c}, 3] or [3], got {list(backgrounds.shape)}")
    if backgrounds.device.type == "cpu" and not backgrounds.requires_grad:
        host = np.ascontiguousarray(backgrounds.numpy(), dtype=np.float32)
        return [np.ascontiguousarray(host[i]) for i in range(c)], None
    return [_ZERO3] * c, backgrounds.to(dev)
