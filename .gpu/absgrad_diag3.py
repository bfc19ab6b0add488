import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _parity import flipped_rows, rel_err
from absgrad_diag_run import run
rows, errs, seeds = [], [], []
for s in range(20000, 23000):
    (c, cs), (g, gs) = run(s, {}).values()
    r, e = [], []
    for got, want, sc in ((g["grad_accum"], c["grad_accum"], None),
                          (gs["grad.means2d_abs"], cs["grad.means2d_abs"], None),
                          (gs["grad.means2d"], cs["grad.means2d"], cs["grad.means2d_abs"])):
        r.append(int(flipped_rows(got, want, scale=sc).sum()))
        e.append(rel_err(got, want))
    rows.append(r); errs.append(e); seeds.append(s)
rows, errs = np.array(rows), np.array(errs)
print("seeds", len(seeds), "n rows 250")
for k, name in enumerate(("accum", "abs", "plain")):
    print(name, "flipped rows: hist", np.bincount(rows[:, k]).tolist(),
          "rel_err q50/q99/q999/max", np.quantile(errs[:, k], [0.5, 0.99, 0.999]).tolist(), errs[:, k].max())
worst = np.argsort(-errs.max(axis=1))[:5]
for i in worst:
    print("seed", seeds[i], "rows", rows[i].tolist(), "errs", errs[i].tolist())
