"""A capture of mixed orientation made from a COLMAP capture: every other image
(by name) turned a quarter turn clockwise, its camera turned with it, so
portrait and landscape views alternate over the same scene.

    python bench/mixed_orientation.py ../shared/data/captures/room /tmp/room_mixed
    python bench/real.py /tmp/room_mixed --steps 7000,30000      # then train it

The geometry is unchanged: a turned view sees what it saw, so a trainer that
handles mixed sizes right reaches the original capture's quality on it. An image
turned a quarter turn clockwise has width H and height W; the pixel that was at
(x, y) is at (H - y, x) (continuous coordinates, pixel centres at +0.5), so its
camera is the old one turned about the optical axis, (X, Y, Z) -> (-Y, X, Z):
fx' = fy, fy' = fx, cx' = H - cy, cy' = cx, and the radial terms unchanged.
Models with a radially symmetric lens only (SIMPLE_PINHOLE, PINHOLE,
SIMPLE_RADIAL, RADIAL); others are refused. Untouched images are copied byte
for byte; turned ones are written as PNG (lossless), or with --jpeg-quality Q
as JPEG (smaller, to carry: quality 100 still re-encodes). Every image gets a
camera of its own. The output folder must not exist.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

TURN = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # (X, Y, Z) -> (-Y, X, Z)
SYMMETRIC = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL")


def turned_camera(model: str, width: int, height: int, params) -> tuple[str, int, int, tuple]:
    """The COLMAP camera of an image turned a quarter turn clockwise."""
    p = tuple(float(v) for v in params)
    if model == "PINHOLE":
        fx, fy, cx, cy = p
        return model, height, width, (fy, fx, height - cy, cx)
    if model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        f, cx, cy, *radial = p
        return model, height, width, (f, height - cy, cx, *radial)
    raise ValueError(f"camera model {model}: not radially symmetric (have {', '.join(SYMMETRIC)})")


def turned_qvec(q) -> tuple:
    """COLMAP's (w, x, y, z) world-to-camera rotation followed by TURN, a quarter
    turn about the optical axis: the Hamilton product (cos 45, 0, 0, sin 45) q."""
    w, x, y, z = (float(v) for v in q)
    h = float(np.sqrt(0.5))
    return (h * (w - z), h * (x - y), h * (y + x), h * (z + w))


def make(src: Path, dst: Path, every: int = 2, jpeg_quality: int | None = None) -> dict:
    from PIL import Image

    from splat.data.colmap import find_sparse_dir, read_model
    sparse = find_sparse_dir(src)
    if sparse is None:
        raise ValueError(f"{src}: no COLMAP sparse model (sparse/0 or sparse)")
    if dst.exists():
        raise ValueError(f"{dst}: exists (give a new folder)")
    cams, imgs, (points, colours) = read_model(sparse)
    ordered = sorted(imgs.values(), key=lambda im: im.name)
    for im in ordered:
        if cams[im.camera_id].model not in SYMMETRIC:
            raise ValueError(f"{src}: image {im.name} uses camera model {cams[im.camera_id].model}; "
                             f"this tool turns {', '.join(SYMMETRIC)} only")
    out_sparse = dst / "sparse" / "0"
    (dst / "images").mkdir(parents=True)
    out_sparse.mkdir(parents=True)
    cam_lines, img_lines, turned = [], [], 0
    for k, im in enumerate(ordered, start=1):
        cam = cams[im.camera_id]
        q, t = tuple(im.qvec), np.asarray(im.tvec, np.float64)
        name = im.name
        model, w, h, params = cam.model, cam.width, cam.height, tuple(cam.params)
        turn = (k - 1) % every == every - 1
        if turn:
            model, w, h, params = turned_camera(model, w, h, params)
            q, t = turned_qvec(q), TURN @ t
            stem = str(Path(name).with_suffix(""))
            name = stem + (".jpg" if jpeg_quality else ".png")
        (dst / "images" / name).parent.mkdir(parents=True, exist_ok=True)  # names may hold folders
        if turn:
            with Image.open(src / "images" / im.name) as pic:
                pic = pic.transpose(Image.Transpose.ROTATE_270)  # a quarter turn clockwise
                if jpeg_quality:
                    pic.save(dst / "images" / name, quality=int(jpeg_quality), subsampling=0)
                else:
                    pic.save(dst / "images" / name)
            turned += 1
        else:
            shutil.copyfile(src / "images" / im.name, dst / "images" / name)
        cam_lines.append(f"{k} {model} {w} {h} " + " ".join(repr(float(v)) for v in params))
        img_lines += [f"{k} " + " ".join(repr(float(v)) for v in (*q, *t)) + f" {k} {name}", ""]
    (out_sparse / "cameras.txt").write_text("\n".join(cam_lines) + "\n")
    (out_sparse / "images.txt").write_text("\n".join(img_lines) + "\n")
    rgb = np.clip(np.rint(np.asarray(colours) * 255.0), 0, 255).astype(int)
    (out_sparse / "points3D.txt").write_text("".join(
        f"{i + 1} {p[0]!r} {p[1]!r} {p[2]!r} {c[0]} {c[1]} {c[2]} 0\n"
        for i, (p, c) in enumerate(zip(np.asarray(points, np.float64).tolist(), rgb.tolist()))))
    return {"images": len(ordered), "turned": turned, "points": len(points)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="mixed_orientation.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", type=Path, help="COLMAP capture folder (sparse/ and images/)")
    p.add_argument("output", type=Path, help="new folder for the turned capture")
    p.add_argument("--every", type=int, default=2, help="turn every n-th image by name (default 2)")
    p.add_argument("--jpeg-quality", type=int, default=None, metavar="Q",
                   help="write turned images as JPEG of this quality (default: PNG, lossless)")
    args = p.parse_args(argv)
    if args.every < 1:
        p.error(f"--every: need at least 1, got {args.every}")
    if args.jpeg_quality is not None and not 1 <= args.jpeg_quality <= 100:
        p.error(f"--jpeg-quality: need 1..100, got {args.jpeg_quality}")
    try:
        made = make(args.source, args.output, args.every, args.jpeg_quality)
    except (ValueError, OSError) as exc:
        print(f"mixed_orientation.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.output}: {made['images']} images, {made['turned']} turned a quarter turn, "
          f"{made['points']:,} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
