"""A small TU-Berlin-shaped sketch tree (`png/<category>/<n>.png`) and its zip, for tests.

Script use (the throughput measurement):
    python -m tests.sketch_fixture OUT --categories 25 --per-category 80 [--size 1111] [--zip]
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import zipfile
from pathlib import Path

from PIL import Image, ImageDraw

ORIGINAL_SIZE = 1111  # side of every TU-Berlin PNG
# Real category names first (spaces and parentheses included), then numbered ones.
CATEGORY_NAMES = ("airplane", "bear (animal)", "flying saucer", "mouse (animal)", "t-shirt")


def category_names(count: int) -> list[str]:
    """`count` category names in the real data set's style."""
    named = list(CATEGORY_NAMES[:count])
    return named + [f"object {number:03d}" for number in range(len(named), count)]


def draw_sketch(rng: random.Random, size: int) -> Image.Image:
    """One greyscale sketch: black polylines on white, stroke width ~4-8 px at 1111x1111."""
    image = Image.new("L", (size, size), color=255)
    canvas = ImageDraw.Draw(image)
    scale = size / ORIGINAL_SIZE
    margin = size // 10
    for _ in range(rng.randint(3, 8)):
        points = [
            (rng.randint(margin, size - margin), rng.randint(margin, size - margin))
            for _ in range(rng.randint(2, 6))
        ]
        width = max(1, round(rng.randint(4, 8) * scale))
        canvas.line(points, fill=rng.randint(0, 60), width=width, joint="curve")
    return image


def png_bytes(image: Image.Image) -> bytes:
    """The image encoded as PNG."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_sketch_tree(
    root: Path, categories: int = 3, per_category: int = 10, size: int = 256, seed: int = 0
) -> list[Path]:
    """Draw `root/png/<category>/<n>.png` numbered 1.. across categories, as distributed."""
    rng = random.Random(seed)
    png_root = Path(root) / "png"
    paths = []
    for category_index, category in enumerate(category_names(categories)):
        folder = png_root / category
        folder.mkdir(parents=True, exist_ok=True)
        for image_index in range(per_category):
            path = folder / f"{category_index * per_category + image_index + 1}.png"
            path.write_bytes(png_bytes(draw_sketch(rng, size)))
            paths.append(path)
    # The real archive also holds a file list next to the category folders.
    listing = [path.relative_to(png_root).as_posix() for path in paths]
    (png_root / "filelist.txt").write_text("\n".join(listing) + "\n")
    return paths


def write_sketch_zip(root: Path, zip_path: Path) -> Path:
    """Zip `root/png/...` with the real archive's member names `png/<category>/<n>.png`."""
    png_root = Path(root) / "png"
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_STORED) as archive:
        for path in sorted(png_root.rglob("*")):
            if path.is_file():
                archive.write(path, arcname=path.relative_to(root).as_posix())
    return zip_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to draw into (png/ goes inside)")
    parser.add_argument("--categories", type=int, default=3)
    parser.add_argument("--per-category", type=int, default=10)
    parser.add_argument("--size", type=int, default=ORIGINAL_SIZE)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--zip", action="store_true", help="also write OUT/sketches_png.zip")
    args = parser.parse_args(argv)
    paths = write_sketch_tree(args.out, args.categories, args.per_category, args.size, args.seed)
    print(f"wrote {len(paths)} sketches of {args.size}x{args.size} under {args.out / 'png'}")
    if args.zip:
        print(f"wrote {write_sketch_zip(args.out, args.out / 'sketches_png.zip')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
