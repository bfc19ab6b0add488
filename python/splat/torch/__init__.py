"""splat's rasterizer as torch autograd functions.

    from splat.torch import rasterization        # gsplat's signature and conventions
    from splat.torch import rasterize            # splat's parametrisation (log-scales, logits)

CPU tensors run on the CPU backend and CUDA tensors on the CUDA backend, read
and written in place (DLPack views; no copies, torch's current stream). Every
other device goes through host memory. See the README, "From torch".
"""
from __future__ import annotations


def _install_hint() -> str:
    try:
        from importlib.metadata import packages_distributions
        dist = (packages_distributions().get("splat") or ["splat"])[0]
    except Exception:  # metadata unavailable (a source tree on sys.path)
        dist = "splat"
    return f"install the torch extra: pip install '{dist}[torch]'"


try:
    import torch as _torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised where torch is absent
    raise ImportError(f"[splat] splat.torch needs PyTorch; {_install_hint()}") from exc

from ._gsplat import rasterization  # noqa: E402
from ._render import empty_cache, rasterize, rasterizer_pool  # noqa: E402

__all__ = ["empty_cache", "rasterization", "rasterize", "rasterizer_pool"]
