"""The viewer's port: out of 1..65535 or already taken is one error line before anything
is served (exit 2 from the command line, a ValueError naming `port` from Python), where
viser moved to the next port (and past 65535 failed in a thread and never served); unset,
the first free port from 8080 is taken. The check needs no viser; ports are held by real
sockets listening on 127.0.0.1."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")


@contextlib.contextmanager
def held(port=0):
    """A socket listening on 127.0.0.1:port (0: any free port); yields its port, or
    None when that port cannot be taken here."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        yield None
        return
    with s:
        s.listen()
        yield s.getsockname()[1]


def one_line(rc, err, status, *words):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("splat: warning:", "note:"))]
    assert rc == status, err
    assert len(lines) == 1 and lines[0].startswith("splat: error: port: ") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], err


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    from splat.data.synthetic import ground_truth
    from splat.formats import save
    path = tmp_path_factory.mktemp("view") / "scene.ply"
    save(path, ground_truth(40, seed=1), "ply")
    return path


def test_a_taken_or_out_of_range_port_is_a_value_error_naming_port(scene_file):
    from splat.formats import load
    from splat.viewer import Viewer
    from splat.viewer.server import check_address
    g = load(scene_file)
    with held() as port:
        for call in (lambda: check_address("127.0.0.1", port), lambda: Viewer(g, port=port)):
            with pytest.raises(ValueError, match=rf"^\[splat\] port: {port} is already in use on 127.0.0.1"):
                call()
    with held(65535) as port:
        if port is not None:
            with pytest.raises(ValueError, match=r"^\[splat\] port: 65535 is already in use"):
                Viewer(g, port=65535)
    for bad in (0, -1, 65536, 10 ** 6, 80.0, True):
        with pytest.raises(ValueError, match=r"^\[splat\] port: expected an integer in 1..65535"):
            Viewer(g, port=bad)
    with held() as port:   # free again once its holder closes
        pass
    assert check_address("127.0.0.1", port) == port


def test_an_unset_port_is_the_first_free_one_from_8080():
    from splat.viewer.server import DEFAULT_PORT, check_address
    with held(DEFAULT_PORT) as port:
        got = check_address("127.0.0.1")
        assert got >= DEFAULT_PORT
        if port is not None:
            assert got > DEFAULT_PORT
        with held(got) as again:   # it was free
            assert again == got


def test_view_and_train_refuse_a_taken_port_in_one_line(scene_file, tmp_path, capsys, monkeypatch):
    from splat import cli
    with held() as port:
        # before the scene is read: a missing file is not reported first
        rc = cli.main(["view", str(tmp_path / "missing.ply"), "--port", str(port)])
        one_line(rc, capsys.readouterr().err, 2, f"{port} is already in use")
        from splat.viewer import server
        monkeypatch.setattr(server, "require_viser", lambda: None)   # as where viser is installed
        out = tmp_path / "run"
        rc = cli.main(["train", "--steps", "3", "--out", str(out), "--quiet", "--backend", "cpu", "--view",
                       "--view-port", str(port)])
        one_line(rc, capsys.readouterr().err, 2, f"{port} is already in use")
        assert not out.exists()
    for bad in ("0", "70000", "-3"):
        rc = cli.main(["view", str(scene_file), "--port", bad])
        one_line(rc, capsys.readouterr().err, 2, "1..65535", bad)


def test_view_on_a_taken_65535_exits_instead_of_hanging(scene_file):
    """The reported case, as a user runs it: a process that must end."""
    with held(65535) as port:
        if port is None:
            pytest.skip("port 65535 is in use here")
        env = dict(os.environ)
        env.pop("SPLAT_DEBUG", None)
        p = subprocess.run([sys.executable, "-m", "splat", "view", str(scene_file), "--backend", "cpu",
                            "--port", "65535"], capture_output=True, text=True, env=env, timeout=60)
    one_line(p.returncode, p.stderr, 2, "65535 is already in use")


def test_an_unset_port_serves_on_the_next_free_one(scene_file):
    pytest.importorskip("viser")
    import urllib.request
    from splat.formats import load
    from splat.viewer import Viewer
    from splat.viewer.server import DEFAULT_PORT
    with held(DEFAULT_PORT):
        v = Viewer(load(scene_file), backend_config={"backend": "cpu"}).start()
        try:   # 8080 held here (or by something else on this machine)
            assert v.port > DEFAULT_PORT and v.url.endswith(f":{v.port}")
            with urllib.request.urlopen(v.url, timeout=30) as r:
                assert r.status == 200
        finally:
            v.stop()
