"""The gsplat side of bench/real.py: the 3DGS recipe of a splat.TrainConfig on
gsplat's public API (gsplat.rasterization, gsplat.strategy.DefaultStrategy),
from the same initial Gaussians as splat (splat.trainer.initial_gaussians),
with the images uint8 on the device as splat keeps them.

Per step: a view from shuffled passes over the training views; render with
the active SH degree (raised every sh_degree_interval steps) over the
dataset's background; loss (1 - w) L1 + w (1 - SSIM) with SSIM over an 11x11
Gaussian window (sigma 1.5, zero padding, as the 3DGS loss), masked pixels
(Dataset.masks) set to 0 in render and target and left out of the L1 mean;
Adam per parameter group with the config's rates (means times the scene
extent, decayed exponentially to means_lr_final); DefaultStrategy densifies
with the config's schedule and thresholds. With `train.strategy = "mcmc"`
(--set train.strategy=mcmc) gsplat's MCMCStrategy runs instead, with the
config's budget (max_gaussians as cap_max), refine schedule, noise_lr and
dead opacity, and the simple trainer's opacity and scale regularisers in the
loss; the initial Gaussians are splat's mcmc ones (mcmc_init_opacity,
mcmc_init_scale), as gsplat's mcmc preset. Under DefaultStrategy the config's
opacity_reg and scale_reg (0 unless set: gsplat's default) enter the loss from
step reg_from on, as splat's.
"""
from __future__ import annotations

import math
import time

import numpy as np

import splat
from splat.trainer import initial_gaussians


def _gaussian_window(torch, device, size=11, sigma=1.5):
    x = torch.arange(size, dtype=torch.float32, device=device) - (size - 1) / 2
    g = torch.exp(-(x * x) / (2 * sigma * sigma))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(3, 1, size, size).contiguous()


def _ssim(torch, a, b, window):
    """Mean SSIM of [1,3,H,W] images (zero padding, the training loss's form)."""
    F = torch.nn.functional
    pad = window.shape[-1] // 2
    mu_a = F.conv2d(a, window, padding=pad, groups=3)
    mu_b = F.conv2d(b, window, padding=pad, groups=3)
    saa = F.conv2d(a * a, window, padding=pad, groups=3) - mu_a * mu_a
    sbb = F.conv2d(b * b, window, padding=pad, groups=3) - mu_b * mu_b
    sab = F.conv2d(a * b, window, padding=pad, groups=3) - mu_a * mu_b
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    m = ((2 * mu_a * mu_b + c1) * (2 * sab + c2)) / ((mu_a * mu_a + mu_b * mu_b + c1) * (saa + sbb + c2))
    return m.mean()


def _camera(torch, cam, device):
    view = torch.tensor(np.asarray(cam.world_to_camera, np.float32), device=device)[None]
    k = torch.tensor([[cam.fx, 0.0, cam.cx], [0.0, cam.fy, cam.cy], [0.0, 0.0, 1.0]],
                     dtype=torch.float32, device=device)[None]
    return view, k


def train_gsplat(scene, train, test, marks, cfg: splat.TrainConfig, budget, log, fit_exposure=False):
    import torch
    from gsplat import rasterization
    from gsplat.strategy import DefaultStrategy

    dev = torch.device("cuda")
    torch.manual_seed(cfg.seed)
    init = initial_gaussians(train.points, train.point_colors, cfg) if train.points is not None and \
        len(train.points) else None
    if init is None:
        from splat.data.points import capture_points
        pts, cols, _ = capture_points(train, cfg.init_points, cfg.seed)
        init = initial_gaussians(pts, cols, cfg)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)

    def param(a):
        return torch.nn.Parameter(torch.tensor(np.ascontiguousarray(a), device=dev))

    params = torch.nn.ParameterDict({
        "means": param(init.means), "scales": param(init.log_scales), "quats": param(init.quats),
        "opacities": param(init.opacity_logits), "sh0": param(init.sh[:, :1, :]),
        "shN": param(init.sh[:, 1:, :])})
    extent = float(train.scene_extent)
    rates = {"means": cfg.means_lr * extent, "scales": cfg.log_scales_lr, "quats": cfg.quats_lr,
             "opacities": cfg.opacity_lr, "sh0": cfg.sh_dc_lr, "shN": cfg.sh_rest_lr}
    optimizers = {k: torch.optim.Adam([{"params": params[k], "lr": lr, "name": k}], eps=cfg.adam_eps,
                                      betas=(cfg.adam_beta1, cfg.adam_beta2)) for k, lr in rates.items()}
    steps = marks[-1]
    gamma = (cfg.means_lr_final / cfg.means_lr) ** (1.0 / steps) if cfg.means_lr > 0 else 1.0
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizers["means"], gamma=gamma)
    mcmc = cfg.strategy == "mcmc"
    if mcmc:  # --set train.strategy=mcmc: gsplat's MCMCStrategy with the same budget and schedule
        from gsplat.strategy import MCMCStrategy
        strategy = MCMCStrategy(cap_max=cfg.max_gaussians, noise_lr=cfg.mcmc_noise_lr,
                                refine_start_iter=cfg.mcmc_refine_from, refine_stop_iter=cfg.mcmc_refine_until,
                                refine_every=cfg.mcmc_refine_every, min_opacity=cfg.mcmc_min_opacity)
        strategy.check_sanity(params, optimizers)
        state = strategy.initialize_state()
    else:
        strategy = DefaultStrategy(prune_opa=cfg.prune_opacity, grow_grad2d=cfg.densify_grad_threshold,
                                   grow_scale3d=cfg.percent_dense, prune_scale3d=cfg.prune_max_world_scale,
                                   refine_start_iter=cfg.densify_from, refine_stop_iter=cfg.densify_until,
                                   reset_every=cfg.opacity_reset_every, refine_every=cfg.densify_every)
        strategy.check_sanity(params, optimizers)
        state = strategy.initialize_state(scene_scale=extent)

    images = [torch.tensor(img, device=dev) for img in train.images]          # uint8, as splat keeps them
    masks = None if train.masks is None else [
        None if m is None else torch.tensor(m, device=dev) for m in train.masks]
    cams = [_camera(torch, c, dev) for c in train.cameras]
    bg = torch.tensor(train.background, dtype=torch.float32, device=dev)[None]
    window = _gaussian_window(torch, dev)
    rng = np.random.default_rng(cfg.seed)
    order: list = []
    w = cfg.ssim_weight

    def render(cam_vk, width, height, degree):
        view, k = cam_vk
        colors = torch.cat([params["sh0"], params["shN"]], 1)
        img, _, info = rasterization(params["means"], params["quats"], torch.exp(params["scales"]),
                                     torch.sigmoid(params["opacities"]), colors, view, k, width, height,
                                     sh_degree=degree, backgrounds=bg, packed=False)
        return img[0], info

    rows, seconds, step = [], 0.0, 0
    for mark in marks:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        stopped = False
        while step < mark:
            if not order:
                order = list(rng.permutation(len(images)))
            i = int(order.pop())
            cam = train.cameras[i]
            degree = min(step // cfg.sh_degree_interval, cfg.sh_degree)
            out, info = render(cams[i], cam.width, cam.height, degree)
            if not mcmc:
                strategy.step_pre_backward(params, optimizers, state, step, info)
            gt = images[i].float() / 255.0
            m = None if masks is None else masks[i]
            if m is not None:
                out = out * m[..., None]
                gt = gt * m[..., None]
                l1 = (out - gt).abs().sum() / (m.sum() * 3).clamp(min=1)
            else:
                l1 = (out - gt).abs().mean()
            s = _ssim(torch, out.permute(2, 0, 1)[None], gt.permute(2, 0, 1)[None], window)
            loss = (1.0 - w) * l1 + w * (1.0 - s)
            # gsplat's simple trainer's regularisers: MCMC's weights, or the default
            # strategy's from reg_from on (splat's Trainer::regularizers_at)
            opacity_w, scale_w = ((cfg.mcmc_opacity_reg, cfg.mcmc_scale_reg) if mcmc else
                                  (cfg.opacity_reg, cfg.scale_reg) if step + 1 >= cfg.reg_from else (0.0, 0.0))
            if opacity_w or scale_w:
                loss = loss + opacity_w * torch.sigmoid(params["opacities"]).mean() + \
                    scale_w * torch.exp(params["scales"]).mean()
            loss.backward()
            for opt in optimizers.values():
                opt.step()
                opt.zero_grad(set_to_none=True)
            scheduler.step()
            if mcmc:
                strategy.step_post_backward(params, optimizers, state, step, info, lr=scheduler.get_last_lr()[0])
            else:
                strategy.step_post_backward(params, optimizers, state, step, info, packed=False)
            step += 1
            if step % 100 == 0 and budget.spent() and step < mark:
                stopped = True
                break
        torch.cuda.synchronize()
        seconds += time.perf_counter() - t0
        if not math.isfinite(float(loss)):
            raise RuntimeError(f"gsplat diverged on {scene} at step {step}")
        psnr, ssim = _evaluate(torch, render, test, dev, min(step // cfg.sh_degree_interval, cfg.sh_degree),
                               fit_exposure)
        peak = int(torch.cuda.max_memory_allocated(dev))
        n = int(params["means"].shape[0])
        rows.append(dict(scene=scene, trainer="gsplat", steps=step, target=mark, stopped=stopped, psnr=psnr,
                         ssim=ssim, gaussians=n, seconds=seconds, peak_bytes=peak))
        log(f"[{scene}] gsplat {step} steps{' (stopped)' if stopped else ''}: PSNR {psnr:.2f} SSIM {ssim:.4f} "
            f"{n:,} Gaussians {seconds:.1f} s")
        if stopped:
            break
    return rows


def _evaluate(torch, render, test, dev, degree, fit_exposure=False):
    """Mean PSNR / SSIM with splat.metrics (the same functions splat is measured with);
    with fit_exposure, the protocol of splat.evaluate(fit_exposure=True): each view's
    colour correction fitted on its left half, its right half scored."""
    from splat.metrics import exposure_halves, fitted_render, psnr, ssim
    ps, ss = [], []
    with torch.no_grad():
        for cam, image in zip(test.cameras, test.images):
            out, _ = render(_camera(torch, cam, dev), cam.width, cam.height, degree)
            r = out.clamp(0, 1).float().cpu().numpy()
            t = image.astype(np.float32) / 255.0
            score = None
            if fit_exposure:
                fit, score = exposure_halves(cam.height, cam.width)
                if fit is None:
                    continue
                r, _ = fitted_render(r, t, fit)
            ps.append(psnr(r, t, score))
            ss.append(ssim(r, t, score))
    return float(np.mean(ps)), float(np.mean(ss))
