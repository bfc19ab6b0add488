"""Atomic file writes: readers see either the old file or the complete new one.

The data goes to a temporary file in the destination's directory (so the final
rename never crosses a file system), is flushed and fsync'ed, and then
`os.replace`s the destination. On any error the temporary file is removed and
the destination is left untouched. An OSError while writing (a read-only
folder, a full disk) names the destination, never the temporary file.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Iterator


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once: os.umask can only be read by setting it, which is not thread safe.
_UMASK = _current_umask()


def fsync_directory(directory: str) -> None:
    """Make the rename itself durable (POSIX only; a no-op where unsupported)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", *, encoding: str | None = None,
                 newline: str | None = None) -> Iterator[IO]:
    """Open a temporary file for writing; on success it atomically becomes `path`.

    ``mode`` must be a write mode ("w", "wb", "wt", "x", "xb"); "x" modes fail
    if `path` already exists. Text modes default to UTF-8. The new file gets
    the permissions an ordinary ``open(path, "w")`` would give it (or keeps
    those of the file it replaces).
    """
    if not isinstance(mode, str) or mode.replace("t", "").replace("b", "") not in ("w", "x") \
            or ("b" in mode and "t" in mode):
        raise ValueError(f"[splat] mode: expected a write mode such as 'wb' or 'w', got {mode!r}")
    path = os.fspath(path)
    exclusive = "x" in mode
    if exclusive and os.path.exists(path):
        raise FileExistsError(f"[splat] {path}: already exists")
    binary = "b" in mode
    if binary and (encoding is not None or newline is not None):
        raise ValueError("[splat] encoding/newline: only valid for text modes")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"[splat] {path}: directory {directory} does not exist")

    try:
        perms = os.stat(path).st_mode & 0o7777
    except OSError:
        perms = 0o666 & ~_UMASK

    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    except OSError as exc:  # a read-only folder, a full disk: name the file asked for
        raise _naming(exc, path) from None
    try:
        open_mode = "wb" if binary else "w"
        kwargs = {} if binary else {"encoding": encoding or "utf-8", "newline": newline}
        with os.fdopen(fd, open_mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, perms)
        if exclusive:
            # Hard-link instead of rename so an existing destination is never clobbered.
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename in (None, tmp):
            raise _naming(exc, path) from None
        raise
    fsync_directory(directory)


def _naming(exc: OSError, path: str) -> OSError:
    """The same error (OSError picks the subclass from errno) about `path`,
    not about the temporary file nobody asked for."""
    return OSError(exc.errno, exc.strerror or " ".join(str(exc).split()), path)


def atomic_write_bytes(path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def atomic_write_text(path, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically (no newline translation)."""
    with atomic_write(path, "w", encoding=encoding, newline="") as f:
        f.write(text)
