"""Every figure committed under results/ and docs/ is one the code still draws: matplotlib's PNG
beside its PDF (issue 59: no figure of the earlier Pillow plotter is left)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vgp_bench.figures.drawing import metadata

ROOT = Path(__file__).resolve().parents[1]


def committed_figures() -> list[Path]:
    """The PNG files under results/ and docs/."""
    return sorted([*(ROOT / "results").rglob("*.png"), *(ROOT / "docs").rglob("*.png")])


def test_results_hold_figures() -> None:
    assert committed_figures(), "results/ holds no figure: the studies' curves are missing"


def test_every_results_figure_is_matplotlibs_png_with_its_pdf() -> None:
    software = metadata("png")["Software"]
    for png in committed_figures():
        assert png.with_suffix(".pdf").is_file(), f"{png} has no PDF beside it"
        with Image.open(png) as image:
            assert image.info.get("Software") == software, f"{png} was not drawn by figures.py"
        assert png.with_suffix(".pdf").read_bytes().startswith(b"%PDF"), png
