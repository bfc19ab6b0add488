"""The browser viewer: camera maths and the render callback against splat's
own renders, and the served page in a real headless Chromium (skipped where
none is installed): it loads, the canvas shows the scene, and a screenshot
at a training camera (and after jumping to another one) matches splat's
render of that view."""
from __future__ import annotations

import math
import os
import sys
import time
import urllib.request

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
rng = np.random.default_rng()

if NATIVE:
    from splat.camera import Camera  # noqa: E402
    from splat.render_path import SceneRenderer, look_at, to_uint8  # noqa: E402
    from splat.viewer import camera_from_pose, pose_from_camera, render_size  # noqa: E402
    from splat.viewer.camera_math import matrix_to_quat, quat_to_matrix  # noqa: E402


def random_rotation():
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


def test_quaternions_and_sizes():
    for _ in range(50):
        r = random_rotation()
        q = matrix_to_quat(r)
        assert q[0] >= 0 and np.linalg.norm(q) == pytest.approx(1.0)
        np.testing.assert_allclose(quat_to_matrix(q), r, atol=1e-9)
    assert render_size(1920, 1080, 960) == (960, 540)
    assert render_size(300, 500, 1024) == (300, 500)          # never above the canvas
    w, h = render_size(int(rng.integers(100, 3000)), int(rng.integers(100, 3000)), 512)
    assert max(w, h) <= 512


def test_pose_round_trip():
    for _ in range(20):
        w2c = np.eye(4)
        w2c[:3, :3], w2c[:3, 3] = random_rotation(), rng.normal(size=3)
        wdt, hgt = int(rng.integers(20, 200)), int(rng.integers(20, 200))
        f = rng.uniform(20, 300)
        cam = Camera(w2c.astype(np.float32), f, f, wdt / 2, hgt / 2, wdt, hgt)
        wxyz, pos, fov_y, aspect = pose_from_camera(cam)
        assert aspect == pytest.approx(wdt / hgt)
        # viser's convention: wxyz is the camera-to-world rotation of OpenCV axes.
        np.testing.assert_allclose(quat_to_matrix(wxyz), w2c[:3, :3].T, atol=1e-5)
        back = camera_from_pose(wxyz, pos, fov_y, 2 * wdt, 2 * hgt)
        np.testing.assert_allclose(back.world_to_camera, cam.world_to_camera, atol=1e-5)
        assert back.fy == pytest.approx(2 * f, rel=1e-5) and back.fx == pytest.approx(2 * f, rel=1e-5)


def scene_and_cameras(n=400, views=6, size=(72, 54)):
    g = splat.Gaussians(
        means=rng.normal(size=(n, 3)).astype(np.float32) * 0.6,
        log_scales=rng.uniform(-3.5, -2.2, size=(n, 3)).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        opacity_logits=rng.uniform(0.5, 3, size=n).astype(np.float32),
        sh=rng.normal(0, 0.8, size=(n, 4, 3)).astype(np.float32))
    cams = []
    for i in range(views):
        a = 2 * math.pi * i / views
        pos = 3.5 * np.array([math.cos(a), math.sin(a), 0.5])
        w2c = look_at(pos, np.zeros(3), (0, 0, 1))
        cams.append((f"view_{i}", Camera(w2c.astype(np.float32), 60, 60, size[0] / 2, size[1] / 2, *size),
                     "train" if i % 3 else "test"))
    return g, cams


def test_render_callback_is_splats_render():
    from splat.viewer.server import Viewer
    g, cams = scene_and_cameras()
    viewer = Viewer(g, cameras=cams, backend_config=splat.BackendConfig(backend="cpu"), background=(0.1, 0.2, 0.3))
    r = SceneRenderer(g, splat.BackendConfig(backend="cpu"), background=(0.1, 0.2, 0.3))
    for k in (0, 4):
        name, cam, split = cams[k]
        wxyz, pos, fov_y = viewer.view_pose(k)
        img, used = viewer.render_view(wxyz, pos, fov_y, cam.width * 3, cam.height * 3, max_side=cam.width)
        assert (used.width, used.height) == (cam.width, cam.height)
        np.testing.assert_allclose(used.world_to_camera, cam.world_to_camera, atol=1e-5)
        ref = to_uint8(r.render(cam))
        assert np.abs(img.astype(int) - ref.astype(int)).max() <= 1
        assert ref.std() > 10
    # The up axis follows the training cameras (all upright about +z).
    np.testing.assert_allclose(viewer.frame.up, [0, 0, 1], atol=0.05)


# --------------------------------------------------------------------------- served, in a browser


@pytest.fixture()
def served(tmp_path):
    pytest.importorskip("viser")
    from _browser import free_port
    from splat.viewer.server import Viewer
    g, cams = scene_and_cameras(size=(64, 64))
    viewer = Viewer(g, cameras=cams, backend_config=splat.BackendConfig(backend="cpu"), background=(1, 1, 1),
                    port=free_port(), save_dir=tmp_path, initial_view="train:view_1", show_cameras=False)
    viewer.start()
    try:
        yield viewer, g, cams
    finally:
        viewer.stop()


def test_page_is_served(served):
    viewer, _, _ = served
    with urllib.request.urlopen(viewer.url, timeout=10) as r:
        assert r.status == 200 and b"<html" in r.read().lower()


def wait_for(cond, timeout=60.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return True
        time.sleep(0.1)
    return False


def region(img):
    """The part of the window that neither the GUI panel (right), the
    notifications (top left) nor the axes gizmo (bottom left) cover."""
    h, w = img.shape[:2]
    return img[int(0.4 * h):h - 70, 70:int(0.45 * w)].astype(np.float64)


def test_browser_shows_splats_render(served, tmp_path):
    from _browser import chromium, chromium_path
    if chromium_path() is None:
        pytest.skip("no Chromium installed (apt-get install chromium)")
    viewer, g, cams = served
    size = 480
    r = SceneRenderer(g, splat.BackendConfig(backend="cpu"), background=(1, 1, 1))
    with chromium(viewer.url, size, size) as page:
        assert wait_for(lambda: viewer.num_clients > 0), "the page did not connect"
        client = next(iter(viewer.server.get_clients().values()))
        assert wait_for(lambda: viewer._clients[client.client_id].renders > 0), "nothing rendered"

        def shown_view(k):
            target = cams[k][1]
            assert wait_for(lambda: np.allclose(client.camera.position, target.center, atol=1e-3)), \
                "the browser did not take the camera"
            st = viewer._clients[client.client_id]
            assert wait_for(lambda: st.renders > 0 and st.last_camera is not None
                            and np.allclose(st.last_camera.center, target.center, atol=1e-3)
                            and not st.dirty and not st.preview_shown)
            time.sleep(1.5)                          # let the browser draw the last image
            shot = page.screenshot()
            w, h = client.camera.image_width, client.camera.image_height
            assert (w, h) == (size, size)
            ref = to_uint8(r.render(camera_from_pose(*viewer.view_pose(k), w, h)))
            return shot, ref

        shot, ref = shown_view(1)                     # the initial view: training camera view_1
        assert region(ref).std() > 10                 # the view is not blank...
        assert region(shot).std() > 10                # ...and neither is the canvas
        diff = np.abs(region(shot) - region(ref)).mean()
        assert diff < 6.0, diff
        from PIL import Image
        Image.fromarray(shot).save(tmp_path / "browser.png")

        # Jump to a test camera: the browser follows and shows that view.
        viewer.jump(client, 3)
        shot2, ref2 = shown_view(3)
        assert np.abs(region(shot2) - region(ref2)).mean() < 6.0
        assert np.abs(region(shot2) - region(ref)).mean() > 3 * np.abs(region(shot2) - region(ref2)).mean()

        # Save image: a PNG of what is shown, at the canvas's size.
        path = viewer.save_image(client)
        saved = np.asarray(Image.open(path).convert("RGB"))
        assert saved.shape == (size, size, 3)
        assert np.abs(saved.astype(int) - ref2.astype(int)).max() <= 1


# --------------------------------------------------------------------------- live training


def test_live_view_reads_back_only_when_watched(tmp_path):
    pytest.importorskip("viser")
    from _browser import free_port
    from splat.data import synthetic
    from splat.viewer.live import LiveView
    from splat.viewer.server import _ClientState
    train, test = synthetic.make_scene()
    tc = synthetic.default_train_config(40, image_size=train.width)
    bc = splat.BackendConfig(backend="cpu")
    trainer = splat.Trainer.from_dataset(train, tc, bc)
    live = LiveView(trainer, train, test, tmp_path, bc, port=free_port(), rate=1000.0)
    try:
        for _ in range(5):
            trainer.step(read_loss=False)
            live(trainer)
        assert live.updates == 0 and live.viewer.stats.updates == 0      # nobody watching
        live.viewer._clients[-1] = _ClientState(dirty=False)             # a browser connects
        time.sleep(0.01)
        trainer.step(read_loss=False)
        live(trainer)
        assert live.updates == 1 and live.viewer._clients[-1].dirty      # its view re-renders
        g = trainer.gaussians()
        shown = live.viewer._gaussians
        assert len(shown) == len(g)
        np.testing.assert_array_equal(shown.means, g.means)
        live.rate = 1e-3                                                 # the rate cap holds
        trainer.step(read_loss=False)
        live(trainer)
        assert live.updates == 1
    finally:
        live.viewer._clients.clear()
        live.close()


def test_train_view_serves_during_training(tmp_path):
    pytest.importorskip("viser")
    import threading
    from _browser import free_port
    from splat import cli
    port = free_port()
    result = {}

    def train():
        result["rc"] = cli.main(["train", "--steps", "250", "--out", str(tmp_path / "run"), "--quiet",
                                 "--backend", "cpu", "--view", "--view-port", str(port)])
    t = threading.Thread(target=train)
    t.start()
    served = False
    while t.is_alive() and not served:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=2) as r:
                served = r.status == 200
        except OSError:
            time.sleep(0.05)
    t.join()
    assert result["rc"] == 0 and served
    assert (tmp_path / "run" / "cameras.json").is_file()


def test_viewer_settings_are_checked_before_serving(tmp_path, capsys):
    """An address that does not resolve (viser would retry it for ever), a frame rate
    that is not positive, a save folder that is a file, a port out of range or an unknown
    blend stop: a ValueError naming the setting, from the Python API and as one line from
    the command line, before anything is served (viser not needed)."""
    from splat import cli
    from splat.data.synthetic import ground_truth
    from splat.formats import save
    from splat.viewer import Viewer
    from _cli import assert_user_error, without_warnings
    g = ground_truth(40, seed=1)
    afile = tmp_path / "afile"
    afile.write_text("x")
    # 203.0.113.0/24 is a documentation range: no machine has such an address of its own
    for kwargs, name in ((dict(host="999.1.1.1"), "host"), (dict(host="no-such-host.invalid"), "host"),
                         (dict(host="203.0.113.7"), "host"),
                         (dict(port=0), "port"), (dict(port=70000), "port"), (dict(max_fps=0), "max_fps"),
                         (dict(max_fps=-5.0), "max_fps"), (dict(save_dir=afile), "save_dir"),
                         (dict(blend_stop="pixel"), "blend_stop")):
        with pytest.raises(ValueError, match=rf"^\[splat\] {name}: "):
            Viewer(g, **kwargs)
    ply = tmp_path / "scene.ply"
    save(ply, g, "ply")
    for argv, words in ((["--host", "999.1.1.1"], "host"), (["--max-fps", "0"], "max_fps"),
                        (["--save-dir", str(afile)], "save_dir")):
        rc = cli.main(["view", str(ply), "--backend", "cpu", *argv])
        assert_user_error(rc, without_warnings(capsys.readouterr().err), words)
