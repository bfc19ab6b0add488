"""Render any scene (a run folder, a PLY or another scene file) along a camera
path: an orbit around the scene, the training / test cameras, or cameras from
a JSON file; to PNG frames and / or an MP4 (imageio-ffmpeg, extra `[view]`).

The orbit's centre, up axis, radius and elevation come from the training
cameras where they are known (cameras.json of the run, or of the reference
3DGS layout two folders up from its point_cloud.ply) and from the Gaussians
otherwise; see `orbit_frame`. A forward-facing capture (all cameras looking
one way) gets an ellipse in front of the scene instead, on the cameras' side.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .camera import Camera
from .data.layout import axes_meeting_point, camera_axes
from .gaussians import Gaussians

AXES = {"+x": (1, 0, 0), "-x": (-1, 0, 0), "+y": (0, 1, 0), "-y": (0, -1, 0), "+z": (0, 0, 1), "-z": (0, 0, -1)}
# A scene without cameras is most often a COLMAP reconstruction, whose world
# axes are the first photo's (OpenCV: y down), so its up is -y.
DEFAULT_UP = "-y"
DEFAULT_FOV_DEG = 50.0
FORWARD_FACING_DEG = 30.0   # a capture whose view directions all lie within this of their mean


class SceneRenderer:
    """Renders fixed Gaussians with splat's rasterizer on the chosen backend
    (the same interface as Trainer.render, so `splat.evaluate` takes it)."""

    def __init__(self, gaussians: Gaussians, backend_config=None, background=(1.0, 1.0, 1.0),
                 antialiased: bool = False, blend_stop: str = "splat"):
        from .rasterizer import Rasterizer, is_chunked_stop
        is_chunked_stop(blend_stop)  # a bad value fails here, not at the first render
        self.gaussians = gaussians
        self.antialiased = bool(antialiased)
        self.blend_stop = blend_stop
        self.background = tuple(float(b) for b in background)
        self._raster = Rasterizer(backend_config)
        self.sh_degree = gaussians.sh_degree
        self.step_count = None

    @property
    def backend(self) -> str:
        return self._raster.backend

    @property
    def num_gaussians(self) -> int:
        return len(self.gaussians)

    def render(self, camera: Camera, background=None) -> np.ndarray:
        # A background like 0.1 is not exactly a float32; it is meant as one.
        bg = np.asarray(self.background if background is None else background, np.float32)
        return self._raster.forward(self.gaussians, camera, sh_degree=self.sh_degree, background=bg,
                                    antialiased=self.antialiased, blend_stop=self.blend_stop).image


# --------------------------------------------------------------------------- camera maths


def look_at(position, target, up) -> np.ndarray:
    """World-to-camera (OpenCV axes: x right, y down, z forward) of a camera at
    `position` looking at `target` with `up` pointing up in the image."""
    p = np.asarray(position, np.float64)
    z = np.asarray(target, np.float64) - p
    z /= np.linalg.norm(z)
    u = np.asarray(up, np.float64)
    x = np.cross(z, u)
    if np.linalg.norm(x) < 1e-9:                    # looking straight along up: any right will do
        x = np.cross(z, np.roll(u, 1))
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = x, y, z, p
    return np.linalg.inv(c2w)


def _gaussian_centre(g: Gaussians):
    """Median of the fairly opaque Gaussians' positions, and their 90th
    percentile distance from it (robust to the floaters around a scene)."""
    m = g.means.astype(np.float64)
    opaque = g.opacity_logits > 0.0
    if opaque.sum() >= 10:
        m = m[opaque]
    if len(m) == 0:
        return np.zeros(3), 1.0
    centre = np.median(m, axis=0)
    extent = float(np.percentile(np.linalg.norm(m - centre, axis=1), 90)) if len(m) > 1 else 1.0
    return centre, max(extent, 1e-6)


@dataclass
class OrbitFrame:
    centre: np.ndarray
    up: np.ndarray
    radius: float
    elevation: float          # radians above the plane through the centre normal to up
    start: np.ndarray         # unit vector in that plane: the orbit's first direction
    fx: float | None          # the training cameras' focal length (pixels) at their width, when known
    width: int | None
    height: int | None
    from_cameras: bool
    # A forward-facing capture (every training camera looks within FORWARD_FACING_DEG of
    # their mean direction, the LLFF / nerfstudio case): the default path is an ellipse in
    # the cameras' plane around their mean centre, looking at `centre` (in front of them),
    # instead of an orbit that would spend half its frames behind the scene.
    forward_facing: bool = False
    origin: np.ndarray | None = None        # the cameras' mean centre
    forward: np.ndarray | None = None       # their mean view direction (unit)
    radii: tuple = (0.0, 0.0)               # the ellipse's half-axes along right and up


def orbit_frame(g: Gaussians, cameras=(), up: str | None = None) -> OrbitFrame:
    """Where to orbit. With training cameras: the point nearest to all their
    optical axes (least squares; the Gaussians' centre when the axes are nearly
    parallel), their mean up vector, their median distance and elevation, and
    the first camera's direction as the start. Without: the Gaussians' robust
    centre, `up` (default -y), and the distance at which the 90th-percentile
    sphere of the Gaussians fills a 50-degree view, 20 degrees up."""
    cams = [c for c in cameras]
    g_centre, g_extent = _gaussian_centre(g)
    if cams:
        centres, fwd, ups = camera_axes(cams)
        point = axes_meeting_point(centres, fwd)
        centre = point if point is not None else g_centre
        up_v = ups.mean(axis=0)
        if up is not None:
            up_v = np.asarray(AXES[up], np.float64)
        elif np.linalg.norm(up_v) < 1e-6:
            up_v = np.asarray(AXES[DEFAULT_UP], np.float64)
        up_v = up_v / np.linalg.norm(up_v)
        rel = centres - centre
        dist = np.linalg.norm(rel, axis=1)
        radius = float(np.median(dist)) if np.median(dist) > 1e-6 else 2.0 * g_extent
        elev = float(np.median(np.arcsin(np.clip((rel @ up_v) / np.maximum(dist, 1e-12), -1, 1))))
        start = rel[0] - (rel[0] @ up_v) * up_v
        first = cams[0]
        fx, width, height = first.fx, first.width, first.height
    else:
        centre = g_centre
        up_v = np.asarray(AXES[up or DEFAULT_UP], np.float64)
        radius = 1.15 * g_extent / math.tan(math.radians(DEFAULT_FOV_DEG) / 2)
        elev = math.radians(20.0)
        start = np.zeros(3)
        fx = width = height = None
    if np.linalg.norm(start) < 1e-9:
        start = np.cross(up_v, np.roll(up_v, 1))
    start = start / np.linalg.norm(start)
    frame = OrbitFrame(centre, up_v, radius, elev, start, fx, width, height, bool(cams))
    if cams:
        _forward_facing(frame, centres, fwd, g_centre)
    return frame


def _forward_facing(frame: OrbitFrame, centres, fwd, g_centre) -> None:
    """Marks `frame` forward-facing when every camera looks within FORWARD_FACING_DEG of
    the cameras' mean direction, and sets the ellipse the default path follows: centred on
    the cameras' mean centre, in their plane (normal to that direction), with the 90th
    percentile of their offsets along right and up as half-axes (LLFF's spiral radii),
    looking at the scene centre, moved in front of the cameras if it is not."""
    mean = fwd.mean(axis=0)
    if np.linalg.norm(mean) < 1e-9:
        return
    mean = mean / np.linalg.norm(mean)
    if np.min(fwd @ mean) < math.cos(math.radians(FORWARD_FACING_DEG)):
        return
    origin = centres.mean(axis=0)
    up = frame.up - (frame.up @ mean) * mean
    if np.linalg.norm(up) < 1e-6:      # looking along up: nothing to orbit around in the image plane
        return
    up = up / np.linalg.norm(up)
    right = np.cross(mean, up)
    rel = centres - origin
    depth = float((frame.centre - origin) @ mean)
    if depth <= 1e-6:                  # the axes met behind the cameras: the Gaussians' centre instead
        depth = float((g_centre - origin) @ mean)
        frame.centre = g_centre if depth > 1e-6 else origin + mean * max(frame.radius, 1.0)
        depth = float((frame.centre - origin) @ mean)
    floor = 0.05 * depth               # cameras at one spot still move a little
    rx = max(float(np.percentile(np.abs(rel @ right), 90)), floor)
    ry = max(float(np.percentile(np.abs(rel @ up), 90)), floor)
    frame.forward_facing, frame.origin, frame.forward, frame.radii = True, origin, mean, (rx, ry)
    frame.up = up
    frame.start = right


def orbit_cameras(frame: OrbitFrame, frames: int, width: int | None = None, height: int | None = None,
                  fov_deg: float | None = None, radius_scale: float = 1.0,
                  elevation_deg: float | None = None) -> list[Camera]:
    """`frames` cameras evenly around `frame`'s centre, starting at its start direction."""
    if frames < 1:
        raise ValueError(f"[splat] frames: expected at least 1, got {frames}")
    w = width or frame.width or 800
    h = height or (int(round(w * frame.height / frame.width)) if frame.width else int(round(0.75 * w)))
    if fov_deg is not None:
        fx = 0.5 * w / math.tan(math.radians(fov_deg) / 2)
    elif frame.fx is not None:
        fx = frame.fx * w / frame.width
    else:
        fx = 0.5 * w / math.tan(math.radians(DEFAULT_FOV_DEG) / 2)
    if frame.forward_facing and elevation_deg is None:
        return _ellipse_cameras(frame, frames, w, h, fx, radius_scale)
    elev = frame.elevation if elevation_deg is None else math.radians(elevation_deg)
    e1 = frame.start
    e2 = np.cross(frame.up, e1)
    r = frame.radius * radius_scale
    cams = []
    for i in range(frames):
        a = 2.0 * math.pi * i / frames
        d = math.cos(elev) * (math.cos(a) * e1 + math.sin(a) * e2) + math.sin(elev) * frame.up
        w2c = look_at(frame.centre + r * d, frame.centre, frame.up)
        cams.append(Camera(w2c.astype(np.float32), fx, fx, 0.5 * w, 0.5 * h, w, h))
    return cams


def _ellipse_cameras(frame: OrbitFrame, frames: int, w: int, h: int, fx: float, radius_scale: float):
    """A forward-facing capture's path: `frames` cameras around the ellipse of `frame`
    (half-axes times `radius_scale`), starting right of the cameras' mean centre, each
    looking at the scene centre."""
    right = frame.start
    up = frame.up
    rx, ry = (r * radius_scale for r in frame.radii)
    cams = []
    for i in range(frames):
        a = 2.0 * math.pi * i / frames
        eye = frame.origin + rx * math.cos(a) * right + ry * math.sin(a) * up
        w2c = look_at(eye, frame.centre, up)
        cams.append(Camera(w2c.astype(np.float32), fx, fx, 0.5 * w, 0.5 * h, w, h))
    return cams


def resized(cam: Camera, width: int | None, height: int | None) -> Camera:
    """`cam` at another resolution, the field of view kept (aspect from `width` alone if no height)."""
    if not width and not height:
        return cam
    sx = (width / cam.width) if width else height / cam.height
    sy = (height / cam.height) if height else sx
    w = int(round(cam.width * sx))
    h = int(round(cam.height * sy))
    return Camera(cam.world_to_camera, cam.fx * sx, cam.fy * sy, cam.cx * sx, cam.cy * sy, w, h)


def find_cameras_json(source) -> Path | None:
    """cameras.json of a run folder, or next to a scene file, or of the 3DGS
    reference layout (RUN/point_cloud/iteration_N/point_cloud.ply)."""
    p = Path(source).resolve()
    folder = p if p.is_dir() else p.parent
    for d in (folder, folder.parent, folder.parent.parent):
        if (d / "cameras.json").is_file():
            return d / "cameras.json"
    return None


# --------------------------------------------------------------------------- output


def to_uint8(img) -> np.ndarray:
    return np.clip(np.rint(np.asarray(img, np.float32) * 255.0), 0, 255).astype(np.uint8)


class VideoWriter:
    """An H.264 MP4 through imageio-ffmpeg, written to a temporary name and
    renamed when complete. Odd sizes are padded by one edge pixel (yuv420p)."""

    def __init__(self, path, width: int, height: int, fps: float = 30.0):
        try:
            import imageio_ffmpeg
        except ImportError:
            raise RuntimeError("[splat] --video needs imageio-ffmpeg: pip install 'splat-gs[view]' "
                               "(or pip install imageio-ffmpeg)") from None
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.stem}.{os.getpid()}.tmp{self.path.suffix or '.mp4'}")
        self.size = (width + width % 2, height + height % 2)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._gen = imageio_ffmpeg.write_frames(str(self.tmp), self.size, fps=fps, codec="libx264",
                                                pix_fmt_out="yuv420p", macro_block_size=1, quality=8,
                                                ffmpeg_log_level="error")
        self._gen.send(None)
        self.frames = 0

    def add(self, rgb_uint8: np.ndarray) -> None:
        h, w = rgb_uint8.shape[:2]
        pad = ((0, self.size[1] - h), (0, self.size[0] - w), (0, 0))
        self._gen.send(np.ascontiguousarray(np.pad(rgb_uint8, pad, mode="edge")))
        self.frames += 1

    def close(self, ok: bool = True) -> None:
        try:
            self._gen.close()
        finally:
            if ok and self.frames:
                os.replace(self.tmp, self.path)
            elif self.tmp.exists():
                self.tmp.unlink()


def progress_bar(label: str, *, transient: bool = False):
    """A rich progress bar on stderr for work over views: label, bar, done/total, time left."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=transient)


def render_path(renderer, cameras, names=None, *, out_dir=None, video=None, fps: float = 30.0,
                supersample: int = 1, progress: bool = True, background=None) -> int:
    """Render every camera; PNGs into `out_dir` (when given) and frames into
    `video` (when given). Returns the number of frames."""
    from PIL import Image

    from .io.atomic import atomic_write
    from .metrics import box_downsample
    cameras = list(cameras)
    names = list(names) if names is not None else [f"frame_{i:04d}" for i in range(len(cameras))]
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    writer = VideoWriter(video, cameras[0].width, cameras[0].height, fps) if video else None
    bar = task = None
    if progress:
        bar = progress_bar("render")
        bar.start()
        task = bar.add_task("render", total=len(cameras))
    ok = False
    try:
        for cam, name in zip(cameras, names):
            img = renderer.render(cam.scaled(supersample) if supersample > 1 else cam, background=background)
            pixels = to_uint8(box_downsample(img, supersample))
            if out_dir is not None:
                with atomic_write(Path(out_dir) / f"{name}.png", "wb") as f:
                    Image.fromarray(pixels).save(f, format="PNG")
            if writer is not None:
                if pixels.shape[:2] != (cameras[0].height, cameras[0].width):
                    raise ValueError(f"[splat] {name}: a video needs one frame size; this camera is "
                                     f"{pixels.shape[1]}x{pixels.shape[0]}, the first "
                                     f"{cameras[0].width}x{cameras[0].height} (give --width/--height)")
                writer.add(pixels)
            if bar is not None:
                bar.advance(task)
        ok = True
    finally:
        if bar is not None:
            bar.stop()
        if writer is not None:
            writer.close(ok)
    return len(cameras)


# --------------------------------------------------------------------------- opening a model


@dataclass
class OpenedModel:
    renderer: object              # .render(camera, background=None), .backend, .num_gaussians, .step_count
    gaussians: Gaussians
    background: tuple
    source: str
    cameras: list                 # [(name, Camera, "train" | "test")] from cameras.json, when found
    run_dir: Path | None
    antialiased: bool = False     # the rasterization mode it renders with
    blend_stop: str = "splat"     # and where its pixels' blend stops ([train] blend_stop)
    # no background was given or recorded (a scene file outside a run): `background` is
    # white for want of better; use_background() puts a dataset's default in its place
    background_default: bool = False

    def use_background(self, background) -> None:
        """Render on `background` from now on (the renderer's default included)."""
        self.background = tuple(float(b) for b in background)
        self.background_default = False
        if isinstance(self.renderer, SceneRenderer):
            self.renderer.background = self.background


def _run_train_table(run_dir) -> tuple[Path, dict] | None:
    """(path, [train] table) of a run folder's config.toml (None: no config there)."""
    if run_dir is None or not (Path(run_dir) / "config.toml").is_file():
        return None
    try:
        import tomllib as toml
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as toml
    path = Path(run_dir) / "config.toml"
    try:
        with open(path, "rb") as f:
            return path, toml.load(f).get("train", {})
    except (OSError, toml.TOMLDecodeError) as e:
        raise ValueError(f"[splat] {path}: cannot read it ({e})") from None


def run_antialiased(run_dir) -> bool | None:
    """[train] antialiased of a run folder's config.toml (None: no config there)."""
    found = _run_train_table(run_dir)
    if found is None:
        return None
    path, train = found
    value = train.get("antialiased", False)
    if not isinstance(value, bool):
        raise ValueError(f"[splat] {path}: train.antialiased: expected true or false, got {value!r}")
    return value


def run_blend_stop(run_dir) -> str | None:
    """[train] blend_stop of a run folder's config.toml (None: no config there; a
    config written before the key: the rule such runs trained with, as a resume reads it)."""
    from .config import BLEND_STOPS
    from .trainer import TRAIN_KEYS_ADDED
    found = _run_train_table(run_dir)
    if found is None:
        return None
    path, train = found
    value = train.get("blend_stop", TRAIN_KEYS_ADDED["blend_stop"])
    if value not in BLEND_STOPS:
        raise ValueError(f"[splat] {path}: train.blend_stop: expected one of "
                         f"{', '.join(map(repr, BLEND_STOPS))}, got {value!r}")
    return value


def open_model(source, backend_config, background=None, antialiased: bool | None = None) -> OpenedModel:
    """A renderer for a run folder, a scene file or a checkpoint. A checkpoint
    renders through a Trainer holding it (exactly what training evaluated);
    anything else through a SceneRenderer. `antialiased` None renders in the
    run's mode (the checkpoint's or the run folder's config; a file alone carries
    no mode: classic); True / False overrides it."""
    from . import formats
    from .data import Dataset
    from .trainer import Trainer, read_checkpoint
    src = Path(source)
    if src.suffix.lower() == ".npz" and not src.is_dir():
        meta, arrays = read_checkpoint(src)
        bg = tuple(background or meta.get("background", (1.0, 1.0, 1.0)))
        unknown_bg = background is None and not meta.get("background")
        # The checkpoint's trainer wants a dataset of its own image size; the
        # views to render are independent of it, so a one-view stand-in does.
        w, h = int(meta["width"]), int(meta["height"])
        stand_in = Dataset(cameras=[Camera(np.eye(4), w, w, 0.5 * w, 0.5 * h, w, h)],
                           images=np.zeros((1, h, w, 3), np.uint8), names=["checkpoint"],
                           background=bg, scene_extent=meta.get("scene_extent", 1.0))
        trainer = Trainer.load_checkpoint(src, stand_in, backend_config, for_render=True)  # validates the checkpoint
        g = Gaussians(arrays["means"], arrays["log_scales"], arrays["quats"], arrays["opacity_logits"],
                      arrays["sh"])
        mode = trainer.config.antialiased if antialiased is None else bool(antialiased)
        stop = trainer.config.blend_stop
        run_dir = src.parent
        renderer = trainer
        if mode != trainer.config.antialiased:  # the trainer renders only its own mode
            renderer = SceneRenderer(g, backend_config, bg, antialiased=mode, blend_stop=stop)
    else:
        scene = formats.load_scene(src)
        bg = tuple(background or scene.background)
        g, run_dir = scene.gaussians, scene.run_dir
        stored = scene.meta.get("train_config", {}).get("antialiased") if scene.meta else None
        if stored is None:
            stored = run_antialiased(run_dir)
        mode = bool(stored) if antialiased is None else bool(antialiased)
        # Where the run's pixels stopped (a file alone: the 3DGS rule).
        stop = scene.meta.get("train_config", {}).get("blend_stop") if scene.meta else None
        stop = stop or run_blend_stop(run_dir) or "splat"
        renderer = SceneRenderer(g, backend_config, bg, antialiased=mode, blend_stop=stop)
        unknown_bg = background is None and scene.background_default
    cams_path = find_cameras_json(src)
    cams = []
    if cams_path is not None:
        for split in ("train", "test"):
            cams += [(n, c, split) for n, c in formats.load_cameras_json(cams_path, split)]
    if run_dir is None and cams_path is not None:
        run_dir = cams_path.parent
    return OpenedModel(renderer, g, bg, str(src), cams, run_dir, mode, stop, background_default=unknown_bg)
