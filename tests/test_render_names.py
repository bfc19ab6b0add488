"""Render file names: view names that sanitise alike (non-ASCII letters, case,
folders, extensions) still get one file each, keeping as much of the name as
the file-name rule allows."""
from __future__ import annotations

import os
import re
import sys
import unicodedata

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402,F401
from _cli import run_cli  # noqa: E402

from splat.cli._data import render_files  # noqa: E402

SAFE = re.compile(r"^[A-Za-z0-9._-]+\.png$")


def quick(n: int):
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# letters that sanitise alike: accented forms of one letter, and letters with no ASCII form
ALIKE = st.sampled_from(list("éèêëÉEeąāæøß日本語") + ["\u0301", " ", "-", "_"])


@st.composite
def view_names(draw):
    """Distinct view names built to collide once sanitised (and ASCII ones around them)."""
    stems = draw(st.lists(st.text(ALIKE, min_size=1, max_size=3), min_size=2, max_size=8))
    ascii_part = draw(st.sampled_from(["", "frame", "img_01", "A"]))
    folder = draw(st.sampled_from(["", "images/", "sub/dir/"]))
    names = [folder + ascii_part + s + draw(st.sampled_from([".jpg", ".JPG", ".png", "", ".jpeg"])) for s in stems]
    names += draw(st.lists(st.sampled_from(["0000.jpg", "a.jpg", "A.png", "e.jpg", "e_1.jpg", "jpg.jpg"]),
                           max_size=3))
    return list(dict.fromkeys(names))     # view names of a split are distinct


@quick(60)
@given(names=view_names())
@example(names=["é.jpg", "ë.jpg"])
@example(names=["a.jpg", "A.jpg", "a.png"])
@example(names=["é.jpg", "ë.jpg", "e_0.jpg", "e_1.jpg", "e.jpg"])
def test_render_file_names_never_collide(names):
    files = render_files(names)
    assert list(files) == names
    out = list(files.values())
    assert all(SAFE.match(f) for f in out), out
    # distinct even where the file system ignores case
    assert len({f.lower() for f in out}) == len(out), dict(files)
    assert render_files(names) == files                         # the same names every time
    for n, f in files.items():     # the ASCII letters and digits of the name survive, in order
        kept = re.sub(r"[^A-Za-z0-9]", "", unicodedata.normalize("NFKD", os.path.basename(n)))
        kept = re.sub(r"(jpe?g|png|JPE?G)$", "", kept)
        assert kept.lower() in re.sub(r"[^A-Za-z0-9]", "", f).lower(), (n, f)


def test_names_that_do_not_collide_keep_their_short_form():
    files = render_files(["images/0000.jpg", "images/0001.jpg", "images/café.jpg"])
    assert list(files.values()) == ["0000.png", "0001.png", "cafe.png"]
    files = render_files(["é.jpg", "ë.jpg", "x.jpg"])
    assert files["x.jpg"] == "x.png"
    assert sorted([files["é.jpg"], files["ë.jpg"]]) == ["e_0.png", "e_1.png"]


@pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
def test_render_test_cameras_with_names_that_sanitise_alike(tmp_path, capsys):
    """`splat render SCENE --path test` of a cameras.json whose test views are é.jpg and ë.jpg
    (both became jpg.png, one overwriting the other)."""
    from splat.camera import Camera
    from splat.formats import save_cameras_json
    from splat.io.ply import save_ply
    from _scenes import look_at, make_rng, random_scene
    rng, _ = make_rng(3)
    scene = random_scene(rng, n=20, sh_degree=0, width=16, height=12)
    save_ply(tmp_path / "point_cloud.ply", splat.Gaussians(scene.means, scene.log_scales, scene.quats,
                                                           scene.opacity_logits, scene.sh))
    cams = [Camera(look_at((0.0, 0.0, -4.0 - k), (0.0, 0.0, 0.0), (0.0, -1.0, 0.0)).astype(np.float32),
                   14.0, 14.0, 8.0, 6.0, 16, 12) for k in range(3)]
    save_cameras_json(tmp_path / "cameras.json", cams[:1], ["r.jpg"], cams[1:], ["é.jpg", "ë.jpg"])
    rc, out, err = run_cli(capsys, "render", tmp_path / "point_cloud.ply", "--path", "test", "--out",
                           tmp_path / "t", "--quiet", "--backend", "cpu")
    assert rc == 0, err
    pngs = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert pngs == ["e_0.png", "e_1.png"], pngs
