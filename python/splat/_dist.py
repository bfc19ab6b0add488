"""Which distribution this package is, and whether another one shares its folder.

The distribution is `splat-gs`; the module is `splat`. PyPI's `splat` (an
astronomy toolkit) installs a top-level `splat` module too, and so did this
project's own builds before the rename: two distributions writing the same
folder overwrite each other's files, and uninstalling either removes files
of the other.
"""
from __future__ import annotations

import os

DISTRIBUTION = "splat-gs"
OTHER = "splat"  # the other distribution that owns the module name


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def shared_folder_owner(package_dir: str) -> str | None:
    """'name version' of a distribution other than splat-gs whose recorded
    files include this package's __init__.py, else None."""
    from importlib import metadata
    try:
        dist = metadata.distribution(OTHER)
    except metadata.PackageNotFoundError:
        return None
    ours = os.path.join(package_dir, "__init__.py")
    for f in dist.files or ():
        if f.parts == ("splat", "__init__.py") and _same_file(dist.locate_file(f), ours):
            return f"{dist.metadata['Name']} {dist.version}"
    return None


def shared_folder_message(owner: str, package_dir: str) -> str:
    return (f"[splat] the distribution '{owner}' (not {DISTRIBUTION}) also installed files into {package_dir}: "
            f"both provide the module 'splat', so they overwrite each other and uninstalling either breaks the "
            f"other. Keep them in separate environments: pip uninstall {OTHER} {DISTRIBUTION}, then "
            f"pip install {DISTRIBUTION}")


def foreign_package_message(module) -> str:
    """For the command line when `import splat` found another project's package."""
    where = getattr(module, "__file__", None) or "an unknown location"
    return (f"the module 'splat' at {where} is not {DISTRIBUTION}'s (PyPI's '{OTHER}', an astronomy package, "
            f"uses the same name); install {DISTRIBUTION} into an environment without it: "
            f"pip uninstall {OTHER} {DISTRIBUTION}, then pip install {DISTRIBUTION}")


def warn_if_folder_shared(init_file: str) -> None:
    """A RuntimeWarning at import when another distribution shares the package folder."""
    import warnings
    package_dir = os.path.dirname(os.path.abspath(init_file))
    owner = shared_folder_owner(package_dir)
    if owner is not None:
        warnings.warn(shared_folder_message(owner, package_dir), RuntimeWarning, stacklevel=3)
