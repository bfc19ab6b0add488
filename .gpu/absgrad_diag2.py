import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _parity import assert_rows_close, flipped_rows
from absgrad_diag_run import run
worst = 0
fails = 0
for s in [6054692766954603278] + [5241] + list(range(7000, 7500)):
    for fields in ({}, {"deterministic": True}) if s == 6054692766954603278 else ({},):
        (c, cs), (g, gs) = run(s, fields).values()
        for name, got, want, sc in (("grad_accum", g["grad_accum"], c["grad_accum"], None),
                                ("means2d_abs", gs["grad.means2d_abs"], cs["grad.means2d_abs"], None),
                                ("means2d", gs["grad.means2d"], cs["grad.means2d"], cs["grad.means2d_abs"])):
            worst = max(worst, int(flipped_rows(got, want, scale=sc).sum()))
            try:
                assert_rows_close(got, want, name, s, scale=sc)
            except AssertionError as e:
                fails += 1
                print("FAIL", e)
        if s == 6054692766954603278:
            print("bad seed", fields, "flipped rows", [int(flipped_rows(a, b).sum()) for a, b in
                  ((g["grad_accum"], c["grad_accum"]), (gs["grad.means2d"], cs["grad.means2d"]))])
print("502 seeds: fails", fails, "most flipped rows", worst)
