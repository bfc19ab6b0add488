"""Quality of B views a step (the data-parallel batch's semantics, one process,
gradients summed through the host). usage: batch_quality.py SCENE B VIEWS SEED [backend]"""
import math, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import splat
from splat.parallel.trainer import PARAMS

scene, B, views, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
backend = sys.argv[5] if len(sys.argv) > 5 else "cuda"
extra = dict(a.split("=", 1) for a in sys.argv[6:])
if (scene / "transforms_train.json").exists():
    train = splat.load_dataset(scene, split="train")
    test = splat.load_dataset(scene, split="test", frames="0::2")
else:
    from real import load_scene
    train, test = load_scene(scene, {})
kw = {k: type(getattr(splat.TrainConfig(), k))(v) for k, v in extra.items()}
cfg = splat.TrainConfig(steps=views, seed=seed, **kw)
tr = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend=backend, pair_sizing="readback"))
cfg = tr.config
nat = tr._native
marks = [m for m in (2000, 7000, 15000, 30000) if m <= views] + ([views] if views not in (2000, 7000, 15000, 30000) else [])
b1, b2, lr_scale = cfg.adam_beta1 ** B, cfg.adam_beta2 ** B, math.sqrt(B)
t0 = time.perf_counter()
u = 0
for mark in marks:
    while tr.step_count < mark:
        if B == 1:
            tr.step(read_loss=False)
            continue
        first = tr.step_count + 1
        last = first + B - 1
        total = None
        for r in range(B):
            nat.forward_backward(first + r, nat.sh_degree_at(first))
            g = nat.gradients()
            total = {k: g[k].copy() for k in PARAMS} if total is None else {k: total[k] + g[k] for k in PARAMS}
        nat.set_gradients({k: total[k] / np.float32(B) for k in PARAMS})
        u += 1
        nat.apply_update(last, u, lr_scale, b1, b2)
        for t in range(first, last + 1):
            if nat.densifies_at(t):
                nat.densify_at(t)
            if nat.resets_opacity_at(t):
                nat.reset_opacity()
    ev = splat.evaluate(tr, test)
    print(f"{scene.name} B={B} seed={seed} views {tr.step_count}: PSNR {ev.psnr:.2f} SSIM {ev.ssim:.4f} "
          f"{tr.num_gaussians} Gaussians, {time.perf_counter() - t0:.0f} s", flush=True)
