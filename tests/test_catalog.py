"""What configs/ offers and how the report names and orders it (vgp_bench/catalog.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from vgp_bench.catalog import Option, catalog, option, rank
from vgp_bench.errors import ConfigError
from vgp_bench.locations import group_options


def test_every_option_of_a_group_is_in_the_catalog_in_the_reports_order() -> None:
    for group in ("inference", "model", "dataset"):
        assert sorted(catalog(group)) == group_options(group), group
    assert list(catalog("inference"))[:4] == ["vae", "vgp", "planar_flow", "hvi"]
    assert option("inference", "planar_flow") == Option(
        "planar_flow", "NF", 2, ("flow_length", "k")
    )
    assert option("model", "dlgm2").label == "DLGM 2hl"
    assert rank("dataset", "mnist") < rank("dataset", "sketch") < rank("dataset", "synthetic")


def test_an_option_without_a_file_or_a_report_line_gets_the_defaults(tmp_path: Path) -> None:
    assert option("inference", "iaf") == Option("iaf", "IAF", math.inf, None)  # a removed family
    assert option("model", "resnet") == Option("resnet", "resnet", math.inf, None)
    (tmp_path / "inference").mkdir()
    (tmp_path / "inference" / "iaf.yaml").write_text("# An IAF.\nname: iaf\n")
    assert catalog("inference", str(tmp_path)) == {"iaf": Option("iaf", "IAF")}


def test_a_bad_report_line_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "big.yaml"
    path.write_text("# report: {lable: Big}\nname: big\n")
    with pytest.raises(ConfigError, match=rf"^{path}: the '# report:' line holds .*lable"):
        catalog("model", str(tmp_path))
