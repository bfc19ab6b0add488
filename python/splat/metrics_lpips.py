"""LPIPS, the learned perceptual image distance (Zhang et al. 2018, version 0.1)
that gsplat and the 3DGS reference report next to PSNR and SSIM, with the
AlexNet or the VGG16 backbone.

The weights are only ever read from local files; nothing here downloads
(docs/architecture.md, "LPIPS"):
- the backbone: torchvision's ImageNet checkpoint, under the file name
  torchvision gives it, in torchvision's cache (torch.hub.get_dir()/checkpoints,
  moved by TORCH_HOME), or in the folder named by `weights_dir` or the
  SPLAT_LPIPS_WEIGHTS environment variable;
- the calibrated linear layers: the files the `lpips` package ships in its
  wheel (weights/v0.1/alex.pth, vgg.pth), found without importing it.

The network is built here from those checkpoints' layer layout, so neither
torchvision nor the lpips package is imported: a torchvision built for another
torch (or another CUDA) does not stop the metric, and no code path that could
fetch weights is ever reached. tests/test_lpips.py checks the values against
the lpips package's own model."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._validate import real_array

WEIGHTS_ENV = "SPLAT_LPIPS_WEIGHTS"
EXTRA_HINT = "pip install 'splat-gs[lpips]'"


@dataclass(frozen=True)
class _Backbone:
    title: str
    file: str           # torchvision's checkpoint name (its hash prefix included)
    convs: tuple        # (index in `features`, in channels, out channels, kernel, stride, padding)
    pools: tuple        # indices of the 3x3/2 (AlexNet) or 2x2/2 (VGG) max pools
    pool: tuple         # (kernel, stride)
    taps: tuple         # indices whose (ReLU) outputs LPIPS compares
    min_side: int       # the smallest image side every tapped layer still has a pixel at

    @property
    def url(self) -> str:
        return f"https://download.pytorch.org/models/{self.file}"


def _vgg16_convs() -> tuple:
    convs, i, c_in = [], 0, 3
    for block, (c_out, n) in enumerate(((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))):
        for _ in range(n):
            convs.append((i, c_in, c_out, 3, 1, 1))
            c_in, i = c_out, i + 2          # conv, ReLU
        i += 1                              # the block's max pool
    return tuple(convs)


BACKBONES = {
    "alex": _Backbone("AlexNet", "alexnet-owt-7be5be79.pth",
                      convs=((0, 3, 64, 11, 4, 2), (3, 64, 192, 5, 1, 2), (6, 192, 384, 3, 1, 1),
                             (8, 384, 256, 3, 1, 1), (10, 256, 256, 3, 1, 1)),
                      pools=(2, 5), pool=(3, 2), taps=(1, 4, 7, 9, 11), min_side=31),
    "vgg": _Backbone("VGG16", "vgg16-397923af.pth", convs=_vgg16_convs(),
                     pools=(4, 9, 16, 23), pool=(2, 2), taps=(3, 8, 15, 22, 29), min_side=16),
}
NETS = tuple(BACKBONES)

# LPIPS v0.1 maps [-1, 1] input to the backbones' ImageNet normalisation with
# these per-channel constants.
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)

_models: dict = {}      # (net, device, backbone file, heads file) -> _LPIPS


def _torch():
    try:
        import torch
    except ImportError:
        raise RuntimeError(f"[splat] lpips: needs torch and the lpips package: {EXTRA_HINT}") from None
    return torch


def check_net(net) -> str:
    if not isinstance(net, str) or net not in BACKBONES:
        raise ValueError(f"[splat] lpips: net must be one of {', '.join(NETS)}, got {net!r}")
    return net


def weights_folder(weights_dir=None) -> tuple[Path, str]:
    """(the folder searched for backbone checkpoints, how it was chosen)."""
    if weights_dir is not None:
        return Path(weights_dir).expanduser(), "weights_dir"
    if os.environ.get(WEIGHTS_ENV):
        return Path(os.environ[WEIGHTS_ENV]).expanduser(), WEIGHTS_ENV
    torch = _torch()
    return Path(torch.hub.get_dir()) / "checkpoints", "torch.hub.get_dir()/checkpoints; TORCH_HOME moves it"


def backbone_path(net: str, weights_dir=None) -> Path:
    """The backbone checkpoint `net` uses; a [splat] FileNotFoundError naming
    the file, the folder searched and where to fetch it once otherwise."""
    b = BACKBONES[check_net(net)]
    folder, how = weights_folder(weights_dir)
    path = folder / b.file
    if not path.is_file():
        raise FileNotFoundError(
            f"[splat] lpips: the {b.title} weights {b.file} are not in {folder} ({how}); splat never "
            f"downloads them: fetch the file once from {b.url} into that folder, or set {WEIGHTS_ENV} "
            f"to a folder that holds it")
    return path


def heads_path(net: str) -> Path:
    """The lpips package's calibrated linear layers for `net` (v0.1), located
    without importing the package (which imports torchvision)."""
    spec = importlib.util.find_spec("lpips")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / "weights" / "v0.1" / f"{check_net(net)}.pth"
        if path.is_file():
            return path
    if not folders:
        raise RuntimeError(f"[splat] lpips: needs the lpips package (its calibrated linear layers): {EXTRA_HINT}")
    raise FileNotFoundError(f"[splat] lpips: the lpips package in {folders[0]} has no weights/v0.1/{net}.pth; "
                            f"reinstall it: {EXTRA_HINT}")


def _load(torch, path: Path) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"[splat] lpips: cannot read {path} as a torch checkpoint "
                         f"({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(state, dict):
        raise ValueError(f"[splat] lpips: {path} holds a {type(state).__name__}, not a state dict")
    return state


def _tensor(state: dict, key: str, shape: tuple, path: Path):
    t = state.get(key)
    if getattr(t, "shape", None) is None or tuple(t.shape) != shape:
        got = "missing" if t is None else f"shape {list(t.shape)}" if hasattr(t, "shape") else type(t).__name__
        raise ValueError(f"[splat] lpips: {path} is not the expected checkpoint: {key} is {got}, "
                         f"expected shape {list(shape)}")
    return t.float()


def _build(torch, net: str, backbone_file: Path, heads_file: Path, device):
    """The backbone's `features` up to its last tap, the five 1x1 heads, on `device`."""
    nn = torch.nn
    b = BACKBONES[net]
    backbone, heads = _load(torch, backbone_file), _load(torch, heads_file)
    convs = {c[0]: c for c in b.convs}
    layers = []
    for i in range(b.taps[-1] + 1):
        if i in convs:
            _, c_in, c_out, k, s, p = convs[i]
            conv = nn.Conv2d(c_in, c_out, k, stride=s, padding=p)
            conv.weight.data.copy_(_tensor(backbone, f"features.{i}.weight", (c_out, c_in, k, k), backbone_file))
            conv.bias.data.copy_(_tensor(backbone, f"features.{i}.bias", (c_out,), backbone_file))
            layers.append(conv)
        elif i in b.pools:
            layers.append(nn.MaxPool2d(b.pool[0], b.pool[1]))
        else:
            layers.append(nn.ReLU())
    tapped = [convs[max(j for j in convs if j < t)][2] for t in b.taps]   # channels at each tap
    head_w = [_tensor(heads, f"lin{k}.model.1.weight", (1, c, 1, 1), heads_file) for k, c in enumerate(tapped)]
    model = _module_class()(nn.Sequential(*layers), b.taps, head_w)
    return model.to(device).eval().requires_grad_(False)


@functools.cache
def _module_class():
    """The nn.Module class, defined on first use so that importing splat needs no torch."""
    torch = _torch()
    nn = torch.nn

    class LPIPSModule(nn.Module):
        def __init__(self, features, taps, head_weights):
            super().__init__()
            self.features, self.taps = features, tuple(taps)
            self.heads = nn.ParameterList([nn.Parameter(w, requires_grad=False) for w in head_weights])
            self.register_buffer("shift", torch.tensor(_SHIFT).view(1, 3, 1, 1))
            self.register_buffer("scale", torch.tensor(_SCALE).view(1, 3, 1, 1))

        def tapped(self, x):
            out, h = [], (x - self.shift) / self.scale
            for i, layer in enumerate(self.features):
                h = layer(h)
                if i in self.taps:
                    # unit length along the channels (the 1e-10 is LPIPS's)
                    out.append(h / (torch.sqrt(torch.sum(h * h, dim=1, keepdim=True)) + 1e-10))
            return out

        def forward(self, x0, x1):
            """x0, x1: [N,3,H,W] in [-1, 1] -> [N] distances."""
            d = 0.0
            for f0, f1, w in zip(self.tapped(x0), self.tapped(x1), self.heads):
                d = d + torch.nn.functional.conv2d((f0 - f1) ** 2, w).mean(dim=(1, 2, 3))
            return d

    return LPIPSModule


def resolve_device(device=None):
    torch = _torch()
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"[splat] lpips: device must be cpu or cuda, got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("[splat] lpips: device cuda: torch sees no CUDA device (a CPU build of torch?)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"[splat] lpips: device must be cpu or cuda, got {device!r}")
    return dev


def model(net: str = "alex", device=None, weights_dir=None):
    """The LPIPS network for `net` on `device` (default: CUDA when torch sees
    one, else the CPU), built once per (net, device, weight files). Raises,
    before anything is built, when the weights are not on this machine."""
    torch = _torch()
    check_net(net)
    dev = resolve_device(device)
    backbone, heads = backbone_path(net, weights_dir), heads_path(net)
    key = (net, str(dev), str(backbone.resolve()), str(heads.resolve()))
    if key not in _models:
        _models[key] = _build(torch, net, backbone, heads, dev)
    return _models[key]


def check_sizes(net: str, cameras) -> None:
    """Raises when a view is smaller than `net`'s smallest image (before any render)."""
    side = BACKBONES[check_net(net)].min_side
    small = [c for c in cameras if min(c.width, c.height) < side]
    if small:
        raise ValueError(f"[splat] lpips: {net} needs images of at least {side}x{side} pixels; "
                         f"{len(small)} views are smaller (e.g. {small[0].width}x{small[0].height})")


def _as_unit_float(name: str, image, shape=None) -> np.ndarray:
    arr = real_array(name, image, shape if shape is not None else (None, None, 3))
    if arr.dtype == np.uint8:
        return arr.astype(np.float32) / 255.0
    if arr.dtype.kind != "f":
        raise TypeError(f"[splat] {name}: expected uint8 or float values in [0, 1], got dtype {arr.dtype}")
    arr = arr.astype(np.float32)
    if not np.isfinite(arr).all():
        raise ValueError(f"[splat] {name}: has non-finite values")
    return np.clip(arr, 0.0, 1.0)


def lpips(pred, ref, net: str = "alex", *, mask=None, device=None, weights_dir=None) -> float:
    """LPIPS distance (v0.1; 0 for identical images, larger is more different)
    between two HxWx3 images, uint8 or float in [0, 1] (floats are clipped to
    [0, 1], as psnr() clips the render). net: "alex" (what gsplat and the 3DGS
    reference report) or "vgg". mask: optional bool [H,W]; both images are 0
    at its False pixels (as ssim() sees them). device: "cpu" or "cuda"
    (default: CUDA when torch sees one). weights_dir: the folder holding the
    backbone checkpoint (default: $SPLAT_LPIPS_WEIGHTS, else torchvision's
    cache); nothing is downloaded."""
    check_net(net)
    a = _as_unit_float("pred", pred)
    b = _as_unit_float("ref", ref, a.shape)
    side = BACKBONES[net].min_side
    if min(a.shape[:2]) < side:
        raise ValueError(f"[splat] lpips: {net} needs images of at least {side}x{side} pixels, "
                         f"got {a.shape[1]}x{a.shape[0]}")
    if mask is not None:
        m = np.asarray(mask)
        if m.dtype != np.bool_ or m.shape != a.shape[:2]:
            raise ValueError(f"[splat] mask: expected bool {list(a.shape[:2])}, got {m.dtype} {list(m.shape)}")
        if not m.any():
            raise ValueError("[splat] mask: excludes every pixel")
        a, b = a * m[..., None], b * m[..., None]
    net_module = model(net, device, weights_dir)
    torch = _torch()
    dev = net_module.shift.device

    def nchw(x):  # [0, 1] HWC -> [-1, 1] NCHW
        return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))[None]).to(dev) * 2.0 - 1.0

    # TF32 off: CUDA and the CPU then agree to float32 rounding
    exact = torch.backends.cudnn.flags(enabled=True, allow_tf32=False) if dev.type == "cuda" \
        else contextlib.nullcontext()
    with torch.inference_mode(), exact:
        return float(net_module(nchw(a), nchw(b))[0].item())
