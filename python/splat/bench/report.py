"""`splat bench`'s tables: the runs of a replay and their ts_* timings."""
from __future__ import annotations

def _ms(x) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"


def _print_runs(console, res: dict, title: str) -> None:
    from rich.table import Table
    views = res.get("views_per_step", 1)
    if views > 1:   # a step of the run's recipe: one update over its batch of views
        title = f"{title} ({views} views a step)"
    t = Table(title=title, title_justify="left")
    t.add_column("repeat", justify="right")
    t.add_column("median ms/step", justify="right")
    t.add_column("mean", justify="right")
    t.add_column("min", justify="right")
    t.add_column("sigma %", justify="right")
    for i, r in enumerate(res["runs"], 1):
        t.add_row(str(i), _ms(r["median_ms"]), _ms(r["mean_ms"]), _ms(r["min_ms"]), f"{r['sigma_pct']:.1f}")
    t.add_row("all", _ms(res["median_ms"]), _ms(res["mean_ms"]), _ms(res["min_ms"]),
              f"{res['sigma_pct']:.1f}", style="bold")
    console.print(t)


def _print_timings(console, res: dict, title: str) -> None:
    from rich.table import Table
    table = res.get("timings")
    if not table:
        if res.get("timings_note"):
            console.print(f"ts_* timings: {res['timings_note']}")
        return
    t = Table(title=title, title_justify="left")
    for name in ("label", "calls/step", "mean us/call", "ms/step", "upload", "alloc", "gpu", "readback"):
        t.add_column(name, justify="left" if name == "label" else "right")
    for label, r in table.items():
        t.add_row(label, f"{r['calls_per_step']:.2f}", f"{r['mean_us']:.1f}", _ms(r["ms_per_step"]),
                  _ms(r["upload_ms_per_step"]), _ms(r["alloc_ms_per_step"]), _ms(r["gpu_ms_per_step"]),
                  _ms(r["readback_ms_per_step"]))
    console.print(t)
    busy = res.get("gpu_busy_ms_per_step")
    if busy is not None:
        share = f" ({100.0 * busy / res['mean_ms']:.0f}% of the mean step)" if res["mean_ms"] > 0 else ""
        what = "GPU busy" if res["backend"] != "cpu" else "busy (the cpu backend's compute)"
        console.print(f"{what}: {_ms(busy)} ms/step{share}")


def _describe(res: dict) -> str:
    w, h = res["image_size"]
    sizes = f"{w}x{h}" if res.get("image_sizes", 1) == 1 else f"up to {w}x{h} ({res['image_sizes']} sizes)"
    return (f"{res['num_gaussians']:,} Gaussians, {res['views']} views {sizes}, {res['backend']}, "
            f"from step {res['start_step']} ({res['checkpoint']})")
