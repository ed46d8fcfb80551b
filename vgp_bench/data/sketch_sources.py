"""Where the TU-Berlin sketches come from: the unpacked png/ folder or sketches_png.zip."""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vgp_bench.errors import CorruptDataError, MissingDataError


@dataclass(frozen=True)
class SketchFile:
    """One PNG of the source: its category, its file name and where to read it."""

    category: str
    name: str
    key: str  # path of the file, or name of the zip member


def is_png(name: str) -> bool:
    """Whether a file or member name is a PNG (not a macOS resource fork `._*`)."""
    base = name.rsplit("/", 1)[-1]
    return base.lower().endswith(".png") and not base.startswith("._")


class FolderSource:
    """`png/<category>/<n>.png` unpacked: PATH is the folder holding png/ or the categories."""

    def __init__(self, path: Path):
        self.path = path
        self.root = path / "png" if (path / "png").is_dir() else path

    @property
    def name(self) -> str:
        return self.path.resolve().name

    def files(self) -> list[SketchFile]:
        return [
            SketchFile(file.parent.name, file.name, str(file))
            for file in self.root.glob("*/*")
            if file.is_file() and is_png(file.name)
        ]

    def read(self, key: str) -> bytes:
        return Path(key).read_bytes()

    def describe(self, key: str) -> str:
        return key

    def close(self) -> None:
        pass


class ZipSource:
    """`sketches_png.zip` as distributed, read member by member without unpacking."""

    def __init__(self, path: Path):
        self.path = path
        self.archive = zipfile.ZipFile(path)

    @property
    def name(self) -> str:
        return self.path.name

    def files(self) -> list[SketchFile]:
        files = []
        for member in self.archive.infolist():
            parts = member.filename.split("/")
            if member.is_dir() or parts[0] == "__MACOSX" or not is_png(member.filename):
                continue
            if len(parts) < 2:
                raise CorruptDataError(
                    f"{self.path}: {member.filename} is not inside a category folder; "
                    "expected png/<category>/<n>.png"
                )
            files.append(SketchFile(parts[-2], parts[-1], member.filename))
        return files

    def read(self, key: str) -> bytes:
        return self.archive.read(key)

    def describe(self, key: str) -> str:
        return f"{self.path}:{key}"

    def close(self) -> None:
        self.archive.close()


def open_source(path: Path) -> FolderSource | ZipSource:
    """The source at `path`: a folder, or a zip archive."""
    if path.is_dir():
        return FolderSource(path)
    if path.is_file() and zipfile.is_zipfile(path):
        return ZipSource(path)
    raise MissingDataError(
        f"{path} is neither a folder nor a zip archive; pass the unpacked png/ folder or "
        "sketches_png.zip"
    )


def sorted_categories(files: Sequence[SketchFile], source: str) -> dict[str, list[SketchFile]]:
    """Files grouped by category, categories and file names sorted as strings."""
    if not files:
        raise CorruptDataError(f"no PNG files in {source}; expected png/<category>/<n>.png")
    by_category: dict[str, list[SketchFile]] = {}
    for file in files:
        by_category.setdefault(file.category, []).append(file)
    grouped = {}
    for category in sorted(by_category):
        members = sorted(by_category[category], key=lambda file: file.name)
        names = [file.name for file in members]
        if len(set(names)) != len(names):
            raise CorruptDataError(
                f"{source}: category {category!r} holds the same file name twice"
            )
        grouped[category] = members
    return grouped
