"""LPIPS (splat.metrics_lpips): the clear error and no download when the
weights are missing, and the values against the lpips package's own model.

The backbone checkpoints the tests write are randomly initialised torchvision
AlexNet / VGG16 state dicts under torchvision's file names in a temporary
TORCH_HOME: the metric's arithmetic does not depend on the ImageNet training,
and nothing is fetched. The oracle is the lpips package (its LPIPS module on
torchvision's network definitions), which splat itself never imports.

torchvision's Linux wheels on PyPI are CUDA builds; next to a CPU build of
torch their C++ ops (detection ops, unused by AlexNet / VGG) cannot load and
`import torchvision` stops at registering those ops' fake kernels. The oracle
then imports torchvision without those two registration modules; the network
definitions it uses are plain Python either way."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _cli import run_cli  # noqa: E402
from _scenes import make_rng, write_blender_scene  # noqa: E402

torch = pytest.importorskip("torch", reason="LPIPS needs torch (splat-gs[lpips])")
if NATIVE:
    from splat import metrics_lpips  # noqa: E402
    from splat.metrics_lpips import lpips  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

FILES = {"alex": "alexnet-owt-7be5be79.pth", "vgg": "vgg16-397923af.pth"}


def _import_oracle():
    """(torchvision, lpips) or a skip reason."""
    try:
        import torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            return None, f"torchvision does not import: {exc}"
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
            sys.modules[name] = types.ModuleType(name)
        import torchvision
    except ImportError:
        return None, "torchvision is not installed (pip install 'splat-gs[lpips]')"
    try:
        import lpips as lpips_pkg
    except ImportError:
        return None, "the lpips package is not installed (pip install 'splat-gs[lpips]')"
    return (torchvision, lpips_pkg), None


def oracle():
    mods, reason = _import_oracle()
    if mods is None:
        pytest.skip(reason)
    return mods


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any download torch or urllib would start fails the test."""
    import urllib.request

    def refuse(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args[:1]}")
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.delenv(metrics_lpips.WEIGHTS_ENV if NATIVE else "SPLAT_LPIPS_WEIGHTS", raising=False)


@pytest.fixture
def empty_torch_home(tmp_path, monkeypatch):
    home = tmp_path / "torch_home"
    home.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def backbones(tmp_path_factory):
    """{net: state dict of the `features`} of fresh randomly initialised
    torchvision networks, and a TORCH_HOME whose cache holds them."""
    tv, _ = oracle()
    seed = int(np.random.SeedSequence().entropy % 2**31)
    torch.manual_seed(seed)
    home = tmp_path_factory.mktemp("torch_home")
    (home / "hub" / "checkpoints").mkdir(parents=True)
    states = {}
    for net, make in (("alex", tv.models.alexnet), ("vgg", tv.models.vgg16)):
        features = make(weights=None).features
        states[net] = {f"features.{k}": v for k, v in features.state_dict().items()}
        torch.save(states[net], home / "hub" / "checkpoints" / FILES[net])
    return states, home, seed


@pytest.fixture
def torch_home(backbones, monkeypatch):
    states, home, seed = backbones
    monkeypatch.setenv("TORCH_HOME", str(home))
    return states, home, seed


def package_model(net, features_state):
    """The lpips package's model with a random trunk (nothing loaded), then the
    given backbone weights put into its torchvision layers by their index."""
    import warnings
    _, lpips_pkg = oracle()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # torchvision's note on the deprecated `pretrained` argument
        m = lpips_pkg.LPIPS(net=net, pnet_rand=True, verbose=False)
    own = m.net.state_dict()          # keys slice<k>.<index in features>.<param>
    by_index = {k.split(".", 1)[1]: k for k in own}
    m.net.load_state_dict({by_index[k[len("features."):]]: v for k, v in features_state.items()}, strict=True)
    return m.eval()


def package_lpips(m, a, b) -> float:
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))[None].astype(np.float32))  # noqa: E731
    with torch.no_grad():
        return float(m(t(a), t(b), normalize=True).item())     # normalize: [0, 1] -> [-1, 1]


def random_pair(rng, h, w):
    a = rng.uniform(size=(h, w, 3)).astype(np.float32)
    b = np.clip(a + rng.normal(scale=rng.uniform(0.05, 0.3), size=a.shape), 0, 1).astype(np.float32)
    return a, b


# --------------------------------------------------------------------------- missing weights


def test_missing_weights_names_file_folder_and_fix(empty_torch_home):
    rng, _ = make_rng()
    a, b = random_pair(rng, 40, 40)
    for net in ("alex", "vgg"):
        with pytest.raises(FileNotFoundError) as e:
            lpips(a, b, net, device="cpu")
        msg = str(e.value)
        assert msg.startswith("[splat] lpips:"), msg
        assert FILES[net] in msg and str(empty_torch_home / "hub" / "checkpoints") in msg
        assert "TORCH_HOME" in msg and "SPLAT_LPIPS_WEIGHTS" in msg
        assert f"https://download.pytorch.org/models/{FILES[net]}" in msg
    assert list(empty_torch_home.rglob("*")) == []      # nothing written, nothing fetched


def test_explicit_folder_is_the_only_one_searched(empty_torch_home, tmp_path, monkeypatch):
    rng, _ = make_rng()
    a, b = random_pair(rng, 40, 40)
    folder = tmp_path / "weights"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match=str(folder)):
        lpips(a, b, "alex", device="cpu", weights_dir=folder)
    monkeypatch.setenv("SPLAT_LPIPS_WEIGHTS", str(folder))
    with pytest.raises(FileNotFoundError, match="SPLAT_LPIPS_WEIGHTS") as e:
        lpips(a, b, "vgg", device="cpu")
    assert str(folder) in str(e.value)


def test_missing_weights_never_reaches_torchvision_or_lpips(empty_torch_home):
    """In a fresh interpreter: the error comes before either package is imported
    (their constructors are what would download)."""
    code = ("import sys, numpy as np\n"
            "from splat.metrics_lpips import lpips\n"
            "try:\n"
            "    lpips(np.zeros((32, 32, 3), np.uint8), np.ones((32, 32, 3), np.uint8), 'alex', device='cpu')\n"
            "except FileNotFoundError as e:\n"
            "    print('ERROR', e)\n"
            "print('MODULES', sorted(m for m in sys.modules if m.split('.')[0] in ('torchvision', 'lpips')))\n")
    env = dict(os.environ, TORCH_HOME=str(empty_torch_home))
    env.pop("SPLAT_LPIPS_WEIGHTS", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                       cwd=str(empty_torch_home.parent))
    assert p.returncode == 0, p.stderr
    assert "ERROR [splat] lpips:" in p.stdout and FILES["alex"] in p.stdout
    assert "MODULES []" in p.stdout, p.stdout
    assert list(empty_torch_home.rglob("*")) == []


def test_missing_lpips_package_names_the_extra(torch_home, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lpips" else real(name, *a))
    rng, _ = make_rng()
    a, b = random_pair(rng, 40, 40)
    with pytest.raises(RuntimeError, match=r"splat-gs\[lpips\]"):
        lpips(a, b, "alex", device="cpu")


def test_missing_torch_names_the_extra(scene, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)          # `import torch` raises ImportError
    rng, _ = make_rng()
    a, b = random_pair(rng, 40, 40)
    with pytest.raises(RuntimeError, match=r"needs torch and the lpips package: pip install 'splat-gs\[lpips\]'"):
        lpips(a, b, "alex")
    rc, _, err = run_cli(capsys, "eval", scene / "model.ply", "--data", scene / "scene", "--lpips", "alex",
                         "--backend", "cpu")
    assert rc == 1 and err.strip().splitlines() == [
        "splat: error: lpips: needs torch and the lpips package: pip install 'splat-gs[lpips]'"], err


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_matches_the_lpips_package(net, torch_home):
    states, _, seed = torch_home
    ref = package_model(net, states[net])
    rng, seed2 = make_rng()
    side = metrics_lpips.BACKBONES[net].min_side
    for h, w in ((side, side + 9), (48, 37), (64, 64)):
        a, b = random_pair(rng, h, w)
        want = package_lpips(ref, a, b)
        got = lpips(a, b, net, device="cpu")
        assert want > 1e-4, f"seeds {seed}/{seed2}: a degenerate pair"
        assert got == pytest.approx(want, rel=1e-5, abs=1e-7), f"seeds {seed}/{seed2} at {h}x{w}"
        assert lpips(b, a, net, device="cpu") == pytest.approx(got, rel=1e-6, abs=1e-8)   # symmetric
        assert lpips(a, a, net, device="cpu") == 0.0


def test_package_default_loading_reads_the_same_cache_file(tmp_path, monkeypatch):
    """The lpips package's own path (pretrained trunk, through torchvision's
    cache in TORCH_HOME) agrees: splat uses torchvision's file names and layout."""
    tv, lpips_pkg = oracle()
    torch.manual_seed(int(np.random.SeedSequence().entropy % 2**31))
    home = tmp_path / "home"
    (home / "hub" / "checkpoints").mkdir(parents=True)
    torch.save(tv.models.alexnet(weights=None).state_dict(), home / "hub" / "checkpoints" / FILES["alex"])
    monkeypatch.setenv("TORCH_HOME", str(home))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # torchvision's note on the deprecated `pretrained` argument
        ref = lpips_pkg.LPIPS(net="alex", verbose=False).eval()
    rng, seed = make_rng()
    a, b = random_pair(rng, 45, 60)
    assert lpips(a, b, "alex", device="cpu") == pytest.approx(package_lpips(ref, a, b), rel=1e-5), seed


def test_uint8_and_float_agree_and_floats_are_clipped(torch_home):
    rng, seed = make_rng()
    a8 = rng.integers(0, 256, size=(40, 50, 3), dtype=np.uint8)
    b8 = np.clip(a8.astype(int) + rng.integers(-60, 61, size=a8.shape), 0, 255).astype(np.uint8)
    want = lpips(a8.astype(np.float64) / 255.0, b8.astype(np.float64) / 255.0, "alex", device="cpu")
    assert lpips(a8, b8, "alex", device="cpu") == pytest.approx(want, rel=1e-6), seed
    a, b = random_pair(rng, 40, 50)
    over = a + np.where(a > 0.5, 0.5, -0.5).astype(np.float32)     # outside [0, 1] on every pixel
    assert lpips(over, b, "alex", device="cpu") == pytest.approx(
        lpips(np.clip(over, 0, 1), b, "alex", device="cpu"), rel=1e-6)


def test_mask_zeroes_both_images_outside_it(torch_home):
    states, _, _ = torch_home
    ref = package_model("vgg", states["vgg"])
    rng, seed = make_rng()
    a, b = random_pair(rng, 40, 44)
    mask = rng.uniform(size=(40, 44)) < 0.7
    want = package_lpips(ref, a * mask[..., None], b * mask[..., None])
    assert lpips(a, b, "vgg", mask=mask, device="cpu") == pytest.approx(want, rel=1e-5), seed


def test_explicit_folder_gives_the_same_value(torch_home, tmp_path, monkeypatch):
    _, home, _ = torch_home
    rng, seed = make_rng()
    a, b = random_pair(rng, 40, 40)
    want = lpips(a, b, "alex", device="cpu")
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / FILES["alex"]).symlink_to(home / "hub" / "checkpoints" / FILES["alex"])
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "nowhere"))
    assert lpips(a, b, "alex", device="cpu", weights_dir=folder) == want
    monkeypatch.setenv("SPLAT_LPIPS_WEIGHTS", str(folder))
    assert lpips(a, b, "alex", device="cpu") == want


def test_bad_arguments(torch_home, tmp_path):
    rng, _ = make_rng()
    a, b = random_pair(rng, 40, 40)
    with pytest.raises(ValueError, match="net must be one of alex, vgg"):
        lpips(a, b, "squeeze")
    with pytest.raises(ValueError, match="at least 31x31"):
        lpips(a[:30], b[:30], "alex", device="cpu")
    with pytest.raises(ValueError, match=r"\[splat\] ref: expected shape"):
        lpips(a, b[:, :39], "alex", device="cpu")
    with pytest.raises(TypeError, match="uint8 or float"):
        lpips(a.astype(np.int16), b.astype(np.int16), "alex", device="cpu")
    with pytest.raises(ValueError, match="non-finite"):
        lpips(np.where(a > 0.5, np.nan, a), b, "alex", device="cpu")
    with pytest.raises(ValueError, match="excludes every pixel"):
        lpips(a, b, "alex", mask=np.zeros((40, 40), bool), device="cpu")
    with pytest.raises(ValueError, match="device must be cpu or cuda"):
        lpips(a, b, "alex", device="tpu")
    bad = tmp_path / FILES["alex"]
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read"):
        lpips(a, b, "alex", device="cpu", weights_dir=tmp_path)
    torch.save({"features.0.weight": torch.zeros(3)}, bad)
    with pytest.raises(ValueError, match=r"features\.0\.weight is shape \[3\]"):
        lpips(a, b, "alex", device="cpu", weights_dir=tmp_path)


@pytest.mark.cuda
def test_cuda_matches_cpu(torch_home):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    rng, seed = make_rng()
    for net in ("alex", "vgg"):
        a, b = random_pair(rng, 96, 128)
        assert lpips(a, b, net, device="cuda") == pytest.approx(lpips(a, b, net, device="cpu"), rel=1e-4), seed


# --------------------------------------------------------------------------- splat eval


SIZE = 40


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A Blender scene and a PLY of its ground-truth Gaussians, perturbed."""
    from splat.data.synthetic import ground_truth
    from splat.formats import save
    root = tmp_path_factory.mktemp("lpips_scene")
    write_blender_scene(root / "scene", SIZE, 3, n_views=3)
    import dataclasses
    g = ground_truth(150, seed=5)
    rng, _ = make_rng()
    save(root / "model.ply", dataclasses.replace(g, means=g.means + rng.normal(scale=0.03, size=g.means.shape)
                                                 .astype(np.float32)), "ply")
    return root


def test_cli_eval_reports_lpips(scene, torch_home, tmp_path, capsys):
    states, _, _ = torch_home
    out_json = tmp_path / "eval.json"
    rc, out, err = run_cli(capsys, "eval", scene / "model.ply", "--data", scene / "scene", "--lpips", "alex",
                           "--per-view", "--json", out_json, "--backend", "cpu")
    assert rc == 0, err
    assert out.count("LPIPS(alex)") == 4, out        # three views and the summary
    e = json.loads(out_json.read_text())
    assert e["lpips_net"] == "alex" and len(e["per_view"]) == 3

    # the oracle on the same renders
    from splat.data import load_dataset
    from splat.metrics import evaluate
    from splat.render_path import open_model
    model = open_model(scene / "model.ply", splat.BackendConfig(backend="cpu"))
    data = load_dataset(scene / "scene", "test", background=model.background)
    renders = {}
    ev = evaluate(model.renderer, data, renders=renders)
    ref = package_model("alex", states["alex"])
    for view, image, name in zip(e["per_view"], data.images, data.names):
        want = package_lpips(ref, np.clip(renders[name], 0, 1), image.astype(np.float32) / 255.0)
        assert view["name"] == name and view["lpips"] == pytest.approx(want, rel=1e-5)
    assert e["lpips"] == pytest.approx(np.mean([v["lpips"] for v in e["per_view"]]), rel=1e-12)
    assert e["psnr"] == pytest.approx(ev.psnr, abs=1e-9) and "lpips" not in ev.to_dict()


def test_cli_eval_missing_weights_is_one_line_before_rendering(scene, empty_torch_home, capsys, monkeypatch):
    from splat import render_path

    def no_render(*args, **kwargs):
        raise AssertionError("rendered before the LPIPS weights were checked")
    monkeypatch.setattr(render_path.SceneRenderer, "render", no_render)
    rc, out, err = run_cli(capsys, "eval", scene / "model.ply", "--data", scene / "scene", "--lpips", "vgg",
                           "--backend", "cpu")
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("splat: error: lpips:"), err
    assert FILES["vgg"] in lines[0] and str(empty_torch_home / "hub" / "checkpoints") in lines[0]
    assert list(empty_torch_home.rglob("*")) == []


def test_cli_eval_rejects_views_too_small(tmp_path, torch_home, capsys):
    from splat.data.synthetic import ground_truth
    from splat.formats import save
    write_blender_scene(tmp_path / "small", 24, 2, n_views=2)
    save(tmp_path / "m.ply", ground_truth(60, seed=3), "ply")
    rc, _, err = run_cli(capsys, "eval", tmp_path / "m.ply", "--data", tmp_path / "small", "--lpips", "alex",
                         "--backend", "cpu")
    assert rc == 1 and err.startswith("splat: error: lpips: alex needs images of at least 31x31"), err


TRAIN_TOML = """\
[data]
path = {scene}
eval_lpips = "alex"

[train]
steps = 12
sh_degree = 0
densify_from = 1000
init_points = 200
init_extent = 1.0

[backend]
backend = "cpu"

[output]
dir = {out}
eval_steps = [6]
"""


def test_train_evaluates_lpips_when_configured(scene, torch_home, tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(TRAIN_TOML.format(scene=json.dumps(str(scene / "scene")), out=json.dumps(str(tmp_path / "run"))))
    rc, out, err = run_cli(capsys, "train", "--config", cfg, "--quiet")
    assert rc == 0, err
    assert "LPIPS(alex)" in out
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["lpips_net"] == "alex" and [e["step"] for e in m["evals"]] == [6, 12]
    assert all(len(e["per_view"]) == 3 and all(v["lpips"] > 0 for v in e["per_view"]) for e in m["evals"])
    assert m["lpips"] == m["evals"][-1]["lpips"]
    # what the run reported is what `splat eval` of its checkpoint gives
    rc, _, err = run_cli(capsys, "eval", "--checkpoint", tmp_path / "run" / "checkpoint.npz", "--data",
                         scene / "scene", "--lpips", "alex", "--json", tmp_path / "e.json", "--backend", "cpu")
    assert rc == 0, err
    e = json.loads((tmp_path / "e.json").read_text())
    assert e["lpips"] == pytest.approx(m["lpips"], rel=1e-6)
    assert [v["lpips"] for v in e["per_view"]] == pytest.approx([v["lpips"] for v in m["per_view"]], rel=1e-6)


def test_train_without_the_weights_stops_before_training(scene, empty_torch_home, tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(TRAIN_TOML.format(scene=json.dumps(str(scene / "scene")), out=json.dumps(str(tmp_path / "run"))))
    rc, out, err = run_cli(capsys, "train", "--config", cfg, "--quiet")
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("splat: error: lpips:") and FILES["alex"] in lines[0], err
    assert not (tmp_path / "run" / "checkpoint.npz").exists() and not (tmp_path / "run" / "metrics.json").exists()


def test_config_rejects_an_unknown_backbone(tmp_path):
    from splat.config import ConfigError, load_config
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\npath = "x"\neval_lpips = "squeeze"\n')
    with pytest.raises(ConfigError, match="data.eval_lpips"):
        load_config(cfg)
