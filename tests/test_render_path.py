"""`splat render` / `splat eval` of run folders and scene files: camera paths
(orbit maths against known rigs), PNG and MP4 output (the MP4 decoded by
imageio-ffmpeg and compared with splat's own renders), PLYs splat did not write."""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
rng = np.random.default_rng()

if NATIVE:
    from splat import cli, formats  # noqa: E402
    from splat.camera import Camera  # noqa: E402
    from splat.render_path import SceneRenderer, look_at, orbit_cameras, orbit_frame  # noqa: E402


def project(cam, point):
    p = cam.world_to_camera.astype(np.float64) @ np.append(point, 1.0)
    return np.array([cam.fx * p[0] / p[2] + cam.cx, cam.fy * p[1] / p[2] + cam.cy]), p[2]


def random_rotation():
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


def test_look_at_is_a_proper_camera():
    for _ in range(20):
        pos, target, up = rng.normal(size=3) * 3, rng.normal(size=3), rng.normal(size=3)
        w2c = look_at(pos, target, up)
        r = w2c[:3, :3]
        np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-9)
        assert np.linalg.det(r) == pytest.approx(1.0)
        cam = Camera(w2c.astype(np.float32), 100, 100, 64, 48, 128, 96)
        uv, depth = project(cam, target)
        assert depth > 0
        np.testing.assert_allclose(uv, [64, 48], atol=1e-3)
        # The world's up points up in the image (camera y is down).
        assert -r[1] @ (up / np.linalg.norm(up)) > 0


def ring_rig(centre, up, radius, elevation, n=12, width=64, height=48, fx=60.0):
    """Cameras on a tilted ring around `centre`, all looking at it."""
    up = up / np.linalg.norm(up)
    e1 = np.cross(up, rng.normal(size=3))
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    cams = []
    for i in range(n):
        a = 2 * math.pi * i / n        # evenly spaced: their mean up is then exactly the ring's
        d = math.cos(elevation) * (math.cos(a) * e1 + math.sin(a) * e2) + math.sin(elevation) * up
        w2c = look_at(centre + radius * d, centre, up)
        cams.append(Camera(w2c.astype(np.float32), fx, fx, width / 2, height / 2, width, height))
    return cams


def random_gaussians(n, centre=np.zeros(3), spread=0.5):
    return splat.Gaussians(
        means=(centre + rng.normal(size=(n, 3)) * spread).astype(np.float32),
        log_scales=rng.uniform(-4, -2.5, size=(n, 3)).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        opacity_logits=rng.uniform(0.5, 3, size=n).astype(np.float32),
        sh=rng.normal(0, 0.6, size=(n, 4, 3)).astype(np.float32))


def test_orbit_frame_from_training_cameras():
    centre = rng.normal(size=3)
    up = rng.normal(size=3)
    up /= np.linalg.norm(up)
    radius, elev = rng.uniform(2, 6), rng.uniform(0.1, 0.8)
    cams = ring_rig(centre, up, radius, elev)
    g = random_gaussians(200, centre + 0.3)           # deliberately off: the cameras decide
    f = orbit_frame(g, cams)
    assert f.from_cameras
    np.testing.assert_allclose(f.centre, centre, atol=1e-4)
    np.testing.assert_allclose(f.up, up, atol=1e-4)
    assert f.radius == pytest.approx(radius, rel=1e-4)
    assert f.elevation == pytest.approx(elev, abs=1e-4)
    n = int(rng.integers(5, 40))
    orbit = orbit_cameras(f, n, width=80)
    assert len(orbit) == n and (orbit[0].width, orbit[0].height) == (80, 60)
    assert orbit[0].fx == pytest.approx(60.0 * 80 / 64)            # the training field of view
    dirs = []
    for cam in orbit:
        uv, depth = project(cam, centre)
        np.testing.assert_allclose(uv, [40, 30], atol=1e-3)       # looks at the centre
        assert depth == pytest.approx(radius, rel=1e-4)
        d = cam.center - centre
        assert math.asin(d @ up / np.linalg.norm(d)) == pytest.approx(elev, abs=1e-4)
        dirs.append(d - (d @ up) * up)
    # Evenly spaced around the up axis.
    angles = [math.atan2(np.cross(dirs[0], d) @ up, dirs[0] @ d) % (2 * math.pi) for d in dirs]
    np.testing.assert_allclose(np.diff(angles), 2 * math.pi / n, atol=1e-4)


def test_orbit_frame_without_cameras_frames_the_gaussians():
    centre = rng.normal(size=3) * 3
    g = random_gaussians(500, centre, spread=rng.uniform(0.2, 2.0))
    f = orbit_frame(g, [], up="+z")
    assert not f.from_cameras
    np.testing.assert_allclose(f.up, [0, 0, 1])
    np.testing.assert_allclose(f.centre, np.median(g.means, axis=0), atol=1e-4)
    cam = orbit_cameras(f, 1, width=100, height=100)[0]
    # The 90th-percentile sphere fits inside the view: its projected radius < half the image.
    r90 = np.percentile(np.linalg.norm(g.means - f.centre, axis=1), 90)
    _, depth = project(cam, f.centre)
    assert cam.fx * r90 / depth < 50
    assert cam.fx * r90 / depth > 25                  # and fills a good part of it


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("render") / "run"
    assert cli.main(["train", "--steps", "60", "--out", str(out), "--quiet", "--backend", "cpu"]) == 0
    return out


def test_run_folder_has_cameras_json(run):
    cams = formats.load_cameras_json(run / "cameras.json")
    assert len(cams) > 4
    from splat.data import synthetic
    train, _ = synthetic.make_scene()
    for (name, cam), ref, ref_name in zip(cams, train.cameras, train.names):
        assert name == ref_name
        np.testing.assert_allclose(cam.world_to_camera, ref.world_to_camera, atol=1e-5)


def foreign_ply(path, g):
    """A 3DGS PLY as another tool might write it: properties reordered, doubles,
    extra properties, no normals, through plyfile."""
    plyfile = pytest.importorskip("plyfile")
    n = len(g)
    cols = {"opacity": g.opacity_logits.astype(np.float64)}
    for i, c in enumerate("xyz"):
        cols[c] = g.means[:, i].astype(np.float64)
    for i in range(4):
        cols[f"rot_{i}"] = g.quats[:, i]
    for i in range(3):
        cols[f"scale_{i}"] = g.log_scales[:, i]
        cols[f"f_dc_{i}"] = g.sh[:, 0, i]
    rest = g.sh[:, 1:, :].transpose(0, 2, 1).reshape(n, -1)
    for i in range(rest.shape[1]):
        cols[f"f_rest_{i}"] = rest[:, i]
    cols["red"] = np.full(n, 7, np.uint8)
    names = list(cols)[::-1]
    arr = np.empty(n, [(nm, cols[nm].dtype) for nm in names])
    for nm in names:
        arr[nm] = cols[nm]
    plyfile.PlyData([plyfile.PlyElement.describe(arr, "vertex")]).write(str(path))


def test_render_video_of_a_foreign_ply(tmp_path):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    g = random_gaussians(300)
    ply = tmp_path / "scene.ply"
    foreign_ply(ply, g)
    video = tmp_path / "orbit.mp4"
    frames = int(rng.integers(6, 14))
    rc = cli.main(["render", str(ply), "--video", str(video), "--orbit-frames", str(frames), "--width", "64",
                   "--height", "48", "--up", "+z", "--backend", "cpu", "--quiet"])
    assert rc == 0
    assert not list(tmp_path.glob(".*tmp*")), "temporary video left behind"
    reader = imageio_ffmpeg.read_frames(str(video))
    meta = reader.__next__()
    assert tuple(meta["size"]) == (64, 48)
    decoded = [np.frombuffer(f, np.uint8).reshape(48, 64, 3) for f in reader]
    assert len(decoded) == frames
    # Each frame is splat's own render of the orbit camera, up to H.264's loss
    # (compared in luma: yuv420p keeps colour at half resolution).
    cams = orbit_cameras(orbit_frame(g, [], up="+z"), frames, 64, 48)
    r = SceneRenderer(g, splat.BackendConfig(backend="cpu"))
    luma = np.array([0.299, 0.587, 0.114])
    refs = [np.clip(np.rint(r.render(cam) * 255), 0, 255) @ luma for cam in cams]
    for i, frame in enumerate(decoded):
        assert refs[i].std() > 10                             # not a blank frame
        got = frame.astype(np.float64) @ luma
        assert np.abs(got - refs[i]).mean() < 3.0
        assert np.abs(got - refs[(i + frames // 2) % frames]).mean() > 4 * np.abs(got - refs[i]).mean()


def test_render_test_views_from_cameras_json(run, tmp_path):
    rc = cli.main(["render", str(run), "--path", "test", "--out", str(tmp_path / "t"), "--quiet",
                   "--backend", "cpu"])
    assert rc == 0
    test = formats.load_cameras_json(run / "cameras.json", "test")
    assert sorted(p.stem for p in (tmp_path / "t").glob("*.png")) == sorted(n for n, _ in test)


def test_render_ply_of_a_run_along_train_and_json_paths(run, tmp_path):
    rc = cli.main(["render", str(run / "point_cloud.ply"), "--path", "train", "--frames", "0:3",
                   "--out", str(tmp_path / "t"), "--quiet", "--backend", "cpu"])
    assert rc == 0
    pngs = sorted((tmp_path / "t").glob("*.png"))
    assert len(pngs) == 3
    cams = formats.load_cameras_json(run / "cameras.json")
    g = formats.load(run / "point_cloud.ply")
    r = SceneRenderer(g, splat.BackendConfig(backend="cpu"))
    with Image.open(pngs[0]) as im:
        got = np.asarray(im).astype(np.float64)
    ref = np.clip(np.rint(r.render(cams[0][1]) * 255), 0, 255)
    assert np.abs(got - ref).max() <= 1
    # A cameras file of one's own.
    sub = json.loads((run / "cameras.json").read_text())[5:7]
    (tmp_path / "mine.json").write_text(json.dumps(sub))
    rc = cli.main(["render", str(run), "--path", str(tmp_path / "mine.json"), "--width", "40",
                   "--out", str(tmp_path / "j"), "--quiet", "--backend", "cpu"])
    assert rc == 0
    pngs = sorted((tmp_path / "j").glob("*.png"))
    assert [p.stem for p in pngs] == [e["img_name"] for e in sub]
    with Image.open(pngs[0]) as im:
        assert im.size == (40, 40)


def test_eval_takes_a_ply(run, tmp_path, capsys):
    from splat.data import synthetic
    # The built-in scene's test views, saved as a Blender folder for --data.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    ev_ckpt, ev_ply = tmp_path / "c.json", tmp_path / "p.json"
    _, test = synthetic.make_scene()
    scene = tmp_path / "scene"
    write_dataset(scene, test)
    assert cli.main(["eval", "--checkpoint", str(run / "checkpoint.npz"), "--data", str(scene),
                     "--json", str(ev_ckpt), "--backend", "cpu"]) == 0
    assert cli.main(["eval", str(run / "point_cloud.ply"), "--data", str(scene), "--json", str(ev_ply),
                     "--backend", "cpu"]) == 0
    # The old spelling with a PLY no longer trips over numpy's pickle check.
    assert cli.main(["eval", "--checkpoint", str(run / "point_cloud.ply"), "--data", str(scene),
                     "--backend", "cpu"]) == 0
    a, b = json.loads(ev_ckpt.read_text()), json.loads(ev_ply.read_text())
    assert a["psnr"] == pytest.approx(b["psnr"], abs=1e-3) and b["psnr"] > 8
    assert a["ssim"] == pytest.approx(b["ssim"], abs=1e-4)
    m = json.loads((run / "metrics.json").read_text())
    assert a["psnr"] == pytest.approx(m["psnr"], abs=0.05)
    capsys.readouterr()


def write_dataset(root, data):
    """A Blender-format test split of `data` (its cameras are OpenCV; Blender's are OpenGL)."""
    (root / "test").mkdir(parents=True)
    frames = []
    for i, (cam, img) in enumerate(zip(data.cameras, data.images)):
        c2w = np.linalg.inv(cam.world_to_camera.astype(np.float64)) @ np.diag([1.0, -1, -1, 1])
        Image.fromarray(img).save(root / "test" / f"r_{i}.png")
        frames.append({"file_path": f"./test/r_{i}", "transform_matrix": c2w.tolist()})
    angle = 2 * math.atan(0.5 * data.width / data.cameras[0].fx)
    (root / "transforms_test.json").write_text(json.dumps({"camera_angle_x": angle, "frames": frames}))


def test_render_errors(run, tmp_path, capsys):
    def err(*argv):
        rc = cli.main([str(a) for a in argv])
        e = capsys.readouterr().err
        assert rc == 1, e
        lines = e.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("splat: error: "), e
        return e

    import shutil
    lone = tmp_path / "lone" / "scene.ply"          # a PLY without cameras.json anywhere above
    lone.parent.mkdir()
    shutil.copy(run / "point_cloud.ply", lone)
    assert "--data" in err("render", lone, "--path", "test", "--backend", "cpu")
    assert "--data" in err("render", lone, "--path", "train", "--backend", "cpu")
    assert "run folder" in err("render", "--backend", "cpu")
    (tmp_path / "bad.json").write_text("[{\"width\": 4}]")
    assert "bad.json" in err("render", run, "--path", tmp_path / "bad.json", "--backend", "cpu")
    assert "nothing_here" in err("render", tmp_path / "nothing_here", "--backend", "cpu")
    (tmp_path / "junk.ply").write_bytes(b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n1\n")
    assert "junk.ply" in err("eval", tmp_path / "junk.ply", "--data", tmp_path, "--backend", "cpu")
    assert "--data" in err("eval", lone, "--backend", "cpu")   # (a run of the built-in scene has its views)


def test_export_command(run, tmp_path, capsys):
    g = formats.load(run / "point_cloud.ply")
    for name, fmt in (("a.splat", "splat"), ("a.spz", "spz"), ("a.compressed.ply", "compressed-ply"),
                      ("b.ply", "ply")):
        assert cli.main(["export", str(run), "--out", str(tmp_path / name)]) == 0
        assert formats.detect_format(tmp_path / name) == fmt
        back = formats.load(tmp_path / name)
        assert len(back) == len(g)
    assert cli.main(["export", str(tmp_path / "a.spz"), "--format", "compressed-ply",
                     "--out", str(tmp_path / "c.ply")]) == 0
    assert formats.detect_format(tmp_path / "c.ply") == "compressed-ply"
    np.testing.assert_array_equal(formats.load(tmp_path / "b.ply").means, g.means)
    capsys.readouterr()
    assert cli.main(["export", str(run), "--out", str(tmp_path / "x.obj")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("splat: error: ") and "x.obj" in err and len(err.strip().splitlines()) == 1


def test_export_refuses_to_overwrite_its_source_or_mislabel_a_file(run, tmp_path, capsys):
    """--out may not be the file being read, nor carry another format's extension
    (readers pick the format by the name); the refused source keeps its bytes."""
    ply = run / "point_cloud.ply"
    before = ply.read_bytes()
    cases = [((str(run), "--format", "splat", "--out", str(ply)), "file being read"),
             ((str(ply), "--out", str(ply)), "file being read"),
             ((str(run), "--format", "splat", "--out", str(tmp_path / "x.ply")), "*.splat"),
             ((str(run), "--format", "ply", "--out", str(tmp_path / "x.compressed.ply")), "*.ply"),
             ((str(run), "--format", "spz", "--out", str(tmp_path / "x.splat")), "*.spz")]
    for argv, words in cases:
        capsys.readouterr()
        assert cli.main(["export", *argv]) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith("splat: error: --out ") and words in err and len(err.strip().splitlines()) == 1, err
    assert ply.read_bytes() == before
    assert not any(tmp_path.iterdir())
    # a compressed PLY may be named plain .ply (SuperSplat's naming); a name without a known extension says nothing
    assert cli.main(["export", str(run), "--format", "compressed-ply", "--out", str(tmp_path / "c.ply")]) == 0
    assert formats.detect_format(tmp_path / "c.ply") == "compressed-ply"
    assert cli.main(["export", str(run), "--format", "spz", "--out", str(tmp_path / "scene.bin")]) == 0
    assert formats.detect_format(tmp_path / "scene.bin") == "spz"



def test_unwritable_outputs_are_refused_before_any_work(run, tmp_path, capsys):
    """--out / --video / --json that name a folder, or lie under a file, stop with one
    line naming the flag before anything is rendered or evaluated."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    cases = [(["render", str(run), "--out", str(afile)], "--out", "exists and is not a folder"),
             (["render", str(run), "--video", str(tmp_path)], "--video", "is a folder"),
             (["eval", str(run), "--json", str(tmp_path)], "--json", "is a folder"),
             (["eval", str(run), "--json", str(afile / "x.json")], "--json", "is a file, not a folder"),
             (["export", str(run), "--out", str(afile / "x.spz")], "--out", "is a file, not a folder")]
    for argv, flag, words in cases:
        capsys.readouterr()
        assert cli.main([*argv, "--backend", "cpu"] if argv[0] != "export" else argv) == 1, argv
        err = capsys.readouterr().err.strip().splitlines()
        errors = [ln for ln in err if ln.startswith("splat: error: ")]
        assert len(errors) == 1 and errors[0].startswith(f"splat: error: {flag} ") and words in errors[0], err
        assert not any(ln.startswith("rendered") for ln in err)
    assert afile.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def forward_facing_rig(depth=4.0, width=64, height=48, fx=60.0):
    """An LLFF-like capture: 12 cameras on a 4x3 grid in the plane z = 0 (0.25 apart), each
    looking along +z within a few degrees, at a scene about `depth` in front."""
    cams = []
    for i in range(4):
        for j in range(3):
            eye = np.array([(i - 1.5) * 0.25, (j - 1) * 0.25, 0.0])
            target = np.array([0.0, 0.0, depth]) + rng.normal(0, 0.15, 3)
            w2c = look_at(eye, target, (0.0, -1.0, 0.0))
            cams.append(Camera(w2c.astype(np.float32), fx, fx, width / 2, height / 2, width, height))
    return cams


def test_default_path_of_a_forward_facing_capture_stays_in_front():
    """Orbiting a forward-facing capture's centre puts half the frames behind the scene,
    where nothing was trained: its default path keeps to the cameras' side, looking the
    way they looked, with the scene in every frame."""
    cams = forward_facing_rig()
    g = random_gaussians(400, np.array([0.0, 0.0, 4.0]), spread=0.6)
    f = orbit_frame(g, cams)
    assert f.forward_facing
    mean_fwd = np.mean([c.world_to_camera[2, :3] for c in cams], axis=0)
    mean_fwd /= np.linalg.norm(mean_fwd)
    eyes = np.array([c.center for c in cams])
    path = orbit_cameras(f, 60, width=64)
    assert len(path) == 60
    for cam in path:
        fwd = cam.world_to_camera[2, :3].astype(np.float64)
        assert fwd @ mean_fwd > math.cos(math.radians(20))                  # looks the cameras' way
        assert (cam.center - eyes.mean(axis=0)) @ mean_fwd < 0.5            # from their side of the scene
        uv, depth = project(cam, np.median(g.means, axis=0))
        assert depth > 0 and 0 <= uv[0] < cam.width and 0 <= uv[1] < cam.height
    # it moves: an ellipse about as wide as the cameras' spread
    centres = np.array([c.center for c in path])
    assert np.ptp(centres[:, 0]) > 0.3 and np.ptp(centres[:, 1]) > 0.2
    # cameras all around a scene still orbit it
    assert not orbit_frame(g, ring_rig(np.zeros(3), np.array([0.0, 0.0, 1.0]), 3.0, 0.3)).forward_facing
