"""The distribution as users install it: one version everywhere, backend
'auto' saying once why it runs on the CPU, and the module-name clash with
PyPI's other `splat` detected."""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import INSTALLED, NATIVE, splat  # noqa: E402
from _scenes import write_blender_scene  # noqa: E402

needs_native = pytest.mark.skipif(not NATIVE, reason="splat._core is not built")
PACKAGE_DIR = os.path.dirname(os.path.abspath(splat.__file__)) if getattr(splat, "__file__", None) else None


def installed_distribution():
    """splat-gs's metadata when it is the distribution of the imported package, else None."""
    try:
        dist = importlib.metadata.distribution("splat-gs")
    except importlib.metadata.PackageNotFoundError:
        return None
    init = dist.locate_file("splat/__init__.py")
    try:
        return dist if os.path.samefile(init, splat.__file__) else None
    except OSError:
        return None


def run_python(code: str, cwd, **env_extra):
    env = dict(os.environ, **env_extra)
    env.pop("SPLAT_DEBUG", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def libcuda_loads() -> bool:
    """Independent of splat: can this process load the NVIDIA driver library?"""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False


# --------------------------------------------------------------------------- version


def test_version_agrees_with_the_installed_metadata(tmp_path):
    dist = installed_distribution()
    if dist is None:
        if INSTALLED:
            pytest.fail("SPLAT_TEST_INSTALLED=1 but splat-gs's metadata does not own the imported splat")
        pytest.skip("splat is not imported from an installed splat-gs")
    assert dist.metadata["Name"] == "splat-gs"
    assert splat.__version__ == dist.version
    assert splat.__distribution__ == "splat-gs"
    p = subprocess.run([sys.executable, "-m", "splat", "--version"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"splat {dist.version}"


def test_version_has_one_source():
    from splat import _version
    assert splat.__version__ is _version.__version__
    parts = splat.__version__.split(".")
    assert len(parts) >= 3 and all(x.isdigit() for x in parts[:3]), splat.__version__


# --------------------------------------------------------------------------- backend 'auto'


@needs_native
def test_auto_says_once_why_it_runs_on_the_cpu(tmp_path):
    p = run_python("""
        import warnings
        import splat
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            splat.Rasterizer(splat.BackendConfig(backend="cpu"))
            splat.Rasterizer(splat.BackendConfig(backend="auto"))
            splat.Rasterizer(splat.BackendConfig(backend="auto"))
            splat.Rasterizer()
        notes = [str(w.message) for w in seen if issubclass(w.category, splat.GpuSkippedWarning)]
        print(splat.resolve_backend("auto"))
        print(len(notes))
        for n in notes:
            print(n)
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    resolved, count = lines[0], int(lines[1])
    if resolved != "cpu":
        assert count == 0, p.stdout      # a GPU was chosen: nothing to explain
        return
    assert count == 1, p.stdout
    note = lines[2]
    assert note.startswith("[splat] backend 'auto' runs on the cpu: ")
    if sys.platform == "darwin":
        assert "metal: " in note
    elif not libcuda_loads():
        assert "cuda: no NVIDIA driver: libcuda.so.1 could not be loaded" in note, note
    else:
        # A driver is present: the note names what else is missing.
        assert "cuda: " in note and "no NVIDIA driver" not in note, note


@needs_native
def test_explicit_backend_says_nothing(tmp_path):
    p = run_python("""
        import warnings
        import splat
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            splat.Rasterizer(splat.BackendConfig(backend="cpu"))
        print(sum(issubclass(w.category, splat.GpuSkippedWarning) for w in seen))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "0"


@needs_native
def test_check_explains_auto_once(tmp_path):
    write_blender_scene(tmp_path / "scene", 16, n_test_views=1, n_gaussians=20, n_views=2)
    cfg = tmp_path / "auto.toml"
    cfg.write_text('[data]\npath = "scene"\n\n[backend]\nbackend = "auto"\n')
    from splat import cli
    import contextlib
    import io
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
        rc = cli.main(["check", "--config", str(cfg)])
    assert rc == 0, err.getvalue()
    notes = [ln for ln in err.getvalue().splitlines() if "backend 'auto' runs on the cpu" in ln]
    if splat.resolve_backend("auto") == "cpu":
        assert len(notes) == 1, err.getvalue()
        assert notes[0].startswith("splat: warning: backend 'auto' runs on the cpu: ")
        assert "# backend: auto -> cpu" in out.getvalue()
        if sys.platform != "darwin" and not libcuda_loads():
            assert "no NVIDIA driver" in notes[0]
    else:
        assert notes == []


# --------------------------------------------------------------------------- the other `splat`


def copy_package(dest):
    shutil.copytree(PACKAGE_DIR, dest / "splat", ignore=shutil.ignore_patterns("__pycache__"))


@needs_native
def test_another_distribution_in_the_same_folder_is_reported(tmp_path):
    """PyPI's `splat` and splat-gs installed into one site-packages share the
    folder splat/: importing warns and says how to separate them."""
    site = tmp_path / "site"
    site.mkdir()
    copy_package(site)
    info = site / "splat-1.14.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: splat\nVersion: 1.14\n")
    (info / "RECORD").write_text("splat/__init__.py,,\nsplat/core.py,,\nsplat-1.14.dist-info/METADATA,,\n")
    p = run_python("""
        import warnings
        warnings.simplefilter("always")
        import splat
        print(splat.__file__)
    """, tmp_path, PYTHONPATH=str(site))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(site / "splat" / "__init__.py")
    assert "RuntimeWarning: [splat] the distribution 'splat 1.14' (not splat-gs) also installed files into" in p.stderr
    assert "pip uninstall splat splat-gs" in p.stderr


@needs_native
def test_same_name_in_another_folder_is_not_reported(tmp_path):
    """A `splat` distribution elsewhere on the path is shadowed by this package: no warning."""
    other = tmp_path / "other"
    (other / "splat").mkdir(parents=True)
    (other / "splat" / "__init__.py").write_text("")
    info = other / "splat-1.14.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: splat\nVersion: 1.14\n")
    (info / "RECORD").write_text("splat/__init__.py,,\n")
    site = tmp_path / "site"
    site.mkdir()
    copy_package(site)
    p = run_python("""
        import warnings
        warnings.simplefilter("error", RuntimeWarning)
        import splat
        print(splat.__file__)
    """, tmp_path, PYTHONPATH=os.pathsep.join([str(site), str(other)]))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(site / "splat" / "__init__.py")


@needs_native
def test_cli_refuses_another_projects_package(tmp_path):
    """The other project's splat/__init__.py over this package's files: the
    command line says so in one line instead of failing somewhere later."""
    site = tmp_path / "site"
    site.mkdir()
    copy_package(site)
    (site / "splat" / "__init__.py").write_text('"""Another project\'s splat."""\n__version__ = "1.14"\n')
    p = run_python("""
        import sys
        from splat.cli import main
        sys.exit(main(["check", "--config", "missing.toml"]))
    """, tmp_path, PYTHONPATH=str(site))
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("splat: error: the module 'splat' at ")
    assert "is not splat-gs's" in lines[0] and "pip uninstall splat splat-gs" in lines[0]


@needs_native
def test_check_without_config_lists_the_backends(capsys):
    from splat import cli
    rc = cli.main(["check"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"# splat {splat.__version__}"
    rows = dict(ln.split(": ", 1) for ln in lines[1:4])
    assert list(rows) == ["cpu", "cuda", "metal"] and rows["cpu"] == "available"
    for name in ("cuda", "metal"):
        ok, why = splat.backend_available(name)
        assert rows[name] == "available" if ok else rows[name].startswith("not available: ")
    if sys.platform != "darwin":
        assert rows["metal"].startswith("not available: ")
        if not libcuda_loads():
            assert "libcuda.so.1 could not be loaded" in rows["cuda"]
    resolved = splat.resolve_backend("auto")
    assert f"# backend: auto -> {resolved}" in lines
    notes = [ln for ln in err.splitlines() if "backend 'auto' runs on the cpu" in ln]
    assert len(notes) == (1 if resolved == "cpu" else 0), err


# --------------------------------------------------------------------------- NVRTC from the extras


def nvrtc_wheel_libraries() -> dict:
    """CUDA major -> libnvrtc of the installed NVIDIA wheel ([cuda]: 12, [cuda13]: 13)."""
    import importlib.util
    found = {}
    for package, major in (("nvidia.cuda_nvrtc", 12), ("nvidia.cu13", 13)):
        try:
            spec = importlib.util.find_spec(package)
        except ImportError:
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            lib = os.path.join(loc, "lib", f"libnvrtc.so.{major}")
            if os.path.exists(lib):
                found[major] = lib
    return found


@needs_native
@pytest.mark.parametrize("major", [12, 13])
def test_nvrtc_wheel_is_found_and_compiles_every_kernel(major, tmp_path):
    """With only one of the NVRTC wheels visible, the loader finds it (no
    SPLAT_NVRTC_LIBRARY, no toolkit) and it compiles every kernel for sm_90
    (CUDA 13's wheel needs its libnvrtc-builtins loaded from beside it)."""
    libs = nvrtc_wheel_libraries()
    if major not in libs:
        pytest.skip(f"the CUDA {major} NVRTC wheel is not installed ([{'cuda' if major == 12 else 'cuda13'}] extra)")
    hidden = "nvidia.cu13" if major == 12 else "nvidia.cuda_nvrtc"
    env = {k: v for k, v in os.environ.items() if k != "SPLAT_NVRTC_LIBRARY"}
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys, importlib.abc
        class Hide(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == {hidden!r}:
                    raise ModuleNotFoundError(name)
        sys.meta_path.insert(0, Hide())
        from splat import _core
        ok, info = _core.nvrtc_available()
        print(info)
        reports = _core.nvrtc_compile_all("sm_90")
        print(len(reports), sum(r[2] for r in reports))
        for r in reports:
            if not r[2]:
                print(r[0], r[1], r[3][:400])
    """)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(os.path.realpath(libs[major])) or lines[0].startswith(libs[major]), p.stdout
    assert f"(NVRTC {major}." in lines[0], p.stdout
    total, ok = map(int, lines[1].split())
    assert total > 0 and ok == total, p.stdout


# --------------------------------------------------------------------------- testing the installed wheel


def test_installed_mode_refuses_a_source_tree_splat(tmp_path):
    """SPLAT_TEST_INSTALLED=1 with the source tree's python/ on the path: the
    test session stops before running anything."""
    from _pkg import SOURCE_ROOT
    if not os.path.isdir(os.path.join(SOURCE_ROOT, "python", "splat")):
        pytest.skip("no source tree (set SPLAT_SOURCE_ROOT)")
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "conftest.py"), tests)
    (tests / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    env = dict(os.environ, SPLAT_TEST_INSTALLED="1", SPLAT_SOURCE_ROOT=SOURCE_ROOT,
               PYTHONPATH=os.path.join(SOURCE_ROOT, "python"))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 4, p.stdout + p.stderr      # pytest's usage error
    assert "would be imported from the source tree" in p.stdout + p.stderr
    env.pop("PYTHONPATH")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    if NATIVE and installed_distribution() is not None:
        assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr


@needs_native
def test_installed_mode_refuses_a_wheel_without_its_native_module(tmp_path):
    """A package without splat/_core (a file missing from the wheel) stops the
    session instead of turning the native tests into skips."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(PACKAGE_DIR, site / "splat",
                    ignore=shutil.ignore_patterns("__pycache__", "_core.*", "*.metallib"))
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "conftest.py"), tests)
    (tests / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    env = dict(os.environ, SPLAT_TEST_INSTALLED="1", PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "the installed splat does not import" in p.stdout + p.stderr
