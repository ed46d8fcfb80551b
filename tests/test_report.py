"""vgp-report: tables, seed statistics, paper numbers and the not-in-tables section."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from pathlib import Path

import pytest

from vgp_bench.analysis import report


def write_run(
    folder: Path,
    *,
    model: str,
    inference: str,
    seed: int,
    dataset: str = "mnist",
    status: str = "finished",
    error: str | None = None,
    test: dict | None = None,
    eval_at_epochs: dict | None = None,
    epochs_completed: int = 10,
    max_steps: int = 5000,
    objective: str | None = None,
    aux_samples: int = 0,
    experiment: str | None = "table1_fixture",  # the paper's protocol unless a test says not
) -> Path:
    """A run folder as the trainer writes it: metrics.json and the resolved config.yaml."""
    folder.mkdir(parents=True)
    metrics = {
        "status": status,
        "error": error,
        "experiment": experiment,
        "model": model,
        "inference": inference,
        "objective": objective,
        "aux_samples": aux_samples,
        "seed": seed,
        "code_version": "0.1.0+gtest",
        "dataset": {
            "name": dataset,
            "binarization": "dynamic" if dataset == "mnist" else "fixed",
            "merge_valid": False,
            "split_sizes": {"train": 50000, "valid": 10000, "test": 10000},
        },
        "epochs_completed": epochs_completed,
        "steps": max_steps,
        "wall_time_s": 1.0,
        "history": [],
        "eval_at_epochs": eval_at_epochs or {},
    }
    if test is not None:
        metrics["test"] = {
            "is_samples": 5000,
            "aux_samples": aux_samples,
            "n_examples": 10000,
            "is_below_bound": False,
        } | test
    (folder / "metrics.json").write_text(json.dumps(metrics))
    config = {
        "seed": seed,
        "device": "auto",
        "data_dir": str(folder.parent / "data"),
        "model": {"name": model},
        "inference": {"name": inference},
        "trainer": {"max_steps": max_steps},
    }
    (folder / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    return folder


def update_config(folder: Path, groups: dict[str, dict]) -> None:
    """Merge `{group: {key: value}}` into a run folder's config.yaml."""
    config = json.loads((folder / "config.yaml").read_text())
    for group, values in groups.items():
        config[group] = config.get(group, {}) | values
    (folder / "config.yaml").write_text(json.dumps(config))


def evaluated(nll: float, bound: float, nll_stderr: float = 0.3, bound_stderr: float = 0.35):
    return {
        "nll": nll,
        "nll_stderr": nll_stderr,
        "bound_nll": bound,
        "bound_nll_stderr": bound_stderr,
    }


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    return make_runs(tmp_path / "multirun")


def make_runs(root: Path) -> Path:
    """Every kind of run folder the report must handle, under `root`."""
    # three seeds of DLGM 1hl + VGP
    for seed, (nll, bound) in enumerate([(84.0, 87.0), (85.0, 88.0), (86.0, 92.0)]):
        write_run(
            root / f"dlgm1_vgp/{seed}",
            model="dlgm1",
            inference="vgp",
            seed=seed,
            objective="collapsed",
            test=evaluated(nll, bound),
        )
    # the same method in a smoke-sized configuration: its own row, never pooled
    write_run(
        root / "smoke/dlgm1_vgp",
        model="dlgm1",
        inference="vgp",
        seed=0,
        objective="collapsed",
        max_steps=20,
        test=evaluated(150.0, 160.0),
    )
    # one seed of a configuration with no paper row
    write_run(
        root / "dlgm2_vae/0",
        model="dlgm2",
        inference="vae",
        seed=0,
        test=evaluated(83.5, 86.0, nll_stderr=0.4, bound_stderr=0.45),
    )
    write_run(
        root / "draw_vae/0", model="draw", inference="vae", seed=0, test=evaluated(82.0, 84.0)
    )
    # a non-default objective and K
    write_run(
        root / "dlgm1_vgp_hier/0",
        model="dlgm1",
        inference="vgp",
        seed=0,
        objective="hierarchical",
        aux_samples=8,
        test=evaluated(84.5, 86.5),
    )
    # runs that must show up in the not-in-tables section
    write_run(root / "running/0", model="dlgm1", inference="vae", seed=0, status="running")
    write_run(root / "interrupted/0", model="dlgm1", inference="vae", seed=1, status="interrupted")
    write_run(
        root / "failed/0",
        model="draw",
        inference="vgp",
        seed=0,
        status="failed",
        error="RuntimeError: Cholesky failed\n  after 5 jitter increases",
    )
    write_run(root / "unevaluated/0", model="dlgm1", inference="vae", seed=2)
    broken = root / "broken/0"
    broken.mkdir(parents=True)
    (broken / "metrics.json").write_text("{not json")
    crashed = root / "crashed/0"  # a Hydra run folder whose run died before metrics.json
    (crashed / ".hydra").mkdir(parents=True)
    (crashed / ".hydra" / "config.yaml").write_text("seed: 0\n")
    # Sketch: two seeds of draw, one of draw + vgp
    for seed, (at100, at200, final) in enumerate([(530.0, 480.0, 470.0), (528.0, 482.0, 474.0)]):
        write_run(
            root / f"sketch_draw/{seed}",
            model="draw",
            inference="vae",
            seed=seed,
            dataset="sketch",
            epochs_completed=300,
            eval_at_epochs={
                "100": {"test_bound_nll": at100, "test_bound_nll_stderr": 0.9, "n_examples": 2000},
                "200": {"test_bound_nll": at200, "test_bound_nll_stderr": 0.8, "n_examples": 2000},
            },
            test=evaluated(460.0, final),
        )
    write_run(
        root / "sketch_draw_vgp/0",
        model="draw",
        inference="vgp",
        seed=0,
        dataset="sketch",
        epochs_completed=300,
        objective="collapsed",
        eval_at_epochs={
            "100": {"test_bound_nll": 461.0, "test_bound_nll_stderr": 0.7, "n_examples": 2000}
        },
        test=evaluated(420.0, 425.0, bound_stderr=0.6),
    )
    return root


def run_report(arguments: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    code = report.main(arguments)
    return code, capsys.readouterr().out


def markdown_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """Section title -> rows (as header -> cell) of the pipe table under it."""
    tables: dict[str, list[dict[str, str]]] = {}
    title, header = None, None
    for line in text.splitlines():
        if line.startswith("## "):
            title, header = line[3:], None
            tables[title] = []
        elif line.startswith("|") and title is not None:
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if header is None:
                header = cells
            elif not set(line) <= set("|- "):  # the rule line
                assert len(cells) == len(header), line
                tables[title].append(dict(zip(header, cells)))
    return tables


def row_named(rows: list[dict[str, str]], method: str) -> dict[str, str]:
    matches = [row for row in rows if row["method"] == method]
    assert len(matches) == 1, (method, [row["method"] for row in rows])
    return matches[0]


def test_table1_pools_seeds_with_mean_and_standard_error(runs_root, capsys):
    code, out = run_report([str(runs_root)], capsys)
    assert code == 0
    table1 = markdown_tables(out)["Table 1: binarized MNIST"]
    labels = [row["method"] for row in table1]
    assert labels == [
        "DLGM 1hl + VGP [trainer.max_steps=20]",
        "DLGM 1hl + VGP [trainer.max_steps=5000]",
        "DLGM 1hl + VGP (hierarchical, K=8)",
        "DLGM 2hl + VAE",
        "DRAW + VAE",
    ]
    row = row_named(table1, "DLGM 1hl + VGP [trainer.max_steps=5000]")
    assert row["seeds"] == "n=3 (0, 1, 2)"
    # 84, 85, 86: mean 85, sd 1, stderr 1/sqrt(3)
    assert row["-log p(x) (IS)"] == "85.00 ± 0.58"
    # 87, 88, 92: mean 89, sd sqrt(7)
    assert row["bound"] == f"89.00 ± {math.sqrt(7) / math.sqrt(3):.2f}" == "89.00 ± 1.53"
    assert row["paper (≤)"] == "84.79"
    assert row["Δ IS"] == "+0.21" and row["Δ bound"] == "+4.21"
    assert (row["data"], row["S"], row["K"], row["test N"]) == ("dynamic", "5000", "0", "10000")


def test_table1_single_seed_keeps_its_own_stderr_and_blank_paper(runs_root, capsys):
    _, out = run_report([str(runs_root)], capsys)
    table1 = markdown_tables(out)["Table 1: binarized MNIST"]
    row = row_named(table1, "DLGM 2hl + VAE")
    assert row["seeds"] == "n=1 (0)"
    assert row["-log p(x) (IS)"] == "83.50 ± 0.40" and row["bound"] == "86.00 ± 0.45"
    assert row["paper (≤)"] == row["Δ IS"] == row["Δ bound"] == "—"
    draw = row_named(table1, "DRAW + VAE")
    assert (draw["paper (≤)"], draw["Δ IS"], draw["Δ bound"]) == ("80.97", "+1.03", "+3.03")
    hierarchical = row_named(table1, "DLGM 1hl + VGP (hierarchical, K=8)")
    assert (hierarchical["paper (≤)"], hierarchical["K"]) == ("84.79", "8")
    assert "n=1 it is the standard error of that run's test-set estimate" in out


def test_table2_columns_by_epoch_with_paper_numbers(runs_root, capsys):
    _, out = run_report([str(runs_root)], capsys)
    table2 = markdown_tables(out)["Table 2: Sketch"]
    assert [row["method"] for row in table2] == ["draw", "draw + vgp"]
    draw = table2[0]
    assert draw["seeds"] == "n=2 (0, 1)"
    assert draw["100 ep"] == "529.00 ± 1.00"  # 530, 528
    assert draw["200 ep"] == "481.00 ± 1.00"
    assert draw["final bound"] == "472.00 ± 2.00 (300 ep)"
    # epoch 300 is not in eval_at_epochs: the final test bound of runs that stopped there
    assert draw["300 ep"] == "472.00 ± 2.00 ‡"
    assert (draw["paper 100"], draw["Δ 100"]) == ("526.8", "+2.20")
    assert (draw["paper 300"], draw["Δ 300"]) == ("464.5", "+7.50")
    vgp = table2[1]
    assert vgp["100 ep"] == "461.00 ± 0.70" and vgp["200 ep"] == "—"
    assert vgp["final bound"] == "425.00 ± 0.60 (300 ep)"
    assert "on 2000 test images" in out


def test_not_in_tables_lists_every_other_run(runs_root, capsys):
    _, out = run_report([str(runs_root)], capsys)
    excluded = markdown_tables(out)["Not in the tables"]
    by_folder = {Path(row["folder"]).relative_to(runs_root).as_posix(): row for row in excluded}
    assert set(by_folder) == {
        "running/0",
        "interrupted/0",
        "failed/0",
        "unevaluated/0",
        "broken/0",
        "crashed/0",
    }
    # recorded as running at a step, with no process holding its lock and no checkpoint: a
    # study's snapshot, or a run killed before its first checkpoint
    assert by_folder["running/0"]["status"] == "unfinished"
    assert "no checkpoint here: a study's snapshot" in by_folder["running/0"]["error"]
    assert by_folder["interrupted/0"]["status"] == "interrupted"
    assert by_folder["failed/0"]["status"] == "failed"
    assert by_folder["failed/0"]["error"] == (
        "RuntimeError: Cholesky failed after 5 jitter increases"
    )
    assert "no test-set evaluation" in by_folder["unevaluated/0"]["error"]
    assert by_folder["broken/0"]["status"] == "unreadable"
    assert by_folder["crashed/0"]["status"] == "no metrics"
    assert "16 run folders" in out and "10 in the tables, 6 not" in out


def test_no_paper_drops_paper_columns(runs_root, capsys):
    _, out = run_report([str(runs_root), "--no-paper"], capsys)
    tables = markdown_tables(out)
    assert "paper (≤)" not in tables["Table 1: binarized MNIST"][0]
    assert "paper" not in tables["Table 2: Sketch"][0]
    assert "84.79" not in out and "526.8" not in out


def test_csv_parses_with_numbers_and_exclusions(runs_root, capsys):
    _, out = run_report([str(runs_root), "--format", "csv"], capsys)
    records = list(csv.DictReader(io.StringIO(out)))
    pooled = [
        r for r in records if r["table"] == "table1" and r["n"] == "3" and r["quantity"] == "nll"
    ]
    assert len(pooled) == 1
    assert float(pooled[0]["mean"]) == pytest.approx(85.0)
    assert float(pooled[0]["stderr"]) == pytest.approx(statistics.stdev([84, 85, 86]) / 3**0.5)
    assert float(pooled[0]["paper"]) == 84.79
    assert float(pooled[0]["difference"]) == pytest.approx(85.0 - 84.79)
    assert pooled[0]["seeds"] == "0 1 2" and pooled[0]["stderr_over"] == "seeds"
    at100 = [
        r
        for r in records
        if r["table"] == "table2" and r["epoch"] == "100" and r["inference"] == "vgp"
    ]
    assert len(at100) == 1 and float(at100[0]["difference"]) == pytest.approx(461.0 - 460.1)
    assert at100[0]["stderr_over"] == "test images"
    excluded = {r["status"] for r in records if r["table"] == "not_in_tables"}
    assert excluded == {
        "unfinished",
        "interrupted",
        "failed",
        "finished",
        "unreadable",
        "no metrics",
    }


def test_latex_tables_are_well_formed(runs_root, capsys):
    _, out = run_report([str(runs_root), "--format", "latex"], capsys)
    assert out.count("\\begin{tabular}") == out.count("\\end{tabular}") == 3
    for block in re.findall(r"\\begin\{tabular\}\{(l+)\}(.*?)\\end\{tabular\}", out, re.S):
        columns, body = len(block[0]), block[1]
        rows = [line for line in body.splitlines() if line.endswith("\\\\")]
        assert rows
        for line in rows:
            unescaped_ampersands = len(re.findall(r"(?<!\\)&", line))
            assert unescaped_ampersands == columns - 1, line
    assert "$\\pm$" in out and "$\\Delta$" in out and "±" not in out
    assert out.count("{") == out.count("}")


def test_no_runs_found_is_a_message_not_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = run_report([], capsys)
    assert code == 0 and "no runs found" in out
    (tmp_path / "outputs").mkdir()
    code, out = run_report([], capsys)
    assert code == 0 and "no runs found" in out and "outputs" in out


def test_default_roots_and_missing_folder(runs_root, capsys, monkeypatch):
    monkeypatch.chdir(runs_root.parent)
    code, out = run_report([], capsys)
    assert code == 0 and "Table 1: binarized MNIST" in out and "multirun" in out
    assert report.main([str(runs_root / "nowhere")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_single_run_folder_and_no_config(tmp_path, capsys):
    folder = write_run(
        tmp_path / "run", model="dlgm1", inference="vae", seed=3, test=evaluated(88.0, 90.0)
    )
    (folder / "config.yaml").unlink()
    _, out = run_report([str(folder)], capsys)
    row = row_named(markdown_tables(out)["Table 1: binarized MNIST"], "DLGM 1hl + VAE")
    assert row["seeds"] == "n=1 (3)" and row["paper (≤)"] == "86.76"
    assert row["Δ IS"] == "+1.24"


def test_other_inference_rows_sit_beside_their_papers_numbers(tmp_path, capsys):
    def family_run(
        name: str, model: str, family: str, test: dict, metrics=None, options=None
    ) -> None:
        folder = write_run(tmp_path / name, model=model, inference=family, seed=0, test=test)
        recorded = json.loads((folder / "metrics.json").read_text()) | (metrics or {})
        (folder / "metrics.json").write_text(json.dumps(recorded))
        config = json.loads((folder / "config.yaml").read_text())
        config["inference"].update(options or {})
        (folder / "config.yaml").write_text(json.dumps(config))

    iwae = {"train_objective": "iwae", "train_samples": 50}
    family_run("nf", "dlgm1", "planar_flow", evaluated(86.0, 88.0), options={"flow_length": 80})
    family_run("hvi", "dlgm1", "hvi", evaluated(86.5, 89.0), options={"leapfrog_steps": 8})
    family_run("iwae", "dlgm2", "vae", evaluated(84.0, 85.0), metrics=iwae)
    family_run(
        "vgp_iwae",
        "dlgm2",
        "vgp",
        evaluated(82.0, 83.0),
        metrics={**iwae, "objective": "collapsed"},
    )
    family_run("elbo", "dlgm2", "vae", evaluated(85.0, 87.0), metrics={"train_samples": 1})
    _, out = run_report([str(tmp_path)], capsys)
    table1 = markdown_tables(out)["Table 1: binarized MNIST"]
    assert [row["method"] for row in table1] == [
        "DLGM 1hl + NF (k=80)",
        "DLGM 1hl + HVI (L=8)",
        "DLGM 2hl + VAE",
        "DLGM 2hl + VAE (IWAE k=50)",
        "DLGM 2hl + VGP (IWAE k=50)",
    ]
    cells = {row["method"]: (row["paper (≤)"], row["Δ IS"], row["Δ bound"]) for row in table1}
    assert cells["DLGM 1hl + NF (k=80)"] == ("85.10", "+0.90", "+2.90")
    assert cells["DLGM 1hl + HVI (L=8)"] == ("88.30 (IS 85.51)", "+0.99", "+0.70")
    assert cells["DLGM 2hl + VAE"] == ("—", "—", "—")  # trained with the ELBO: no paper row
    assert cells["DLGM 2hl + VAE (IWAE k=50)"] == ("82.90", "+1.10", "+2.10")
    assert cells["DLGM 2hl + VGP (IWAE k=50)"] == ("81.32", "+0.68", "+1.68")
    _, out = run_report([str(tmp_path), "--format", "csv"], capsys)
    records = [r for r in csv.DictReader(io.StringIO(out)) if r["inference"] == "hvi"]
    by_quantity = {r["quantity"]: r for r in records}
    assert float(by_quantity["nll"]["paper"]) == 85.51
    assert float(by_quantity["bound_nll"]["paper"]) == 88.30
    iwae_records = [r for r in csv.DictReader(io.StringIO(out)) if r["train_objective"] == "iwae"]
    assert len(iwae_records) == 4 and {r["train_samples"] for r in iwae_records} == {"50"}


def test_seeds_pool_across_config_versions_and_objectives_stay_apart(tmp_path, capsys):
    """Runs of one setting pool into one row and one curve although an older run's config lacks
    keys added since (evaluation settings, newer keys at their older value); a run trained
    with another objective (IWAE) is its own row and its own curve."""
    root = tmp_path / "study"
    folders = {
        "vae_old": ({}, "elbo", 1, -100.0),
        "vae_new": (
            {"eval": {"aux_gap_samples": 256}, "trainer": {"objective": "elbo", "progress": False}},
            "elbo",
            1,
            -102.0,
        ),
        "iwae": ({"trainer": {"objective": "iwae", "n_samples": 50}}, "iwae", 50, -95.0),
    }
    for seed, (name, (extra, objective, samples, valid)) in enumerate(folders.items()):
        folder = write_run(
            root / name, model="dlgm1", inference="vae", seed=seed, test=evaluated(90.0, 95.0)
        )
        metrics = json.loads((folder / "metrics.json").read_text())
        if name != "vae_old":  # older runs recorded no training objective
            metrics |= {"train_objective": objective, "train_samples": samples}
        metrics["history"] = [{"epoch": 1, "valid_bound": valid}]
        (folder / "metrics.json").write_text(json.dumps(metrics))
        update_config(folder, extra)
    code, text = run_report([str(root)], capsys)
    assert code == 0
    rows = markdown_tables(text)["Table 1: binarized MNIST"]
    assert row_named(rows, "DLGM 1hl + VAE")["seeds"] == "n=2 (0, 1)"
    assert row_named(rows, "DLGM 1hl + VAE (IWAE k=50)")["seeds"] == "n=1 (2)"
    series = report.validation_curves(sorted(root.iterdir()))
    assert series == {"DLGM 1hl + VAE": [(1, -101.0)], "DLGM 1hl + VAE (IWAE k=50)": [(1, -95.0)]}


def test_runs_under_an_optimizers_older_name_pool_with_the_newer(tmp_path, capsys):
    """A seed trained with torch.optim.RMSprop pools with one trained with its blocked twin,
    vgp_bench.optimizers.RMSprop (the same numbers); Adam stays a row apart."""
    root = tmp_path / "study"
    targets = ["torch.optim.RMSprop", "vgp_bench.optimizers.RMSprop", "torch.optim.Adam"]
    for seed, target in enumerate(targets):
        folder = write_run(
            root / f"run{seed}", model="dlgm1", inference="vae", seed=seed, test=evaluated(90, 95)
        )
        update_config(folder, {"optim": {"optimizer": {"_target_": target}}})
    code, text = run_report([str(root)], capsys)
    assert code == 0
    seeds = sorted(row["seeds"] for row in markdown_tables(text)["Table 1: binarized MNIST"])
    assert seeds == ["n=1 (2)", "n=2 (0, 1)"]


def test_a_run_on_a_fixed_model_is_its_own_labelled_row(tmp_path, capsys):
    """trainer.train_model=false (only q trained on a given decoder) is a row apart, named so;
    the older run without the key pools with a run that sets it to its default."""
    root = tmp_path / "study"
    for seed, extra in enumerate(
        [
            {},
            {"train_model": True, "init_model": None},
            {"train_model": False, "init_model": "/runs/vae/checkpoints/best.pt"},
        ]
    ):
        folder = write_run(
            root / f"run{seed}", model="dlgm1", inference="vae", seed=seed, test=evaluated(90, 95)
        )
        update_config(folder, {"trainer": extra})
    code, text = run_report([str(root)], capsys)
    assert code == 0
    rows = markdown_tables(text)["Table 1: binarized MNIST"]
    assert row_named(rows, "DLGM 1hl + VAE")["seeds"] == "n=2 (0, 1)"
    assert row_named(rows, "DLGM 1hl + VAE (model fixed)")["seeds"] == "n=1 (2)"


def test_curves_draw_a_panel_per_model_and_a_distinct_style_per_row(tmp_path: Path) -> None:
    """The curve plot splits by model; legend entries are the tables' row labels (a run that
    differs from another only in trainer.epochs follows its curve, no `[key=value]` suffix,
    and of one setting and seed the longer history counts once); no two rows share a
    (colour, dash) pair, and a family looks the same in both panels."""
    root = tmp_path / "study"
    runs = [
        ("vae1", "dlgm1", "vae", 0, {}, [-100.0, -90.0, -80.0]),
        ("vae1_s1", "dlgm1", "vae", 1, {}, [-102.0, -92.0, -82.0]),
        ("vgp1", "dlgm1", "vgp", 0, {}, [-99.0, -89.0, -79.0]),
        ("vgp1_pilot", "dlgm1", "vgp", 0, {"trainer": {"epochs": 2}}, [-99.0, -89.0]),
        ("vae2", "dlgm2", "vae", 0, {}, [-110.0, -100.0, -95.0]),
        ("vgp2", "dlgm2", "vgp", 0, {}, [-109.0, -99.0, -94.0]),
        ("vgp2_fixed_r", "dlgm2", "vgp", 0, {"inference": {"aux_correction": "none"}}, [-111.0]),
    ]
    vgp = {"outputs": "global", "prior_mean": "identity", "variational_data_size": 8}
    for name, model, inference, seed, extra, valid in runs:
        folder = write_run(root / name, model=model, inference=inference, seed=seed)
        if inference == "vgp":
            extra = {**extra, "inference": vgp | extra.get("inference", {})}
        metrics = json.loads((folder / "metrics.json").read_text())
        metrics["history"] = [
            {"epoch": epoch, "valid_bound": value} for epoch, value in enumerate(valid, 1)
        ]
        (folder / "metrics.json").write_text(json.dumps(metrics))
        update_config(folder, extra)
    folders = sorted(root.iterdir())
    panels = report.curves.curve_panels(folders)
    assert list(panels) == ["DLGM 1hl", "DLGM 2hl"]
    assert panels["DLGM 1hl"]["DLGM 1hl + VAE"] == [(1, -101.0), (2, -91.0), (3, -81.0)]
    dlgm1_vgp = [label for label in panels["DLGM 1hl"] if "VGP" in label]
    assert len(dlgm1_vgp) == 1  # the 2-epoch run is the same trajectory as the 3-epoch one
    assert panels["DLGM 1hl"][dlgm1_vgp[0]] == [(1, -99.0), (2, -89.0), (3, -79.0)]
    assert len(panels["DLGM 2hl"]) == 3
    labels = [label for series in panels.values() for label in series]
    assert not any("[" in label or "=" in label.split("(")[0] for label in labels)
    styles = report.curves.row_styles(panels)
    for series in panels.values():
        pairs = [(styles[label].colour, styles[label].line_style) for label in series]
        assert len(set(pairs)) == len(pairs)
    assert styles["DLGM 1hl + VAE"] == styles["DLGM 2hl + VAE"]
    assert styles["DLGM 1hl + VAE"].colour != styles[dlgm1_vgp[0]].colour
    figure = report.curves.curves_of(folders)
    axes = {axis.get_title(loc="left"): axis for axis in figure.axes}
    assert list(axes) == ["DLGM 1hl", "DLGM 2hl"]
    drawn = {line.get_label(): line for line in axes["DLGM 1hl"].get_lines()}
    assert sorted(drawn) == sorted(panels["DLGM 1hl"])
    vae = drawn["DLGM 1hl + VAE"]
    assert list(vae.get_xdata()) == [1, 2, 3] and list(vae.get_ydata()) == [-101.0, -91.0, -81.0]
    assert (vae.get_color(), vae.get_linestyle()) == (styles["DLGM 1hl + VAE"].colour, "-")
    assert axes["DLGM 2hl"].get_xlabel() == "epoch"
    assert axes["DLGM 1hl"].get_ylabel() == "validation bound (nats, higher is better)"
    legend = [text.get_text() for text in axes["DLGM 2hl"].get_legend().get_texts()]
    assert legend == list(panels["DLGM 2hl"])
    png = tmp_path / "curves.png"
    assert report.write_curves(folders, png) == 5
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"


def test_the_snapshot_of_a_lost_run_is_in_no_table_and_no_curve(tmp_path: Path) -> None:
    """A folder named `<row>_lost<N>_s<seed>` (a study's last snapshot of a run lost with its
    run folder) is listed apart as lost, even when finished and tested, and its curve is not
    drawn in place of the live run of its setting and seed."""
    from vgp_bench.analysis.report.runs import is_lost_snapshot, load_run

    assert is_lost_snapshot("dlgm2_vgp_paper_lost2_s0")
    assert not is_lost_snapshot("dlgm2_vgp_paper_s0") and not is_lost_snapshot("run_lostless_s0")
    root = tmp_path / "study"
    for name, valid in (("vae_s0", [-100.0]), ("vae_lost1_s0", [-100.0, -90.0, -80.0])):
        folder = write_run(
            root / name, model="dlgm1", inference="vae", seed=0, test=evaluated(90, 95)
        )
        metrics = json.loads((folder / "metrics.json").read_text())
        metrics["history"] = [{"epoch": e, "valid_bound": v} for e, v in enumerate(valid, 1)]
        (folder / "metrics.json").write_text(json.dumps(metrics))
    lost = load_run(root / "vae_lost1_s0")
    assert isinstance(lost, report.runs.Excluded) and lost.status == "lost"
    assert "epoch 10" in lost.reason
    assert isinstance(load_run(root / "vae_s0"), report.runs.Run)
    panels = report.curves.curve_panels(sorted(root.iterdir()))
    assert panels == {"DLGM 1hl": {"DLGM 1hl + VAE": [(1, -100.0)]}}


def test_distinct_styles_never_repeat_a_colour_and_dash_pair() -> None:
    """Past the palette's length the line style moves on, so pairs stay unique."""
    from vgp_bench.figures.drawing import COLOURS, LINE_STYLES, distinct_styles

    count = len(COLOURS) * len(LINE_STYLES)
    styles = distinct_styles([f"row {i}" for i in range(count)])
    assert len({(style.colour, style.line_style) for style in styles.values()}) == count
