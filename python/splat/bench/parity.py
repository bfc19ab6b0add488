"""`splat bench --parity`: one training step from a checkpoint under two backend
configs, their buffers compared (the gate and its tolerance: splat/bench/__init__.py)."""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np

from ..cli._common import one_line, warn, write_json
from .replay import (ATOL, GRAD_KEYS, PARAM_KEYS, RTOL, Checkpoint, Setup, _console, _note, _run_dir,
                     find_checkpoint, load_setup, make_trainer, read_checkpoint, run_folder_of)

def _snapshot(native):
    """The native debug snapshot, or (None, why) when the backend has none."""
    fn = getattr(native, "debug_snapshot", None)
    if fn is None:
        return None, "this build of splat._core has no debug snapshot"
    try:
        return {k: np.asarray(v) for k, v in dict(fn()).items()}, None
    except RuntimeError as exc:
        return None, one_line(exc)


def _derived_gradients(before: dict, after: dict, beta1: float) -> dict:
    """Gradients of one step recovered from the Adam first moments
    (m1 = beta1 m0 + (1 - beta1) g), and the NDC norm of the means2d gradient
    from the densification statistic."""
    out = {}
    for k in PARAM_KEYS:
        m1 = after.get(f"adam_m.{k}")
        if m1 is None:
            continue
        m1 = np.asarray(m1, np.float64)
        m0 = before.get(f"adam_m.{k}")
        m0 = np.zeros_like(m1) if m0 is None or np.shape(m0) != m1.shape else np.asarray(m0, np.float64)
        out[f"grad.{k}"] = (m1 - beta1 * m0) / (1.0 - beta1)
    if "grad_accum" in after:
        g0 = before.get("grad_accum")
        g1 = np.asarray(after["grad_accum"], np.float64)
        g0 = np.zeros_like(g1) if g0 is None or np.shape(g0) != g1.shape else np.asarray(g0, np.float64)
        out["grad.means2d"] = g1 - g0
    return out


def float32_moments(setup: Setup) -> Setup:
    """`setup` with Adam's moments in float32: without a debug snapshot the
    gradients are recovered from the first moment, which bfloat16 would round
    to 2^-8 of itself."""
    return dataclasses.replace(setup, train_overrides={**setup.train_overrides, "adam_moments": "float32"})


def _parity_step(ckpt: Checkpoint, setup: Setup) -> dict:
    """One step from the checkpoint (float32_moments); its buffers and loss."""
    trainer = make_trainer(ckpt, float32_moments(setup), densify_stats=True, one_view=True)
    view = int(trainer._native.view_for_step(ckpt.step + 1))
    stats = trainer.step(read_loss=True)
    snap, why = _snapshot(trainer._native)
    state = trainer.state() if snap is None else None
    return {"loss": stats.loss, "view": view, "snapshot": snap, "why": why, "state": state,
            "beta1": trainer.config.adam_beta1, "backend": trainer.backend,
            "num_gaussians": trainer.num_gaussians}


def _grad_row(a: np.ndarray, b: np.ndarray) -> dict:
    if a.shape != b.shape:
        return {"kind": "gradient", "gated": True, "passed": False, "shape": list(a.shape),
                "detail": f"shapes differ: {list(a.shape)} vs {list(b.shape)}"}
    a64 = a.astype(np.float64, copy=False)
    b64 = b.astype(np.float64, copy=False)
    diff = np.abs(a64 - b64)
    tol = ATOL + RTOL * np.abs(b64)
    bad = ~(diff <= tol)                      # NaN fails
    nonzero = np.abs(b64) > 0
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff[nonzero] / np.abs(b64[nonzero])).max()) if nonzero.any() else 0.0
    if not np.isfinite(a64).all() or not np.isfinite(b64).all():
        max_abs = max_rel = float("nan")
    return {"kind": "gradient", "gated": True, "passed": not bad.any(), "shape": list(a.shape),
            "max_abs": max_abs, "max_rel": max_rel, "violations": int(bad.sum()),
            "worst_over_tol": float(np.max(np.where(np.isnan(diff), np.inf, diff / tol))) if diff.size else 0.0}


def compare_buffers(a: dict, b: dict) -> dict:
    """Rows of the parity table, by buffer name: tile_ranges (byte equality,
    gated), sorted_gauss (differing positions, reported), gradients (gated
    with |a - b| <= 1e-4 + 1e-4 |b|)."""
    rows = {}
    if "tile_ranges" in a or "tile_ranges" in b:
        ta, tb = a.get("tile_ranges"), b.get("tile_ranges")
        if ta is None or tb is None:
            rows["tile_ranges"] = {"kind": "bytes", "gated": True, "passed": False, "detail": "missing on one side"}
        else:
            same = ta.dtype == tb.dtype and ta.shape == tb.shape and ta.tobytes() == tb.tobytes()
            row = {"kind": "bytes", "gated": True, "passed": bool(same), "shape": list(ta.shape)}
            if not same and ta.shape == tb.shape:
                row["differing_tiles"] = int(np.any(ta.reshape(len(ta), -1) != tb.reshape(len(tb), -1), axis=1).sum())
            elif not same:
                row["detail"] = f"shapes differ: {list(ta.shape)} vs {list(tb.shape)}"
            rows["tile_ranges"] = row
    if "sorted_gauss" in a and "sorted_gauss" in b:
        sa, sb = a["sorted_gauss"].ravel(), b["sorted_gauss"].ravel()
        n = min(len(sa), len(sb))
        rows["sorted_gauss"] = {"kind": "order", "gated": False, "passed": True, "shape": [len(sa)],
                                "differing_positions": int((sa[:n] != sb[:n]).sum()) + abs(len(sa) - len(sb))}
    for k in GRAD_KEYS:
        name = f"grad.{k}"
        if name in a and name in b:
            rows[name] = _grad_row(np.asarray(a[name]), np.asarray(b[name]))
        elif name in a or name in b:
            rows[name] = {"kind": "gradient", "gated": True, "passed": False, "detail": "missing on one side"}
    return rows


def _print_parity(console, rows: dict, title: str) -> None:
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    for name in ("buffer", "shape", "max abs", "max rel", "worst/tol", "differing", "gate", "result"):
        t.add_column(name, justify="left" if name in ("buffer", "result") else "right")

    def g(x):
        return "-" if x is None else ("nan" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}")

    for name, r in rows.items():
        differing = r.get("differing_tiles", r.get("differing_positions", r.get("violations")))
        result = "PASS" if r["passed"] else "FAIL"
        if not r["gated"]:
            result = "reported"
        if r.get("detail"):
            result += f" ({r['detail']})"
        style = None if r["passed"] else "bold red"
        t.add_row(name, "x".join(map(str, r.get("shape", []))) or "-", g(r.get("max_abs")), g(r.get("max_rel")),
                  g(r.get("worst_over_tol")), "-" if differing is None else str(differing),
                  "yes" if r["gated"] else "no", result, style=style)
    console.print(t)


def cmd_parity(args) -> int:
    datasets: dict = {}
    files = list(args.parity)
    if args.self_check:
        if len(files) == 2 and os.path.abspath(files[0]) != os.path.abspath(files[1]):
            warn(f"--self compares {files[0]} with itself; {files[1]} is not used")
        files = [files[0], files[0]]
    a = load_setup(files[0], datasets)
    same = os.path.abspath(files[1]) == os.path.abspath(files[0])
    b = a if same else load_setup(files[1], datasets)
    ckpt = read_checkpoint(args.checkpoint or find_checkpoint(run_folder_of(a)))
    _note(f"splat bench --parity: one step from {ckpt.path} (step {ckpt.step}) under "
          + (f"{files[0]} twice" if args.self_check else f"{files[0]} and {files[1]}"))
    ra = _parity_step(ckpt, a)
    rb = _parity_step(ckpt, b)
    if ra["snapshot"] is not None and rb["snapshot"] is not None:
        source, note = "debug_snapshot", None
        rows = compare_buffers(ra["snapshot"], rb["snapshot"])
    else:
        source = "adam_moments"
        why = ra["why"] or rb["why"]
        note = (f"no native debug snapshot ({why}): gradients recovered from the Adam first moments, "
                f"grad.means2d as its NDC norm; tile_ranges and sorted_gauss not compared")
        before = ckpt.arrays
        rows = compare_buffers(_derived_gradients(before, ra["state"] or {}, ra["beta1"]),
                               _derived_gradients(before, rb["state"] or {}, rb["beta1"]))
    passed = bool(rows) and all(r["passed"] for r in rows.values() if r["gated"])
    console = _console()
    title = (f"parity: {files[0]} with itself (--self)" if args.self_check else
             f"parity: A = {files[0]}, B = {files[1]}")
    console.print(f"{title}: step {ckpt.step + 1} (view {ra['view']}), {ra['num_gaussians']:,} Gaussians, "
                  f"{ra['backend']} vs {rb['backend']}; loss A {ra['loss']:.6g}, B {rb['loss']:.6g}")
    if note:
        console.print(f"note: {note}")
    _print_parity(console, rows, f"buffers ({source}); gradients gated at |a-b| <= {ATOL:g} + {RTOL:g} |b|")
    if not rows:
        console.print("nothing to compare")
    console.print(f"parity: {'PASS' if passed else 'FAIL'}")
    out = {"mode": "parity", "a": str(Path(files[0]).resolve()), "b": str(Path(files[1]).resolve()),
           "self": bool(args.self_check), "checkpoint": str(ckpt.path.resolve()), "step": ckpt.step + 1,
           "view": ra["view"], "backend_a": ra["backend"], "backend_b": rb["backend"],
           "backend_config_a": a.backend.to_dict(), "backend_config_b": b.backend.to_dict(),
           "loss_a": ra["loss"], "loss_b": rb["loss"], "source": source, "note": note,
           "atol": ATOL, "rtol": RTOL, "buffers": rows, "passed": passed}
    path = _run_dir(a, args.out) / "parity.json"
    write_json(path, out)
    console.print(f"wrote {path}")
    return 0 if passed else 1
