"""Datasets: each module reads its own files and returns a DatasetBundle; nothing else reads files."""

from vgp_bench.data.base import CorruptDataError, DatasetBundle, ImageSplit, MissingDataError

__all__ = ["CorruptDataError", "DatasetBundle", "ImageSplit", "MissingDataError"]
