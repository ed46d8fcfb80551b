"""The family study (results/dlgm1_families): every inference family on DLGM 1hl for 10 epochs,
its test numbers and the wall-clock seconds each took."""

from __future__ import annotations

from vgp_bench.studies import runs
from vgp_bench.studies.cells import evaluation_cell, share_cell, table
from vgp_bench.studies.study import Study
from vgp_bench.studies.vgp_vs_vae import V

F = "dlgm1_families"
FAMILIES = [
    ("VAE (`table1_dlgm1_vae`)", "fam_vae"),
    ("IWAE k = 50 (`trainer.objective=iwae trainer.n_samples=50`)", "fam_iwae"),
    ("planar flow k = 80 (`table1_dlgm1_nf`)", "fam_nf"),
    ("HVI, 8 leapfrog steps (`table1_dlgm1_hvi`)", "fam_hvi"),
    ("VGP, best configuration (`inference=vgp` defaults)", "fam_vgp_best"),
    ("VGP without its GP (`inference.warp=linear`, the control)", "fam_vgp_linear"),
    ("VGP, the paper's form (`table1_dlgm1_vgp`: dense T(h), zero mean)", "fam_vgp_paper"),
]
# family runs whose first 10 epochs the 100-epoch study's runs of seed 0 repeat
SHARED = [
    ("fam_vae", "dlgm1_vae_s0"),
    ("fam_vgp_best", "dlgm1_vgp_best_s0"),
    ("fam_vgp_linear", "dlgm1_vgp_linear_s0"),
    ("fam_vgp_paper", "dlgm1_vgp_paper_s0"),
]


def families_table() -> str:
    """Every dlgm1 family after 10 epochs: test numbers and the wall-clock seconds recorded."""
    rows = []
    for label, run in FAMILIES:
        test, metrics = runs.test_of(F, run), runs.load(F, run)
        rows.append(
            [
                label,
                evaluation_cell(test, "nll"),
                f"{test['bound_nll']:.2f}",
                f"{test['bound_nll'] - test['nll']:.2f}",
                share_cell(test["pareto_k_above_0_7"]),
                f"{runs.best_valid(F, run):.2f}",
                f"{metrics['wall_time_s']:.0f}",
            ]
        )
    header = [
        "family (config)",
        "-log p(x) (IS)",
        "-bound",
        "bound - IS",
        "k-hat > 0.7",
        "valid bound, epoch 10",
        "wall_time_s",
    ]
    return table(header, rows)


def wall_times() -> list[float]:
    """wall_time_s of every family run."""
    return [runs.load(F, run)["wall_time_s"] for _, run in FAMILIES]


def shared_epochs(family_run: str, study_run: str) -> bool:
    """Whether a family run's validation curve is the 100-epoch run's first 10 epochs."""
    ours = [entry["valid_bound"] for entry in runs.load(F, family_run)["history"]]
    theirs = [entry["valid_bound"] for entry in runs.load(V, study_run)["history"]][: len(ours)]
    return ours == theirs


def fam(run: str, key: str) -> float:
    """A family run's test quantity."""
    return runs.test_of(F, run)[key]


def gain(run: str, key: str = "nll") -> float:
    """The VAE's test quantity minus a family run's (positive: the family is better)."""
    return fam("fam_vae", key) - fam(run, key)


STUDY = Study(
    F,
    tables={"families": families_table},
    values={
        "families.wall.min": lambda: f"{min(wall_times()):.0f}",
        "families.wall.max": lambda: f"{max(wall_times()):.0f}",
        "families.wall.ratio": lambda: f"{max(wall_times()) / min(wall_times()):.0f}",
        "families.hvi.bound_gain": lambda: f"{gain('fam_hvi', 'bound_nll'):.1f}",
        "families.iwae.is_gain": lambda: f"{gain('fam_iwae'):.1f}",
        "families.nf.is_gain": lambda: f"{gain('fam_nf'):.1f}",
        "families.best.is_gain": lambda: f"{gain('fam_vgp_best'):.1f}",
        "families.control.is_gain": lambda: f"{gain('fam_vgp_linear'):.1f}",
        "families.paper.is_behind": lambda: f"{-gain('fam_vgp_paper'):.1f}",
        "families.shared": lambda: str(sum(shared_epochs(f, v) for f, v in SHARED)),
    },
)
