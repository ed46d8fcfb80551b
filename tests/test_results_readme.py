"""The results READMEs quote no number by hand: every table between `<!-- table:NAME -->`
markers and every number between `<!-- v:NAME -->` markers equals what vgp_bench/studies
computes from the committed runs, each marker names a generator its study declares, and outside
those places no decimal number appears in the READMEs' text (bar the named constants and the
calibration protocol's settings, which are checked against the code), nor in the top-level
README. The integer settings the calibration and DRAW READMEs quote (epochs, batch, hold-out, S,
test images, the architecture) are checked against the configs and the study script's defaults.
Each study's generators are tested on run folders written for the test in test_study_*.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.study_folders import (
    forget_records,
)
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.readme import declared_studies, generated_documents, readme_path, render


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    """Each test reads the run records afresh (the package reads each once per process)."""
    forget_records()


ROOT = Path(__file__).resolve().parent.parent

# decimals that are settings or architecture, not results
CONSTANTS = {"0.7", "7.5M"}  # the PSIS k-hat threshold; the dense T(h) layer's weights

README_CONSTANTS = {"3.11"}  # the Python version


def loose_decimals(text: str) -> list[str]:
    """Decimal numbers outside generated tables and values and outside section references."""
    text = re.sub(r"<!-- table:[\w.-]+ -->.*?<!-- /table -->", "", text, flags=re.S)
    text = re.sub(r"<!-- v:[\w.-]+ -->.*?<!-- /v -->", "", text, flags=re.S)
    text = re.sub(r"sections? \d+(\.\d+)*", "", text)
    return [n for n in re.findall(r"(?<![\w.])\d+\.\d+\w*", text) if n not in CONSTANTS]


def test_a_study_on_old_mnist_data_says_so() -> None:
    """A results README whose committed runs read an MNIST file of an older format than the
    converter writes names that format and points to docs/data.md, which says what was wrong
    with it; a study whose runs are all of the current format needs no such notice."""
    from vgp_bench.compat import OLD_MNIST_FORMATS
    from vgp_bench.data.mnist import FORMAT_VERSION

    seen = set()
    for readme in sorted((ROOT / "results").glob("*/README.md")):
        study = readme.parent
        runs = [*study.glob("runs/*/metrics.json")]
        if study.name == "vgp_vs_vae":  # its README also reports these studies' runs
            runs += [*(ROOT / "results" / "fixed_decoder").glob("runs/*/metrics.json")]
        formats = {
            json.loads(path.read_text()).get("dataset", {}).get("format_version")
            for path in runs
            if json.loads(path.read_text()).get("dataset", {}).get("name") == "mnist"
        }
        text = readme.read_text()
        for old in sorted(version for version in formats if version != FORMAT_VERSION):
            assert old in OLD_MNIST_FORMATS, (study.name, old)
            assert f"format {old}" in text and "docs/data.md" in text, study.name
            seen.add(study.name)
    assert {"vgp_vs_vae", "dlgm1_families"} <= seen


def test_generated_tables_and_numbers_are_up_to_date() -> None:
    """Every generated table and number equals what the runs give."""
    for study in declared_studies():
        text = readme_path(study).read_text()
        assert render(text, study) == text, f"run scripts/results_readme.py ({study.name})"


def test_every_marker_names_a_generator() -> None:
    """A table or value name its study does not declare fails instead of vanishing."""
    for study in generated_documents():
        text = readme_path(study).read_text()
        assert set(re.findall(r"<!-- table:([\w.-]+) -->", text)) <= set(study.tables)
        assert set(re.findall(r"<!-- v:([\w.-]+) -->", text)) <= set(study.values)


def test_every_readme_with_generated_places_is_a_declared_study() -> None:
    """The six studies' READMEs have generated places, each rendered by its own declaration
    (vgp_bench/studies/<study>.py), found from the README's folder."""
    names = [study.name for study in declared_studies()]
    assert names == [
        "calibrated", "calibration", "convergence", "dlgm1_families", "draw", "vgp_vs_vae",
    ]  # fmt: skip
    for study in declared_studies():
        assert readme_path(study) == ROOT / "results" / study.name / "README.md"
    assert [readme_path(study) for study in generated_documents()][-1] == ROOT / "README.md"


def test_a_readme_with_generated_places_and_no_declaration_is_an_error(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A README whose folder names no study module fails with a line naming it and the fix,
    instead of being skipped; a README without generated places is no study."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("Nothing generated here.\n")
    assert declared_studies() == []
    (tmp_path / "new_study").mkdir()
    (tmp_path / "new_study" / "README.md").write_text("<!-- v:answer -->42<!-- /v -->\n")
    missing = re.escape("new_study/README.md: generated places, but no vgp_bench/studies/new_study")
    with pytest.raises(SystemExit, match=missing):
        declared_studies()


def calibration_protocol_decimals() -> set[str]:
    """The settings results/calibration/README.md's protocol section quotes, from the code:
    the staged step-size factors (vgp_bench.schedules), the optimizer's betas (configs/optim),
    the output bias's clip range (models/dlgm.py), and their paper's beta1 (a quote)."""
    from omegaconf import OmegaConf

    from tests.helpers import total_stage_epochs
    from vgp_bench.models.dlgm import OUTPUT_BIAS_CLIP
    from vgp_bench.schedules import burda_stages

    stage_starts = [total_stage_epochs(stages) for stages in range(8)]  # 0, 1, 4, 13, ...
    factors = {f"{burda_stages(epoch, 1):g}" for epoch in stage_starts}
    betas = OmegaConf.load(ROOT / "configs" / "optim" / "burda_adam.yaml").optimizer.betas
    clip = {f"{bound:g}" for bound in OUTPUT_BIAS_CLIP}
    return factors | {f"{beta:g}" for beta in betas} | clip | {"0.9"}


def section(text: str, heading: str) -> str:
    """A markdown section's text, from its heading to the next heading of its level."""
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start : following if following >= 0 else len(text)]


def test_no_number_is_quoted_by_hand() -> None:
    """Outside generated places the results READMEs hold no decimal number, bar the
    calibration protocol section's settings, which must be the code's."""
    for study in (study.name for study in declared_studies()):
        text = (ROOT / "results" / study / "README.md").read_text()
        if study == "calibration":
            protocol = section(text, "## Protocol")
            assert set(loose_decimals(protocol)) <= calibration_protocol_decimals()
            text = text.replace(protocol, "")
        assert loose_decimals(text) == [], study


def test_the_calibration_protocol_quotes_every_stage_step_size() -> None:
    """The README's schedule row lists the code's eight factors in order."""
    from tests.helpers import total_stage_epochs
    from vgp_bench.schedules import burda_stages

    text = (ROOT / "results" / "calibration" / "README.md").read_text()
    factors = [burda_stages(total_stage_epochs(stages), 1) for stages in range(8)]
    assert ", ".join(f"{factor:g}" for factor in factors) + " (x 1e-4)" in text


def test_the_top_readme_quotes_no_result() -> None:
    """The top-level README points at the studies instead of copying their numbers."""
    text = (ROOT / "README.md").read_text()
    assert [n for n in loose_decimals(text) if n not in README_CONSTANTS] == []


def test_the_quoted_overstatements_stay_mended() -> None:
    """The numbers issue 24 named: the smallest dlgm2 lead, the fixed-r control behind the VAE,
    its largest validation gap (epoch 11), and the family runs' wall-clock range."""
    generators = [study.values for study in declared_studies()]
    values = {name: compute() for found in generators for name, compute in found.items()}
    assert values["dlgm2.lead.min"] == "1.80"
    assert values["dlgm2.fixed_r.behind"] == "0.09"
    assert (values["dlgm2.fixed_r.max_gap"], values["dlgm2.fixed_r.max_gap_epoch"]) == (
        "2.61",
        "11",
    )
    assert (values["families.wall.min"], values["families.wall.max"]) == ("48", "1022")


def test_the_draw_protocol_quotes_the_script_defaults_and_the_model_config() -> None:
    """results/draw/README.md's epochs, S, first test images and architecture are those of
    scripts/study_draw.sh's defaults and configs/model/draw.yaml, and its batch the table1
    protocol's."""
    from omegaconf import OmegaConf

    text = (ROOT / "results" / "draw" / "README.md").read_text()
    script_text = (ROOT / "scripts" / "study_draw.sh").read_text()
    defaults = dict(re.findall(r"\$\{(EPOCHS|SAMPLES|TEST_IMAGES):-(\d+)\}", script_text))
    assert f"for {defaults['EPOCHS']} epochs" in text
    assert f"{defaults['EPOCHS']} epochs (`EPOCHS`)" in text
    assert f"S = {defaults['SAMPLES']} importance samples (`SAMPLES`)" in text
    assert f"first on the first {defaults['TEST_IMAGES']}" in text
    model = OmegaConf.load(ROOT / "configs" / "model" / "draw.yaml")
    assert (
        f"LSTMs of {model.encoder_size}, T = {model.steps} glimpses, "
        f"{model.read_size}x{model.read_size} read, {model.write_size}x{model.write_size} write, "
        f"z_t of {model.z_dim}"
    ) in text and model.encoder_size == model.decoder_size
    protocol = OmegaConf.load(ROOT / "configs" / "experiment" / "base" / "table1.yaml")
    assert f"batch {protocol.trainer.batch_size}" in text


def test_the_calibration_protocol_quotes_the_experiment_config() -> None:
    """results/calibration/README.md's hold-out, batch, steps an epoch, epochs and test samples
    are configs/experiment/burda_dlgm1_vae.yaml's (60,000 training images, 10,000 test)."""
    from omegaconf import OmegaConf

    from tests.helpers import total_stage_epochs

    text = section((ROOT / "results" / "calibration" / "README.md").read_text(), "## Protocol")
    config = OmegaConf.load(ROOT / "configs" / "experiment" / "burda_dlgm1_vae.yaml")
    holdout, batch = config.dataset.holdout, config.trainer.batch_size
    assert f"the last {holdout} held out" in text and f"`dataset.holdout={holdout}`" in text
    assert f"batch {batch}, the same order" in text and f"`trainer.batch_size={batch}`" in text
    assert f"({(60_000 - holdout) // batch} steps an epoch)" in text
    assert config.trainer.epochs == total_stage_epochs(8)
    assert f"`trainer.epochs={config.trainer.epochs}`" in text
    samples = config.eval.is_samples
    assert f"k = {samples} on all 10,000" in text and f"`eval.is_samples={samples}`" in text
