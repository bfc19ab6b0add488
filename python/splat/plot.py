"""Small line charts drawn with Pillow (no plotting library needed).

`training_figure` draws the training curves of a run -- loss, test PSNR and
the number of Gaussians over the steps -- as stacked panels sharing the step
axis; `save_training_plot` writes it as a PNG, atomically.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = ["Series", "Panel", "draw_panels", "training_figure", "save_training_plot", "nice_ticks"]

BLUE = (31, 119, 180)
ORANGE = (230, 110, 20)
GREEN = (44, 160, 44)
GRID = (225, 225, 225)
AXIS = (60, 60, 60)
TEXT = (20, 20, 20)


@dataclass
class Series:
    x: list
    y: list
    color: tuple = BLUE
    label: str = ""
    markers: bool = False     # draw a dot at every point (sparse series such as evaluations)


@dataclass
class Panel:
    title: str
    series: list = field(default_factory=list)
    log_y: bool = False
    y_format: str = "{:g}"


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, target)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 5.0, 10.0) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + 1e-9 * step and len(ticks) < 50:
        ticks.append(0.0 if abs(t) < 1e-12 * step else t)
        t += step
    return ticks


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks for a log axis over [lo, hi] (lo > 0): powers of ten, with 2 and 5 when the range is short."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1.0,) if b - a > 3 else (1.0, 2.0, 5.0)
    out = [m * 10.0 ** e for e in range(a, b + 1) for m in mults]
    return [t for t in out if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]


def _fmt_step(v: float) -> str:
    if abs(v) >= 1000 and v % 1000 == 0:
        return f"{int(v // 1000)}k"
    if abs(v) >= 1000 and v % 100 == 0:
        return f"{v / 1000:g}k"
    return f"{v:g}"


def _finite_pairs(s: Series, log_y: bool):
    xs, ys = [], []
    for x, y in zip(s.x, s.y):
        try:
            x, y = float(x), float(y)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x) and math.isfinite(y) and (y > 0 or not log_y):
            xs.append(x)
            ys.append(y)
    return xs, ys


def _font():
    try:
        return ImageFont.load_default(size=13)
    except TypeError:  # Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


def draw_panels(panels: list[Panel], *, width: int = 900, panel_height: int = 230,
                x_label: str = "step", title: str | None = None) -> Image.Image:
    """Stacked line-chart panels sharing one x range; returns an RGB image."""
    font = _font()
    left, right, top_pad, bottom = 78, 24, 30, 40
    title_h = 28 if title else 0
    height = title_h + len(panels) * panel_height + bottom
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    if title:
        d.text((left, 8), title, fill=TEXT, font=font)

    all_x = [x for p in panels for s in p.series for x in _finite_pairs(s, p.log_y)[0]]
    x_lo, x_hi = (min(all_x), max(all_x)) if all_x else (0.0, 1.0)
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 1.0, x_hi + 1.0
    x_ticks = nice_ticks(x_lo, x_hi, 8)
    plot_w = width - left - right

    def px(x):
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    for k, panel in enumerate(panels):
        y0 = title_h + k * panel_height + top_pad
        y1 = title_h + (k + 1) * panel_height - 8
        d.text((left, y0 - 20), panel.title, fill=TEXT, font=font)
        pairs = [(s, *_finite_pairs(s, panel.log_y)) for s in panel.series]
        ys = [y for _, _, yy in pairs for y in yy]
        if ys:
            lo, hi = min(ys), max(ys)
        else:
            lo, hi = (0.1, 1.0) if panel.log_y else (0.0, 1.0)
        if panel.log_y:
            if hi <= lo:
                lo, hi = lo / 2.0, hi * 2.0
            t_lo, t_hi = math.log10(lo), math.log10(hi)
            pad = 0.05 * (t_hi - t_lo)
            t_lo, t_hi = t_lo - pad, t_hi + pad
            y_ticks = _log_ticks(10.0 ** t_lo, 10.0 ** t_hi)

            def tr(y):
                return math.log10(y)
        else:
            if hi <= lo:
                lo, hi = lo - 1.0, hi + 1.0
            pad = 0.06 * (hi - lo)
            t_lo, t_hi = lo - pad, hi + pad
            y_ticks = nice_ticks(t_lo, t_hi, 5)

            def tr(y):
                return y

        def py(y):
            return y1 - (tr(y) - t_lo) / (t_hi - t_lo) * (y1 - y0)

        # grid, ticks and frame
        for t in x_ticks:
            d.line([(px(t), y0), (px(t), y1)], fill=GRID)
        for t in y_ticks:
            yy = py(t)
            d.line([(left, yy), (left + plot_w, yy)], fill=GRID)
            label = panel.y_format.format(t)
            tw = d.textlength(label, font=font)
            d.text((left - 6 - tw, yy - 7), label, fill=TEXT, font=font)
        d.rectangle([left, y0, left + plot_w, y1], outline=AXIS)
        # data
        for s, xs, yv in pairs:
            pts = [(px(x), py(y)) for x, y in zip(xs, yv)]
            if len(pts) > 1:
                d.line(pts, fill=s.color, width=2, joint="curve")
            if s.markers or len(pts) == 1:
                for (a, b) in pts:
                    d.ellipse([a - 3.5, b - 3.5, a + 3.5, b + 3.5], fill=s.color)
        # legend (top right) for labelled series
        lx = left + plot_w - 8
        for s, xs, _ in reversed(pairs):
            if not s.label:
                continue
            label = s.label if xs else f"{s.label} (no data)"
            tw = d.textlength(label, font=font)
            lx -= tw + 26
            d.line([(lx, y0 + 12), (lx + 16, y0 + 12)], fill=s.color, width=3)
            d.text((lx + 20, y0 + 5), label, fill=TEXT, font=font)
    # shared x axis labels under the last panel
    base = title_h + len(panels) * panel_height - 8
    for t in x_ticks:
        label = _fmt_step(t)
        tw = d.textlength(label, font=font)
        d.text((px(t) - tw / 2, base + 4), label, fill=TEXT, font=font)
    tw = d.textlength(x_label, font=font)
    d.text((left + plot_w / 2 - tw / 2, base + 21), x_label, fill=TEXT, font=font)
    return img


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average (shrinking at the ends)."""
    if window <= 1 or len(y) < 3:
        return y
    k = np.ones(window)
    num = np.convolve(y, k, mode="same")
    den = np.convolve(np.ones_like(y), k, mode="same")
    return num / den


def training_figure(history, evals, *, title: str | None = None, width: int = 900) -> Image.Image:
    """The training curves of a run.

    history: (step, loss, #Gaussians) tuples as `Trainer.history` holds them
    (NaN losses are skipped); evals: (step, psnr) pairs or dicts with "step"
    and "psnr" (and optionally "ssim")."""
    hist = [(float(s), float(l), float(n)) for s, l, n in history]
    steps = np.array([h[0] for h in hist]) if hist else np.zeros(0)
    loss = np.array([h[1] for h in hist]) if hist else np.zeros(0)
    count = np.array([h[2] for h in hist]) if hist else np.zeros(0)
    ok = np.isfinite(loss) & (loss > 0)
    ls, lv = steps[ok], loss[ok]
    loss_series = [Series(list(ls), list(lv), color=(170, 200, 230), label="loss")]
    if len(lv) >= 20:
        w = max(3, len(lv) // 50)
        loss_series.append(Series(list(ls), list(np.exp(_smooth(np.log(lv), w))), color=BLUE,
                                  label="smoothed"))
    ev_steps, ev_psnr, ev_ssim = [], [], []
    for e in evals:
        if isinstance(e, dict):
            ev_steps.append(e["step"])
            ev_psnr.append(e["psnr"])
            ev_ssim.append(e.get("ssim"))
        else:
            ev_steps.append(e[0])
            ev_psnr.append(e[1])
            ev_ssim.append(e[2] if len(e) > 2 else None)
    panels = [
        Panel("training loss (0.8 L1 + 0.2 D-SSIM)", loss_series, log_y=True, y_format="{:.3g}"),
        Panel("test PSNR (dB)", [Series(ev_steps, ev_psnr, color=ORANGE, markers=True)],
              y_format="{:.1f}"),
        Panel("Gaussians", [Series(list(steps), list(count), color=GREEN)], y_format="{:,.0f}"),
    ]
    return draw_panels(panels, width=width, title=title)


def save_training_plot(path, history, evals, *, title: str | None = None) -> None:
    """Write `training_figure(...)` as a PNG, atomically."""
    from .io.atomic import atomic_write
    img = training_figure(history, evals, title=title)
    with atomic_write(path, "wb") as f:
        img.save(f, format="PNG")
