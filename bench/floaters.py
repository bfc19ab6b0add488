"""Floaters in a trained model, for bench/real.py --floaters and bench/fast.py: the
Gaussians floating in front of the test cameras (nearer than a fraction of the
median depth in a view), the Gaussians whose 3-sigma ellipsoid holds a test
camera's centre (projected through the eye, their splat is no Gaussian) and the
Gaussians that at most one training view has in view, with each run's worst test
view."""
from __future__ import annotations

import sys

import numpy as np

NEAR_FRACTION = 0.1  # of the median depth in the view
NEAR_MARGIN = 50.0   # pixels beyond the image edge still counted as in view
ENCLOSING_SIGMA = 3.0  # the extent the blend gives a splat


def _in_view(means, camera, margin):
    """(in view, depth) per Gaussian: centre in front of `camera` and projected within
    `margin` pixels of its image."""
    w2c = np.asarray(camera.world_to_camera, np.float64)
    p = means @ w2c[:3, :3].T + w2c[:3, 3]
    z = p[:, 2]
    front = z > 1e-6
    zs = np.where(front, z, 1.0)
    x = camera.fx * p[:, 0] / zs + camera.cx
    y = camera.fy * p[:, 1] / zs + camera.cy
    return front & (x >= -margin) & (x < camera.width + margin) & (y >= -margin) & (y < camera.height + margin), z


def near_camera_gaussians(means, opacity_logits, cameras, fraction=NEAR_FRACTION, margin=NEAR_MARGIN):
    """Per camera (count, summed opacity) of the Gaussians in its view (centre in
    front, projected within `margin` pixels of the image) nearer than
    `fraction` x the median depth of all the Gaussians in its view."""
    means = np.asarray(means, np.float64)
    opacity = 1.0 / (1.0 + np.exp(-np.asarray(opacity_logits, np.float64).ravel()))
    out = []
    for c in cameras:
        seen, z = _in_view(means, c, margin)
        if not seen.any():
            out.append((0, 0.0))
            continue
        near = seen & (z < fraction * float(np.median(z[seen])))
        out.append((int(near.sum()), float(opacity[near].sum())))
    return out


def _rotations(quats) -> np.ndarray:
    """[N,3,3] rotation matrices of (w, x, y, z) quaternions, normalised."""
    q = np.asarray(quats, np.float64)
    w, x, y, z = (q / np.linalg.norm(q, axis=1, keepdims=True)).T
    return np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                     np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                     np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], 1)


def enclosing_gaussians(means, log_scales, quats, cameras, sigma=ENCLOSING_SIGMA) -> list:
    """Per camera, how many Gaussians hold its centre within `sigma` standard
    deviations (Mahalanobis distance). Such a Gaussian straddles the eye: the
    projection linearises it about a centre that may lie far off to one side, and
    its splat can cover much of the view (docs/training_modes.md, "beer at an
    eighth of its size on the CPU")."""
    means = np.asarray(means, np.float64)
    rot = _rotations(quats)
    inv_scale = np.exp(-np.asarray(log_scales, np.float64))
    out = []
    for c in cameras:
        local = np.einsum("nji,nj->ni", rot, np.asarray(c.center, np.float64)[None] - means)  # R^T (c - mean)
        out.append(int((((local * inv_scale) ** 2).sum(1) < sigma * sigma).sum()))
    return out


def views_seeing(means, cameras, margin=NEAR_MARGIN) -> np.ndarray:
    """Per Gaussian, how many of `cameras` have it in view (as near_camera_gaussians
    counts a view). Against the training cameras: a Gaussian one view alone sees
    is fitted to that view with nothing to hold it elsewhere."""
    means = np.asarray(means, np.float64)
    count = np.zeros(len(means), np.int64)
    for c in cameras:
        count += _in_view(means, c, margin)[0]
    return count


def floater_fields(trainer, train, test, ev) -> dict:
    st = trainer.state()
    near = near_camera_gaussians(st["means"], st["opacity_logits"], test.cameras)
    enclosing = enclosing_gaussians(st["means"], st["log_scales"], st["quats"], test.cameras)
    worst = min(ev.per_view, key=lambda v: v["psnr"]) if ev.per_view else None
    return dict(near_total=sum(n for n, _ in near), near_max=max((n for n, _ in near), default=0),
                near_opacity=sum(o for _, o in near), enclosing_total=sum(enclosing),
                one_view=int((views_seeing(st["means"], train.cameras) <= 1).sum()),
                worst_view=None if worst is None else worst["name"],
                worst_psnr=None if worst is None else float(worst["psnr"]))


def print_floaters(rows, out=None):
    out = sys.stdout if out is None else out   # bound at the call: a caller may have replaced sys.stdout
    rows = [r for r in rows if "near_total" in r]
    if not rows:
        return
    recipe = any("recipe" in r for r in rows)   # bench/fast.py's rows name their recipe
    head = (f"{'scene':<10} " + (f"{'recipe':<16} " if recipe else "") +
            f"{'seed':>5} {'steps':>6} {'PSNR':>6} {'worst view':<16} {'its PSNR':>8} "
            f"{'near total':>10} {'near max':>8} {'opacity':>8} {'enclosing':>9} {'one view':>9}")
    print(f"\nfloaters: the worst test view; Gaussians nearer a test camera than {NEAR_FRACTION} x the median "
          "depth in its view (total over the views, the largest view, their summed opacity); Gaussians whose "
          f"{ENCLOSING_SIGMA:g}-sigma ellipsoid holds a test camera (total over the views); Gaussians that "
          "at most one training view has in view", file=out)
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        print(f"{r['scene']:<10} " + (f"{str(r.get('recipe', '')):<16.16} " if recipe else "") +
              f"{r.get('seed')!s:>5} {r['steps']:>6} {r['psnr']:>6.2f} {str(r['worst_view']):<16.16} "
              f"{r['worst_psnr'] if r['worst_psnr'] is not None else float('nan'):>8.2f} {r['near_total']:>10} "
              f"{r['near_max']:>8} {r['near_opacity']:>8.2f} {r.get('enclosing_total', 0):>9} {r['one_view']:>9}", file=out)
