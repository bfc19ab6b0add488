"""A viser server showing splat's own renders of the scene in the browser.

Each browser tab is a viser client: the browser does the camera controls
(orbit, and fly with the keyboard) and reports its camera; a render thread
turns that camera into a splat `Camera` at the canvas's aspect, renders it
with splat's rasterizer on the chosen backend and sends the image as the
scene's background. Training cameras are drawn as frustums (click one to
jump there); the GUI has a view list, a resolution limit, the resolution
used while the camera moves, and an image save.

Why splat's rasterizer rather than viser's own Gaussian-splat renderer: what
is shown is exactly what splat renders and evaluates (the same projection,
SH up to degree 3, background, and tile blend), a live training view needs
only the new parameters on the server, never millions of splats sent to the
browser, and the browser needs no GPU. The cost is a round trip per frame,
kept small by rendering a reduced resolution while the camera moves.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._validate import positive_float
from ..gaussians import Gaussians
from ..render_path import SceneRenderer, orbit_frame, to_uint8
from .camera_math import camera_from_pose, pose_from_camera, render_size

MOVING_SECONDS = 0.25           # a camera update younger than this means "moving": preview resolution


@dataclass
class _ClientState:
    dirty: bool = True
    last_move: float = 0.0
    preview_shown: bool = False
    renders: int = 0
    last_camera: object = None  # the splat Camera of the last image sent


DEFAULT_PORT = 8080


class PortError(ValueError):
    """A port the viewer cannot serve on (out of range, or taken): a usage error."""

    exit_status = 2   # splat's command line: a usage error


def check_address(host, port=None) -> int:
    """The port the viewer serves on at `host`: `port` itself, or with None the first
    free one from DEFAULT_PORT up. ValueError naming `host` unless the viewer can
    listen there (a name must resolve; viser retries an address it cannot bind
    instead of failing); PortError (a ValueError) naming `port` when it is out of
    1..65535 or already taken (viser would move to the next one, and past 65535
    fail in a thread and never serve). No viser needed."""
    import socket
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise PortError(f"[splat] port: expected an integer in 1..65535, got {port!r}")
    if not isinstance(host, str) or not host:
        raise ValueError(f"[splat] host: expected an address or host name, got {host!r}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port or DEFAULT_PORT,
                                                             type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:   # an address of this machine? (any free port)
            probe.bind((address[0], 0) + tuple(address[2:]))
    except OSError as exc:
        raise ValueError(f"[splat] host: cannot serve on {host!r} ({exc.strerror or exc}); use an address of "
                         f"this machine, 127.0.0.1 or 0.0.0.0") from None

    def free(p: int) -> bool:
        with socket.socket(family, kind, proto) as probe:
            if os.name == "posix":   # as a server binds: a port left in TIME_WAIT is free
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address[0], p) + tuple(address[2:]))
                return True
            except OSError:
                return False

    if port is not None:
        if not free(port):
            raise PortError(f"[splat] port: {port} is already in use on {host}; choose another port, or leave "
                            f"the port unset for the first free one from {DEFAULT_PORT}")
        return port
    for p in range(DEFAULT_PORT, 65536):
        if free(p):
            return p
    raise PortError(f"[splat] port: no free port on {host} from {DEFAULT_PORT} to 65535")


def require_viser():
    """The viser module, or the one-line error that says how to install it."""
    try:
        import viser
    except ImportError:
        raise RuntimeError("[splat] the viewer needs viser: pip install 'splat-gs[view]' (or pip install viser)") \
            from None
    return viser


@dataclass
class ViewerStats:
    renders: int = 0
    render_seconds: float = 0.0
    last_ms: float = 0.0
    last_size: tuple = (0, 0)
    updates: int = 0
    extra: dict = field(default_factory=dict)


class Viewer:
    """Serves `gaussians` at http://host:port. `cameras`: [(name, Camera, split)].
    `port`: None for the first free one from 8080 up; a port given must be free
    (PortError, a ValueError naming `port`, otherwise)."""

    def __init__(self, gaussians: Gaussians, *, cameras=(), backend_config=None, background=(1.0, 1.0, 1.0),
                 host: str = "127.0.0.1", port: int | None = None, up: str | None = None, save_dir=".",
                 max_fps: float = 30.0, max_side: int = 1024, preview_scale: float = 0.5,
                 duty_cycle: float | None = None, initial_view: str | None = None, image_format: str = "jpeg",
                 show_cameras: bool = True, external_pump: bool = False, label: str = "splat",
                 antialiased: bool = False, blend_stop: str = "splat"):
        port = check_address(host, port)
        max_fps = positive_float("max_fps", max_fps)
        if Path(save_dir).exists() and not Path(save_dir).is_dir():
            raise ValueError(f"[splat] save_dir: {save_dir} is a file, not a folder")
        self.antialiased = bool(antialiased)  # the rasterization mode of every render
        from ..rasterizer import is_chunked_stop
        is_chunked_stop(blend_stop)  # a bad value fails here, not in the render thread's first frame
        self.blend_stop = blend_stop          # and its blend's stop ([train] blend_stop)
        self.cameras = [(str(n), c, s) for n, c, s in cameras]
        self.background = tuple(float(b) for b in background)
        self.backend_config = backend_config
        self.host, self.port, self._port_given = host, port, port is not None
        self.save_dir = Path(save_dir)
        self.max_fps = float(max_fps)
        self.max_side = int(max_side)
        self.preview_scale = float(preview_scale)
        self.duty_cycle = duty_cycle
        self.image_format = image_format
        self.label = label
        self.frame = orbit_frame(gaussians, [c for _, c, s in self.cameras if s == "train"], up=up)
        self.initial_view = initial_view
        self.show_cameras = show_cameras
        # With external_pump the owner's thread renders (Viewer.pump); the CPU
        # backend's thread pool serves one caller at a time, so a live view
        # must not render beside a training step.
        self.external_pump = external_pump
        self._save_requests: list = []
        self.stats = ViewerStats()
        self._gaussians = gaussians
        self._version = 0
        self._lock = threading.Lock()
        self._render_lock = threading.Lock()     # one Rasterizer: the render thread and GUI callbacks share it
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._clients: dict[int, _ClientState] = {}
        self._renderer: SceneRenderer | None = None
        self._thread: threading.Thread | None = None
        self._saved = 0
        self.server = None
        self.renderer_ready = threading.Event()

    # ------------------------------------------------------------------ public
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.get_port() if self.server else self.port}"

    @property
    def num_clients(self) -> int:
        return len(self._clients)

    def set_gaussians(self, gaussians: Gaussians, note: str | None = None) -> None:
        """New parameters (live training): every open view re-renders."""
        with self._lock:
            self._gaussians = gaussians
            self._version += 1
            for st in self._clients.values():
                st.dirty = True
        self.stats.updates += 1
        if note is not None:
            self.stats.extra["note"] = note
        self._wake.set()

    def render_view(self, wxyz, position, fov_y: float, canvas_width: int, canvas_height: int,
                    max_side: int | None = None):
        """The render callback: (uint8 [H,W,3] image, splat Camera) of a browser
        view, at the canvas's aspect and at most `max_side` pixels on its long side."""
        w, h = render_size(canvas_width, canvas_height, max_side or self.max_side)
        cam = camera_from_pose(wxyz, position, fov_y, w, h)
        with self._render_lock:
            renderer = self._get_renderer()
            t0 = time.perf_counter()
            img = to_uint8(renderer.render(cam, background=self.background))
            dt = time.perf_counter() - t0
        self.stats.renders += 1
        self.stats.render_seconds += dt
        self.stats.last_ms, self.stats.last_size = 1000.0 * dt, (w, h)
        return img, cam

    def view_pose(self, index: int):
        """(wxyz, position, fov_y) of camera `index` of `cameras`."""
        return pose_from_camera(self.cameras[index][1])[:3]

    def jump(self, client, index: int) -> None:
        """Move `client`'s camera to camera `index` of `cameras`."""
        wxyz, position, fov_y = self.view_pose(index)
        with client.atomic():
            client.camera.fov = fov_y
            client.camera.up_direction = self.frame.up
            client.camera.position = position
            client.camera.wxyz = wxyz
        self._mark(client.client_id)

    def save_image(self, client, path=None) -> Path:
        """Render what `client` shows at full resolution and write it as a PNG."""
        from PIL import Image

        from ..io.atomic import atomic_write
        cam = client.camera
        img, _ = self.render_view(cam.wxyz, cam.position, cam.fov, cam.image_width, cam.image_height)
        if path is None:
            self._saved += 1
            path = self.save_dir / f"view_{time.strftime('%Y%m%d-%H%M%S')}_{self._saved}.png"
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "wb") as f:
            Image.fromarray(img).save(f, format="PNG")
        return path

    def start(self) -> "Viewer":
        viser = require_viser()
        self.server = viser.ViserServer(host=self.host, port=self.port, label=self.label, verbose=False)
        if self.server.get_port() != self.port:   # taken since it was checked: viser moved on
            if self._port_given:
                self.server.stop()
                self.server = None
                raise PortError(f"[splat] port: {self.port} is already in use on {self.host}; choose another port")
            self.port = self.server.get_port()
        self.server.gui.configure_theme(control_width="medium", show_share_button=False)
        self.server.scene.set_up_direction(tuple(float(v) for v in self.frame.up))
        self.server.scene.set_background_image(np.full((2, 2, 3), to_uint8(np.array(self.background)), np.uint8))
        self._build_gui()
        self._add_frustums()
        self.server.on_client_connect(self._on_connect)
        self.server.on_client_disconnect(lambda client: self._clients.pop(client.client_id, None))
        self._thread = threading.Thread(target=self._loop, name="splat-viewer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.server is not None:
            self.server.stop()

    # ------------------------------------------------------------------ internals
    def _get_renderer(self) -> SceneRenderer:
        with self._lock:
            g, version = self._gaussians, self._version
        if self._renderer is None:
            self._renderer = SceneRenderer(g, self.backend_config, self.background, antialiased=self.antialiased,
                                           blend_stop=self.blend_stop)
            self._renderer_version = version
            self.renderer_ready.set()
        elif self._renderer_version != version:
            self._renderer.gaussians, self._renderer.sh_degree = g, g.sh_degree
            self._renderer_version = version
        return self._renderer

    def _mark(self, client_id: int, moved: bool = False) -> None:
        st = self._clients.get(client_id)
        if st is not None:
            st.dirty = True
            if moved:
                st.last_move = time.monotonic()
        self._wake.set()

    def _on_connect(self, client) -> None:
        self._clients[client.client_id] = _ClientState()
        client.camera.on_update(lambda cam: self._mark(cam.client.client_id, moved=True))
        start = self.initial_view
        index = None
        if start is not None:
            index = next((i for i, (n, _, s) in enumerate(self.cameras) if f"{s}:{n}" == start or n == start), None)
        if index is not None:
            self.jump(client, index)
        else:
            f = self.frame
            d = math.cos(f.elevation) * f.start + math.sin(f.elevation) * f.up
            with client.atomic():
                if f.fx is not None and f.height:
                    client.camera.fov = 2.0 * math.atan(0.5 * f.height / f.fx)
                client.camera.up_direction = f.up
                client.camera.position = f.centre + f.radius * d
                client.camera.look_at = f.centre
        self._mark(client.client_id)

    def _build_gui(self) -> None:
        gui = self.server.gui
        with gui.add_folder("View"):
            self._res = gui.add_slider("Max resolution", min=64, max=4096, step=32, initial_value=self.max_side,
                                       hint="longest side of the rendered image, in pixels")
            self._preview = gui.add_slider("While moving", min=0.1, max=1.0, step=0.05,
                                           initial_value=self.preview_scale,
                                           hint="fraction of the resolution used while the camera moves")
            options = ["(free camera)"] + [f"{s}: {n}" for n, _, s in self.cameras]
            self._jump = gui.add_dropdown("Jump to", options=options, initial_value=options[0])
            self._show_cams = gui.add_checkbox("Show cameras", initial_value=self.show_cameras)
            save = gui.add_button("Save image", hint=f"writes a PNG of this view into {self.save_dir}")
            self._saved_text = gui.add_text("Saved", initial_value="", disabled=True)
        self._info = gui.add_markdown(self._info_text())

        @self._res.on_update
        def _(event):
            self.max_side = int(self._res.value)
            self._mark_all()

        @self._preview.on_update
        def _(event):
            self.preview_scale = float(self._preview.value)

        @self._jump.on_update
        def _(event):
            if event.client is None or self._jump.value == options[0]:
                return
            self.jump(event.client, options.index(self._jump.value) - 1)

        @self._show_cams.on_update
        def _(event):
            for h in self._frustums:
                h.visible = bool(self._show_cams.value)

        @save.on_click
        def _(event):
            if event.client is None:
                return
            if self.external_pump:
                self._save_requests.append(event.client)
            else:
                self._save_and_notify(event.client)

    def _mark_all(self) -> None:
        for st in self._clients.values():
            st.dirty = True
        self._wake.set()

    def _add_frustums(self) -> None:
        self._frustums = []
        scale = 0.04 * self.frame.radius
        for i, (name, cam, split) in enumerate(self.cameras):
            wxyz, position, fov_y, aspect = pose_from_camera(cam)
            h = self.server.scene.add_camera_frustum(
                f"/cameras/{split}/{i:04d}", fov=fov_y, aspect=aspect, scale=scale, wxyz=wxyz, position=position,
                thickness=1.5, thickness_units="screen", visible=self.show_cameras,
                color=(40, 90, 220) if split == "train" else (230, 120, 20))

            def on_click(event, index=i):
                if event.client is not None:
                    self.jump(event.client, index)
            h.on_click(on_click)
            self._frustums.append(h)

    def _info_text(self) -> str:
        with self._lock:
            n = len(self._gaussians)
        s = self.stats
        backend = self._renderer.backend if self._renderer is not None else "..."
        text = f"{n:,} Gaussians on {backend}"
        if s.renders:
            text += f"  \n{s.last_size[0]}x{s.last_size[1]} in {s.last_ms:.0f} ms"
        if "note" in s.extra:
            text += f"  \n{s.extra['note']}"
        return text

    def pump(self, budget: float | None = None) -> float:
        """Render what the open views need (and requested image saves); stop
        after `budget` seconds. Returns the seconds spent."""
        t_begin = time.perf_counter()
        while self._save_requests:
            client = self._save_requests.pop(0)
            self._save_and_notify(client)
        clients = self.server.get_clients()
        for cid, st in list(self._clients.items()):
            if budget is not None and time.perf_counter() - t_begin >= budget:
                break
            client = clients.get(cid)
            if client is None:
                continue
            moving = time.monotonic() - st.last_move < MOVING_SECONDS
            if not (st.dirty or (st.preview_shown and not moving)):
                continue
            st.dirty = False
            try:
                cam = client.camera
                side = self.max_side * (self.preview_scale if moving else 1.0)
                img, splat_cam = self.render_view(cam.wxyz, cam.position, cam.fov, cam.image_width,
                                                  cam.image_height, max(16, int(side)))
                client.scene.set_background_image(img, format=self.image_format, jpeg_quality=90)
            except (AssertionError, KeyError):
                st.dirty = True         # the client has not reported its camera yet
                continue
            st.preview_shown = moving and self.preview_scale < 1.0
            st.renders += 1
            st.last_camera = splat_cam
        return time.perf_counter() - t_begin

    @property
    def needs_render(self) -> bool:
        return bool(self._save_requests) or any(st.dirty or st.preview_shown for st in self._clients.values())

    def _save_and_notify(self, client) -> None:
        path = self.save_image(client)
        self._saved_text.value = str(path)
        client.add_notification("Image saved", str(path), auto_close_seconds=4.0)

    def _loop(self) -> None:
        last_info = 0.0
        while not self._stop.is_set():
            self._wake.wait(timeout=0.1)
            self._wake.clear()
            if self._stop.is_set():
                break
            if not self.external_pump:
                t0 = time.perf_counter()
                spent = self.pump(budget=1.0 / self.max_fps)
                # The rate cap: at most max_fps, and at most duty_cycle of the
                # wall time spent rendering.
                pause = 1.0 / self.max_fps - (time.perf_counter() - t0)
                if self.duty_cycle:
                    pause = max(pause, spent * (1.0 / self.duty_cycle - 1.0))
                if pause > 0:
                    self._stop.wait(pause)
                if self.needs_render:
                    self._wake.set()
            if time.monotonic() - last_info > 0.5:
                self._info.content = self._info_text()
                last_info = time.monotonic()
