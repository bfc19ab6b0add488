"""SIGINT and SIGTERM during `splat train`: the first asks the run to stop
after the step it is in (it then writes a checkpoint and exits 130 / 143);
a second stops at once."""
from __future__ import annotations

import signal


class Terminated(Exception):
    """A second SIGTERM: stop now, without a checkpoint."""


class StopSignals:
    """While active (a `with` block in the main thread), SIGINT and SIGTERM
    set `signum` instead of stopping the process; the handlers before are
    restored on exit."""

    def __init__(self):
        self.signum = None
        self._old = {}

    def _handle(self, signum, frame):
        if self.signum is not None:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated()
        self.signum = signum

    @property
    def name(self) -> str:
        """"SIGINT", "SIGTERM", or "" while no signal came."""
        return signal.Signals(self.signum).name if self.signum else ""

    def __enter__(self) -> "StopSignals":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):   # not the main thread: signals stay as they are
                pass
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
