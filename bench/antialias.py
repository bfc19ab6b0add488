"""Antialiasing bench: lego_800 trained classic vs antialiased, evaluated zoomed out.

    python bench/antialias.py                             # cuda, 30000 steps each
    python bench/antialias.py --data /path/to/shared/data --backend cpu --steps 20 \\
        --train-frames 0::25 --frames 0::50 --init-points 2000    # a smoke run

Both runs train on lego_800 (800x800) with the same recipe and seed, differing
only in [train] antialiased. Each is evaluated on the lego_400 test views
rendered at 400x400 WITHOUT supersampling (the zoom-out case: every splat is
half the size it was trained at, where classic 3DGS aliases) and, for
reference, at the training scale (800x800, 2x2 box-averaged, as bench/gate.py
does). Training wall time excludes start-up, warm-up and evaluation.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import splat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate import default_data, warm_up  # noqa: E402


def run_mode(antialiased: bool, train, test, args, log) -> dict:
    cfg = splat.TrainConfig(steps=args.steps, antialiased=antialiased, seed=args.seed,
                            **({"init_points": args.init_points} if args.init_points else {}))
    trainer = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend=args.backend))
    name = "antialiased" if antialiased else "classic"
    t0 = time.perf_counter()
    for _ in range(args.steps - 1):
        trainer.step(read_loss=False)
    last = trainer.step(read_loss=True)  # the loss read-back synchronizes the device
    train_s = time.perf_counter() - t0
    log(f"[{name}] {args.steps} steps in {train_s:.1f}s, {trainer.num_gaussians:,} Gaussians, loss {last.loss:.4f}")
    zoom = splat.evaluate(trainer, test, supersample=1)
    full = splat.evaluate(trainer, test, supersample=2)
    log(f"[{name}] 400x400: PSNR {zoom.psnr:.2f} SSIM {zoom.ssim:.4f}; 800x800 (2x2 box): PSNR {full.psnr:.2f}")
    return dict(mode=name, train_s=train_s, gaussians=trainer.num_gaussians, psnr_400=zoom.psnr,
                ssim_400=zoom.ssim, psnr_800=full.psnr, ssim_800=full.ssim)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=default_data(),
                    help="folder holding lego_400/ and lego_800/ (default as bench/gate.py)")
    ap.add_argument("--steps", type=int, default=30000)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-frames", metavar="SPEC", help="subset of the training views (default all 100)")
    ap.add_argument("--frames", metavar="SPEC", help="subset of the test views (default all 200)")
    ap.add_argument("--init-points", type=int, help="random initial points (default the recipe's 100000)")
    args = ap.parse_args(argv)
    for scene in ("lego_400", "lego_800"):
        if not (args.data / scene).is_dir():
            ap.error(f"no {scene} under {args.data}")
    if args.steps < 1:
        ap.error("--steps: must be positive")
    ok, why = splat.backend_available(args.backend)
    if not ok:
        ap.error(f"backend {args.backend} is not available: {why}")

    def log(msg):
        print(msg, flush=True)

    train = splat.load_dataset(args.data / "lego_800", split="train", frames=args.train_frames)
    test = splat.load_dataset(args.data / "lego_400", split="test", frames=args.frames)
    log(f"lego_800: {len(train)} train views {train.size_summary()}; lego_400 test: {len(test)} views "
        f"{test.size_summary()}; backend {args.backend}")
    t0 = time.perf_counter()
    warm_up(train, args.backend)
    log(f"kernel warm-up {time.perf_counter() - t0:.1f}s")
    rows = [run_mode(aa, train, test, args, log) for aa in (False, True)]

    print()
    head = (f"{'mode':<12} {'steps':>6} {'train s':>8} {'#Gauss':>10} {'PSNR 400':>9} {'SSIM 400':>9} "
            f"{'PSNR 800':>9} {'SSIM 800':>9}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['mode']:<12} {args.steps:>6} {r['train_s']:>8.1f} {r['gaussians']:>10,} {r['psnr_400']:>9.2f} "
              f"{r['ssim_400']:>9.4f} {r['psnr_800']:>9.2f} {r['ssim_800']:>9.4f}")
    d = rows[1]["psnr_400"] - rows[0]["psnr_400"]
    print(f"\nantialiased - classic at 400x400 (zoom-out): {d:+.3f} dB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
