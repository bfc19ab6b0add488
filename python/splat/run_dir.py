"""Run folders: one folder holds one run of `splat train`.

- **A lock.** `RunFolder.open` takes an exclusive OS lock on `.splat.lock` in
  the folder (fcntl.flock; msvcrt.locking on Windows) for as long as the run
  lives. The OS drops it when the process ends, however it ends (SIGKILL
  included), so a lock is never stale; a second run into a held folder is
  refused at once. The run removes the lock file while it still holds the
  lock, when it ends (on errors too); a process that opened the file just
  before then locks a file no longer in the folder, sees that (its file is
  not the one the name now gives) and starts again with a fresh file, so two
  runs never both hold the folder. A killed run leaves the file, unlocked.
- **One run.** A folder holding another run's files is refused unless the
  run is replaced (`overwrite`: its files are removed first, config.toml
  last) or continued (`resume`). A folder with files splat did not write is
  refused either way: nothing but a run's own files is ever removed.
- **Starting over keeps what it cannot read.** `restart()` (`--resume RUN
  --overwrite`) renames a checkpoint that cannot be read to NAME.unreadable
  instead of removing it, and removes the run's other results.
- **Stale temporary files.** Writes are atomic (splat/io/atomic.py): a
  process killed mid-write leaves `.NAME.XXXXXXXX.tmp` next to NAME. Once the
  lock is held no live run can own one, so they are removed.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .io.atomic import fsync_directory

LOCK_NAME = ".splat.lock"
CONFIG_NAME = "config.toml"
METRICS_NAME = "metrics.json"
FINAL_CHECKPOINT = "checkpoint.npz"
_CHECKPOINT = re.compile(r"^checkpoint_(\d+)\.npz$")
# What `splat train` writes into a run folder, and what other commands write
# there by default (renders_<split>/, bench results).
_RUN_FILE = re.compile(r"^(config\.toml|metrics\.json|checkpoint(_\d+)?\.npz(\.unreadable)?|point_cloud\.ply|training\.png|cameras\.json|exposure\.npy|"
                       r"bench\.json|bench_compare\.json|parity\.json)$")
_RUN_FOLDER = re.compile(r"^(renders|renders_[A-Za-z0-9._-]+)$")
# atomic_write's temporary names: "." + name + "." + mkstemp's 8 characters + ".tmp".
_TEMP = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp$")


class RunFolderError(ValueError):
    """A run folder that cannot be used as asked (printed as one line)."""


def checkpoint_step(name: str) -> int | None:
    """N of checkpoint_N.npz; None for any other name."""
    m = _CHECKPOINT.match(name)
    return int(m.group(1)) if m else None


def _is_run_entry(p: Path) -> bool:
    return bool(_RUN_FILE.match(p.name)) if not p.is_dir() else bool(_RUN_FOLDER.match(p.name))


def _fsync_dir(path: Path) -> None:
    fsync_directory(os.fspath(path))


def _lock(fd: int) -> bool:
    """An exclusive lock on the open file, without waiting; False if held elsewhere."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except (BlockingIOError, PermissionError):
        return False


class RunFolder:
    """A run folder held (locked) by this process; `close()` (or leaving the
    `with` block) releases it."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd = fd

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path, *, overwrite: bool = False, resume: bool = False) -> "RunFolder":
        """Locks `path` (created if missing) for a new run, or for `overwrite`
        (replacing the run there) or `resume` (continuing it); removes stale
        temporary files. Raises RunFolderError when the folder is busy or
        holds something else."""
        if overwrite and resume:
            raise RunFolderError("[splat] --overwrite and --resume: choose one")
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise RunFolderError(f"[splat] run folder {path}: exists and is not a folder")
        if resume and not path.is_dir():
            raise RunFolderError(f"[splat] run folder {path}: does not exist (nothing to resume)")
        path.mkdir(parents=True, exist_ok=True)
        lock_path = path / LOCK_NAME
        for _ in range(100):
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            locked = _lock(fd)
            if not locked or _names_file(lock_path, fd):
                break
            os.close(fd)   # locked a lock file its run removed on leaving: take the new one
        else:
            raise RunFolderError(f"[splat] run folder {path}: its lock file keeps being replaced; try again")
        folder = None
        try:
            if not locked:
                holder = ""
                try:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() if hasattr(os, "pread") else ""
                except OSError:
                    pass
                who = f" (process {holder})" if holder.isdigit() else ""
                raise RunFolderError(f"[splat] run folder {path}: in use by another splat train{who}; wait for it "
                                     f"to finish or choose another folder")
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
            folder = cls(path, fd)
            folder.remove_stale_temp_files()
            folder._claim(overwrite=overwrite, resume=resume)
        except BaseException:
            if folder is not None:
                folder.close()
            else:
                os.close(fd)
            raise
        return folder

    def _claim(self, *, overwrite: bool, resume: bool) -> None:
        entries = [p for p in sorted(self.path.iterdir()) if not p.name.startswith(".")]
        foreign = [p.name for p in entries if not _is_run_entry(p)]
        ours = [p.name for p in entries if _is_run_entry(p)]
        if resume:
            if not (self.path / CONFIG_NAME).is_file():
                raise RunFolderError(f"[splat] run folder {self.path}: holds no run to resume (no {CONFIG_NAME})")
            return
        if foreign:
            raise RunFolderError(f"[splat] run folder {self.path}: holds files splat did not write "
                                 f"({_some(foreign)}); choose an empty or new folder")
        if ours and not overwrite:
            raise RunFolderError(f"[splat] run folder {self.path}: holds another run ({_some(ours)}); pass "
                                 f"--overwrite to replace it, or --resume {self.path} to continue it")
        if ours:
            self.remove_run_files()

    # ------------------------------------------------------------------ contents
    def remove_stale_temp_files(self) -> list[Path]:
        """Removes the temporary files of writes that never finished (in the
        folder and its render folders); returns them."""
        removed = []
        folders = [self.path] + [d for d in self.path.iterdir() if d.is_dir() and _RUN_FOLDER.match(d.name)]
        folders += [s for d in list(folders[1:]) for s in d.iterdir() if s.is_dir()]
        for folder in folders:
            for p in folder.iterdir():
                if _TEMP.match(p.name) and p.is_file():
                    p.unlink(missing_ok=True)
                    removed.append(p)
        if removed:
            _fsync_dir(self.path)
        return removed

    def remove_run_files(self, keep=()) -> None:
        """Removes the run's files but those named in `keep`: checkpoints first,
        config.toml last, so a folder caught half way still reads as (part of)
        the old run."""
        entries = [p for p in self.path.iterdir()
                   if not p.name.startswith(".") and _is_run_entry(p) and p.name not in keep]
        order = {CONFIG_NAME: 2, METRICS_NAME: 1}
        for p in sorted(entries, key=lambda p: (order.get(p.name, 0), p.name)):
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        _fsync_dir(self.path)

    def restart(self, sh_degree: int | None = None) -> list[Path]:
        """Clears the run's results for starting it again from step 0 (its config.toml
        and cameras.json stay): checkpoints that cannot be read are kept, renamed
        NAME.unreadable (returned); everything else the run wrote is removed.
        `sh_degree`: as for newest_checkpoint."""
        _, skipped = self.newest_checkpoint(sh_degree)
        kept = []
        for path, _why in skipped:
            aside = path.with_name(path.name + ".unreadable")
            os.replace(path, aside)
            kept.append(aside)
        if kept:
            _fsync_dir(self.path)
        self.remove_run_files(keep={CONFIG_NAME, "cameras.json"} | {p.name for p in self.path.glob("*.unreadable")})
        return kept

    def holds_results(self) -> bool:
        """Whether the run here has written anything beyond its setup (config.toml,
        cameras.json): a checkpoint, metrics.json or the PLY."""
        return bool(self.checkpoints()) or (self.path / METRICS_NAME).exists() or \
            (self.path / "point_cloud.ply").exists()

    def checkpoints(self) -> list[Path]:
        """checkpoint_N.npz by N, then checkpoint.npz (the final one) if present."""
        numbered = sorted((p for p in self.path.iterdir() if checkpoint_step(p.name) is not None),
                          key=lambda p: checkpoint_step(p.name))
        final = self.path / FINAL_CHECKPOINT
        return numbered + ([final] if final.is_file() else [])

    def newest_checkpoint(self, sh_degree: int | None = None):
        """((header, arrays, path) of the readable checkpoint of the highest
        step, or None; [(path, why)] of those that could not be read). With
        `sh_degree`, a checkpoint's arrays must also hold a training state of
        that degree (splat.trainer.check_state) to count as readable."""
        from .trainer import check_state, read_checkpoint
        best, skipped = None, []
        for path in self.checkpoints():
            try:
                meta, arrays = read_checkpoint(path)
                if sh_degree is not None:
                    try:
                        check_state(arrays, sh_degree)
                    except (ValueError, TypeError) as exc:
                        raise ValueError(f"[splat] checkpoint {path}: {str(exc).removeprefix('[splat] ')}") from None
            except ValueError as exc:
                skipped.append((path, str(exc)))
                continue
            if best is None or meta["step"] > best[0]["step"]:
                best = (meta, arrays, path)
        return best, skipped

    # ------------------------------------------------------------------ release
    def close(self) -> None:
        if self._fd is not None:
            lock_path = self.path / LOCK_NAME
            try:   # while the lock is held: a process waiting on this file then sees it gone
                if _names_file(lock_path, self._fd):
                    os.unlink(lock_path)
            except OSError:   # Windows cannot remove an open file: it stays, unlocked
                pass
            os.close(self._fd)  # releases the lock
            self._fd = None

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()


def _names_file(path: Path, fd: int) -> bool:
    """Whether `path` is the file open as `fd` (not removed or replaced since)."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _some(names: list[str], k: int = 4) -> str:
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")
