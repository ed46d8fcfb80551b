"""Differences paired over the test images (vgp_bench/studies/paired_differences.py,
paired_evaluations.py and differences.py): which tests pair, which stored pairs stand, and which
runs a stored pair counts for."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.study_folders import (
    FORMAT_2,
    evaluation_record,
    forget_records,
    per_example_file,
    run_with_test,
    write_run,
)
from vgp_bench.analysis.paired import data_read
from vgp_bench.studies import paired_differences, paired_evaluations
from vgp_bench.studies import runs as study_runs
from vgp_bench.studies.cells import difference_cell
from vgp_bench.studies.convergence import (
    convergence_differences_table,
)
from vgp_bench.studies.differences import NO_PAIR, paired_values


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    """Each test reads the run records afresh (the package reads each once per process)."""
    forget_records()


def test_a_test_of_another_file_keeps_none_of_the_run_files_identity() -> None:
    """A format-2 run tested on a format-1 file (whose identity states no content digest):
    the test read the format-1 file, drawn as the run's settings say, and nothing of the run's
    own file's identity is taken for it."""
    run = {**FORMAT_2, "sha256": "a" * 64, "binarization": "dynamic", "eval_binarization_seed": 7}
    other = {"format_version": 1, "sha256": "b" * 64}
    assert data_read(run, other) == {
        **other,
        "binarization": "dynamic",
        "eval_binarization_seed": 7,
    }
    assert data_read(run, None) == run and data_read(None, None) == {}


def test_two_rows_of_one_seed_get_their_difference_paired_over_the_test_images(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """scripts/paired_differences.py pairs the tests of two rows of one seed on the same data,
    images and S whose files hold what their records say (not another seed's, nor a test of
    other data or another S, nor one whose file was not kept); the differences table shows the
    pair beside the unpaired difference, in the sign of the table's row either way round."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "convergence" / "runs"
    history = [{"epoch": 1, "valid_bound": -90.0}]
    nll = {
        "dlgm1_vae_s0": [88.0, 90.0, 86.0, 87.0],
        "dlgm1_vae_s1": [88.5, 90.0, 86.0, 87.0],  # another seed: paired with nothing
        "dlgm1_vgp_default_s0": [87.5, 89.0, 85.9, 86.2],
        "dlgm1_vgp_linear_s0": [87.0, 89.0, 85.0, 86.0],
        "dlgm2_vae_s0": [90.0, 91.0, 92.0, 93.0],
        "dlgm2_vgp_paper_s0": [89.0, 90.0, 91.0, 92.0],  # tested on other data
        "dlgm2_vgp_paper_affine_s0": [89.5, 90.0, 91.0, 92.0],  # at another S
        "dlgm2_vgp_linear_s0": [89.0, 90.0, 91.0, 92.5],  # its file not kept
    }
    bound_nll = {  # the bounds' offsets differ by image and run
        run: [value + 3.0 + 0.1 * index * (image + 1) for image, value in enumerate(values)]
        for index, (run, values) in enumerate(nll.items())
    }
    for run, values in nll.items():
        samples = 1000 if run == "dlgm2_vgp_paper_affine_s0" else 5000
        test = evaluation_record(statistics.fmean(values), (0.8, 0.9), 0.0, 4, samples)
        test["bound_nll"] = statistics.fmean(bound_nll[run])
        if run != "dlgm2_vgp_linear_s0":
            test["per_example_file"] = f"test_per_example_k{samples}.h5"
        write_run(runs / run, "finished", history, 10, test)
        record = json.loads((runs / run / "metrics.json").read_text())
        other_data = {**FORMAT_2, "content_sha256": "0" * 64}
        record["dataset"] = other_data if run == "dlgm2_vgp_paper_s0" else FORMAT_2
        (runs / run / "metrics.json").write_text(json.dumps(record))
        name = f"test_per_example_k{samples}.h5"
        per_example_file(runs / run, name, values, bound_nll[run], samples)
    out = tmp_path / "convergence" / "paired_differences.json"
    assert paired_differences.main([str(runs), str(out)]) == 0
    pairs = {(p["first"], p["second"], p["seed"]): p for p in json.loads(out.read_text())}
    kept = ["dlgm1_vae", "dlgm1_vgp_default", "dlgm1_vgp_linear", "dlgm2_vae"]
    assert sorted(pairs) == [(a, b, 0) for i, a in enumerate(kept) for b in kept[i + 1 :]]
    # a renewed checkout: the run folders are gone and the pairs they gave stay as measured; so
    # do they where a folder holds the run's record but not its per-example file; a run trained
    # again (its record at another step, without that test) drops the stored pairs it is in
    # until they are measured anew
    measured, renewed = out.read_text(), tmp_path / "renewed"
    assert paired_differences.main([str(renewed), str(out)]) == 0
    assert out.read_text() == measured
    (renewed / "dlgm1_vae_s0").mkdir(parents=True)
    shutil.copy(runs / "dlgm1_vae_s0" / "metrics.json", renewed / "dlgm1_vae_s0")
    assert paired_differences.main([str(renewed), str(out)]) == 0
    assert out.read_text() == measured
    write_run(renewed / "dlgm1_vae_s0", "running", history * 2, 10, None)
    assert paired_differences.main([str(renewed), str(out)]) == 0
    left = [(p["first"], p["second"]) for p in json.loads(out.read_text())]
    kept_pairs = [(a, b) for i, a in enumerate(kept[1:], 1) for b in kept[i + 1 :]]
    assert left == kept_pairs
    # two runs back with their files: their pair measured, sorted among the kept ones (a run
    # back with its file keeps the pairs with runs still gone)
    shutil.copytree(runs / "dlgm1_vgp_linear_s0", renewed / "dlgm1_vgp_linear_s0")
    shutil.copytree(runs / "dlgm1_vae_s0", renewed / "dlgm1_vae_s0", dirs_exist_ok=True)
    assert paired_differences.main([str(renewed), str(out)]) == 0
    left = [(p["first"], p["second"]) for p in json.loads(out.read_text())]
    assert left == [("dlgm1_vae", "dlgm1_vgp_linear"), *kept_pairs]
    assert paired_differences.main([str(runs), str(out)]) == 0
    assert out.read_text() == measured  # all measured again, in the same order

    def paired(a: str, b: str, values: dict[str, list[float]]) -> tuple[float, float]:
        differences = [x - y for x, y in zip(values[a], values[b], strict=True)]
        return statistics.fmean(differences), statistics.stdev(differences) / 2

    pair = pairs[("dlgm1_vae", "dlgm1_vgp_default", 0)]
    for key, values in (("nll", nll), ("bound_nll", bound_nll)):
        difference, paired_se = paired("dlgm1_vae_s0", "dlgm1_vgp_default_s0", values)
        assert pair[key]["difference"] == pytest.approx(difference)
        assert pair[key]["paired_se"] == pytest.approx(paired_se)
    table = convergence_differences_table()

    def row_of(label: str) -> list[str]:
        line = next(line for line in table.splitlines() if line.startswith(f"| {label}"))
        return [cell.strip() for cell in line.strip("|").split("|")]

    for label, a, b in [
        ("dlgm1: VAE - the default VGP", "dlgm1_vae_s0", "dlgm1_vgp_default_s0"),
        ("dlgm1: control - the default VGP", "dlgm1_vgp_linear_s0", "dlgm1_vgp_default_s0"),
    ]:  # the second pair is stored the other way round (default before linear)
        difference, paired_se = paired(a, b, nll)
        unpaired = difference_cell(difference, math.hypot(0.8, 0.8))
        expected = "seed 0: " + difference_cell(difference, paired_se, digits=3)
        assert row_of(label)[1:4] == ["0", unpaired, expected]
    for label in ("dlgm2: VAE - the paper's VGP", "dlgm2: VAE - the twin"):
        assert row_of(label)[3] == f"seed 0: {NO_PAIR}"


def test_a_stored_pair_stands_while_its_runs_still_name_the_files_it_came_from(
    tmp_path: Path,
) -> None:
    """A pair measured earlier is kept where it cannot be measured again (a file gone, a run
    folder gone) while the same runs' records (their run_ids) still name its files as their
    current tests; a run trained again, or another realization of it tested into a file of the
    same name, drops it, and a pair whose files are all there is measured, not kept.
    scripts/paired_evaluations.py keeps a run's pairs by the same rule; both scripts pair no
    lost run's snapshot."""
    from vgp_bench.analysis.paired import stored_pair_stands

    history = [{"epoch": 1, "valid_bound": -90.0}]
    name = "test_per_example_k5000.h5"

    def tested(folder: Path, run_id: str, nll: float = 88.0) -> None:
        test = evaluation_record(nll, (0.8, 0.9), 4.0, 2, 5000)
        write_run(folder, "finished", history, 10, {**test, "per_example_file": name})
        record = json.loads((folder / "metrics.json").read_text())
        record = {**record, "run_id": run_id, "dataset": FORMAT_2}
        (folder / "metrics.json").write_text(json.dumps(record))

    first, second = tmp_path / "runs" / "a_s0", tmp_path / "runs" / "b_s0"
    tested(first, "a1")
    tested(second, "b1")
    sources = [(first, name, "a1"), (second, name, "b1")]
    assert stored_pair_stands(sources)  # both files gone
    assert stored_pair_stands([(first, name, None), (second, name, None)])  # no run_ids stored
    per_example_file(first, name, [87.0, 89.0])
    assert stored_pair_stands(sources)  # one file gone
    per_example_file(second, name, [87.0, 89.0])
    assert not stored_pair_stands(sources)  # both there: measured again
    shutil.rmtree(second)
    assert stored_pair_stands(sources)  # a folder gone with its checkout
    tested(first, "a2", 80.0)
    assert not stored_pair_stands(sources)  # another realization, a file of the same name
    write_run(first, "running", history * 2, 10, None)
    assert not stored_pair_stands([(first, name, None)])  # trained again: not its current test

    # the script: a stored pair whose other run's file is gone, and the first run tested again
    # as another realization into a file of the same name, is dropped, not kept stale
    study, out = tmp_path / "study", tmp_path / "paired_differences.json"
    tested(study / "a_s0", "a1")
    tested(study / "b_s0", "b1")
    tested(study / "b_lost1_s0", "b0")  # a lost run's snapshot: never paired
    per_example_file(study / "b_lost1_s0", name, [88.5, 87.5])
    per_example_file(study / "a_s0", name, [87.0, 89.0])
    per_example_file(study / "b_s0", name, [87.5, 88.5])
    main = paired_differences.main
    assert main([str(study), str(out)]) == 0
    (measured,) = json.loads(out.read_text())
    assert (measured["first"], measured["second"], measured["run_ids"]) == ("a", "b", ["a1", "b1"])
    (study / "b_s0" / name).unlink()
    assert main([str(study), str(out)]) == 0
    assert json.loads(out.read_text()) == [measured]  # kept as measured
    tested(study / "a_s0", "a2", 80.0)
    per_example_file(study / "a_s0", name, [79.0, 81.0])
    assert main([str(study), str(out)]) == 0
    assert json.loads(out.read_text()) == []

    own, other = "test_per_example_k5000.h5", "test_per_example_k5000_data-c0ffee00.h5"
    run = tmp_path / "calibration" / "burda_s0"
    write_run(run, "finished", history, 10, None)
    record = json.loads((run / "metrics.json").read_text())
    record["run_id"] = "r1"
    record["evaluations"] = [
        {**evaluation_record(88.0, (0.8, 0.9), 4.0, 2, 5000), "per_example_file": file,
         "run_steps": record["steps"]}
        for file in (own, other)
    ]  # fmt: skip
    (run / "metrics.json").write_text(json.dumps(record))
    out = tmp_path / "paired_evaluations.json"
    stored = {"run": run.name, "own_file": own, "other_file": other, "n_examples": 2,
              "difference": 0.5, "paired_se": 0.1}  # fmt: skip
    out.write_text(json.dumps([stored]))
    main = paired_evaluations.main
    assert main([str(run.parent), str(out)]) == 0
    # its files are not in the folder: kept, with the run_id it was measured with
    assert json.loads(out.read_text()) == [{**stored, "run_id": "r1"}]
    write_run(run, "running", history * 2, 10, None)
    assert main([str(run.parent), str(out)]) == 0
    assert json.loads(out.read_text()) == []


def test_a_per_example_file_that_does_not_hold_its_records_values_is_not_read(
    tmp_path: Path,
) -> None:
    """A file replaced by another evaluation's values (another mean), a diverged run's
    non-finite values and a single image give no paired values."""
    from vgp_bench.analysis.paired import per_example_values
    from vgp_bench.run.folder.metrics import Evaluation

    def evaluation(nll: float, images: int) -> Evaluation:
        record = evaluation_record(nll, (0.8, 0.9), 4.0, images, 5000)
        return Evaluation({**record, "per_example_file": "test.h5"})

    per_example_file(tmp_path, "test.h5", [88.0, 90.0])
    assert per_example_values(tmp_path, evaluation(89.0, 2)) == [88.0, 90.0]
    assert per_example_values(tmp_path, evaluation(89.0, 2), "bound_nll") == [92.0, 94.0]
    assert per_example_values(tmp_path, evaluation(89.5, 2)) is None  # another evaluation's
    per_example_file(tmp_path, "test.h5", [88.0, math.inf])
    assert per_example_values(tmp_path, evaluation(math.inf, 2)) is None
    per_example_file(tmp_path, "test.h5", [88.0])
    assert per_example_values(tmp_path, evaluation(88.0, 1)) is None


def test_a_stored_pair_counts_only_for_the_runs_it_was_computed_from(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A pair in paired_differences.json is read for the two runs whose run_ids it stores, in
    either order (the sign turns), or for any runs where it stores none; a pair of an earlier
    realization, with the same per-example file names, is not read for the runs of now."""
    monkeypatch.setattr(study_runs, "RESULTS", tmp_path)
    runs = tmp_path / "study" / "runs"
    for name, run_id in (("a_s0", "id-a"), ("b_s0", "id-b")):
        run_with_test(runs / name, 90.0, 1.0, "test_per_example_k5000.h5")
        record = json.loads((runs / name / "metrics.json").read_text())
        (runs / name / "metrics.json").write_text(json.dumps({**record, "run_id": run_id}))
    tests = (study_runs.test_of("study", "a_s0"), study_runs.test_of("study", "b_s0"))

    def paired(first: str, second: str, run_ids: list[str] | None) -> tuple[float, float] | None:
        files = [tests[0]["per_example_file"]] * 2
        stored = {"seed": 0, "first": first, "second": second, "files": files,
                  "nll": {"difference": 0.4, "paired_se": 0.03}}  # fmt: skip
        if run_ids is not None:
            stored["run_ids"] = run_ids
        (tmp_path / "study" / "paired_differences.json").write_text(json.dumps([stored]))
        return paired_values("study", ("a", "b"), 0, tests, "nll")

    assert paired("a", "b", ["id-a", "id-b"]) == (0.4, 0.03)
    assert paired("b", "a", ["id-b", "id-a"]) == (-0.4, 0.03)
    assert paired("a", "b", None) == (0.4, 0.03)
    assert paired("a", "b", ["id-a", "id-b-of-an-earlier-machine"]) is None
    assert paired("b", "a", ["id-a", "id-b"]) is None  # stored the other way round: ids swap
