"""Datasets: each loader reads its own files and returns a DatasetBundle; nothing else does."""

from vgp_bench.data.base import DatasetBundle, ImageSplit
from vgp_bench.errors import CorruptDataError, MissingDataError

__all__ = ["CorruptDataError", "DatasetBundle", "ImageSplit", "MissingDataError"]
