"""Paths a dataset file names stay inside the scene folder.

COLMAP image names, nerfstudio `file_path`, `mask_path`, `depth_file_path` and
`ply_file_path`, Blender `file_path`: an entry that is absolute, or whose
lexically normalised form (the scene folder joined with the entry, `..`
collapsed as os.path.normpath does) leaves the folder, is refused before
anything is opened, with one message whether or not its target exists (a
dataset cannot probe or read files elsewhere on the machine). The check is
lexical: symlinks are not resolved, so a link the user put inside the folder is
followed. Backslashes count as separators and drive letters as absolute on
every platform, so a file is accepted or refused alike everywhere.

`allow_outside_paths=True` (`[data] allow_outside_paths = true`) lets a user
who trusts the dataset opt out.
"""
from __future__ import annotations

import os
import posixpath
from pathlib import PureWindowsPath

from .dataset import DatasetError

ALLOW_SETTING = "[data] allow_outside_paths = true"


def outside_reason(entry: str, root, under: str = "") -> str | None:
    """'is absolute' / 'leaves the scene folder' for an entry relative to the folder
    `under` inside the scene folder `root` ('' for `root` itself), or None."""
    text = entry.replace("\\", "/")
    if text.startswith("/") or PureWindowsPath(entry).drive:
        return "is absolute"
    base = posixpath.normpath(os.path.abspath(root).replace("\\", "/"))
    target = posixpath.normpath(posixpath.join(base, under, text))
    if target != base and not target.startswith(base.rstrip("/") + "/"):
        return "leaves the scene folder"
    return None


def check_inside(source, what: str, entry, root, *, allow: bool, under: str = "") -> None:
    """DatasetError naming `source` (the dataset file), `what` (the entry's key) and
    the entry when it is absolute or leaves the scene folder `root` (unless `allow`)."""
    if allow or not isinstance(entry, str):
        return
    why = outside_reason(entry, root, under)
    if why is not None:
        raise DatasetError(f"[splat] {source}: {what} {entry!r} {why}; the files a dataset names must "
                           f"lie inside its folder ({ALLOW_SETTING} allows others)")
