"""Why backend='auto' runs on the CPU, said once per process.

`auto` picks Metal on a Mac, else CUDA, else the CPU. When it ends on the
CPU the user is told why each GPU backend that could exist on this platform
was skipped, and what fixes it where something can: most often an NVIDIA
machine without NVRTC, the CUDA runtime compiler, which the `[cuda]` extra
installs.
"""
from __future__ import annotations

import sys
import warnings

from ._dist import DISTRIBUTION


class GpuSkippedWarning(UserWarning):
    """backend='auto' chose the CPU; the message says why each GPU backend was skipped."""


_told = False


def _one_line(text: str) -> str:
    return " ".join(ln.strip() for ln in str(text).strip().splitlines() if ln.strip())


def gpu_skip_reasons() -> list[str]:
    """'backend: why' for each GPU backend this platform could have and cannot use now."""
    from . import _core
    if sys.platform == "darwin":
        ok, why = _core.backend_available("metal")
        return [] if ok else [f"metal: {_one_line(why)}"]
    ok, why = _core.backend_available("cuda")
    if ok:
        return []
    nvrtc_ok, nvrtc_info = _core.nvrtc_available()
    # The CUDA check reports NVRTC's failure only once the driver loaded and a
    # device was found: then NVRTC is all that is missing.
    if not nvrtc_ok and nvrtc_info == why:
        return [f"cuda: an NVIDIA driver and GPU are present but NVRTC, the CUDA runtime compiler, is not: "
                f"pip install '{DISTRIBUTION}[cuda]' (or set SPLAT_NVRTC_LIBRARY to a libnvrtc.so)"]
    if "libcuda" in why and "could not be loaded" in why:
        return [f"cuda: no NVIDIA driver: {_one_line(why).replace('the NVIDIA driver library ', '')}"]
    return [f"cuda: {_one_line(why)}"]


def auto_fallback_message() -> str | None:
    """Why backend='auto' resolves to the CPU here; None when it resolves to a GPU."""
    from . import _core
    if _core.resolve_backend("auto") != "cpu":
        return None
    reasons = gpu_skip_reasons() or ["no GPU backend in this build"]
    return "[splat] backend 'auto' runs on the cpu: " + "; ".join(reasons)


def claim_auto_fallback_message(backend: str) -> str | None:
    """The fallback message the first time a config asks for 'auto' and gets the
    CPU in this process; None afterwards (and for any other backend)."""
    global _told
    if _told or backend != "auto":
        return None
    message = auto_fallback_message()
    if message is not None:
        _told = True
    return message


def warn_auto_fallback(backend: str, stacklevel: int = 3) -> None:
    """Library entry points: a GpuSkippedWarning, once per process."""
    message = claim_auto_fallback_message(backend)
    if message is not None:
        warnings.warn(message, GpuSkippedWarning, stacklevel=stacklevel + 1)
