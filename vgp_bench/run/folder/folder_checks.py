"""What a start checks of its folder before writing anything (reads only): it is a run's own
folder or an empty one, outside any other run's folder, with no entry planted as a link or of
the wrong kind (a folder where the run keeps a file), and writable. Each refusal is one line
naming the path and what to do."""

from __future__ import annotations

import os
import re
from pathlib import Path

from vgp_bench.errors import RunFolderError
from vgp_bench.files import orphaned_temporaries
from vgp_bench.run.folder.lock import link_error
from vgp_bench.run.folder.lock_state import LOCK_NAME
from vgp_bench.run.folder.run_identity import RECORD_NAME, check_record, refuse_nested

LOG_NAME = "train.log"
# The run's own subfolders: their entries are checked for links too.
RUN_SUBFOLDERS = ("checkpoints", ".hydra", "tensorboard", "mlflow")
FILE, FOLDER = "file", "folder"
# What each entry a run writes must be, where it exists: a run writes into these
ENTRY_KINDS = {
    RECORD_NAME: FILE,
    "config.yaml": FILE,
    LOG_NAME: FILE,
    "eval.log": FILE,
    LOCK_NAME: FILE,
    "samples.png": FILE,
    "reconstructions.png": FILE,
    "canvas_steps.png": FILE,
    "checkpoints": FOLDER,
    ".hydra": FOLDER,
    "tensorboard": FOLDER,
    "checkpoints/last.pt": FILE,
    "checkpoints/best.pt": FILE,
}
# What a run opens for writing in place (the rest is replaced by a rename in its folder)
WRITTEN_IN_PLACE = (LOG_NAME, "eval.log", LOCK_NAME)


def planted_links(run_dir: Path) -> list[Path]:
    """The symbolic links among the folder's entries and those of its own subfolders."""
    if not run_dir.is_dir():
        return []
    links = []
    for entry in sorted(run_dir.iterdir()):
        if entry.is_symlink():
            links.append(entry)
        elif entry.name in RUN_SUBFOLDERS and entry.is_dir():
            links += [inner for inner in sorted(entry.iterdir()) if inner.is_symlink()]
    return links


def refuse_links(run_dir: Path) -> None:
    """Raise naming the first file of the run folder that is a symbolic link (reads only)."""
    links = planted_links(run_dir)
    if links:
        raise link_error(links[0])


# The first line of a log this package writes: `[2026-01-31 12:00:00,000][...`
OWN_LOG_START = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[")


def is_own_leftover(entry: Path, temporaries: frozenset[Path]) -> bool:
    """Whether `entry` is what an attempt of this package leaves before it holds a run: the
    lock, a log in this package's format, one of its atomic writes' `temporaries`."""
    if entry.is_symlink() or not entry.is_file():
        return False
    if entry.name == LOCK_NAME or entry in temporaries:
        return True
    if entry.name not in (LOG_NAME, "eval.log"):
        return False
    with entry.open("rb") as stream:
        first = stream.readline(200).decode(errors="replace")
    return not first or bool(OWN_LOG_START.match(first))


def refuse_foreign_folder(run_dir: Path) -> None:
    """Raise when `run_dir` holds files but no metrics.json (someone's own folder, or a system
    one); reads only. A folder with a metrics.json is a run's if its record says so
    (`check_record`)."""
    record = run_dir / RECORD_NAME
    if not run_dir.is_dir() or record.exists() or record.is_symlink():
        return
    temporaries = frozenset(orphaned_temporaries(run_dir))
    foreign = sorted(e.name for e in run_dir.iterdir() if not is_own_leftover(e, temporaries))
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        shown = ", ".join(foreign[:3]) + more
        raise RunFolderError(
            f"{run_dir} is not empty ({shown}) and holds no run (a run folder's metrics.json "
            "names its run): a run is written only into a new or empty folder or its own run "
            "folder; pick another hydra.run.dir"
        )


def kind_of(path: Path) -> str:
    return FOLDER if path.is_dir() else FILE if path.is_file() else "special file"


def refuse_misplaced_entries(run_dir: Path) -> None:
    """Raise naming the first entry a run writes that exists as the wrong kind (a folder named
    metrics.json, a file named tensorboard); reads only."""
    for name, wanted in ENTRY_KINDS.items():
        path = run_dir / name
        if path.is_symlink() or not path.exists() or kind_of(path) == wanted:
            continue
        raise RunFolderError(
            f"{path} is a {kind_of(path)} where the run keeps a {wanted} of that name: move "
            f"it out of {run_dir} and run again"
        )


def refuse_read_only(run_dir: Path) -> None:
    """Raise when the run could not write into `run_dir` (its own folders and the files it
    appends to included); reads only."""
    if not run_dir.is_dir():
        return
    paths = [run_dir, *(run_dir / name for name in (*RUN_SUBFOLDERS, *WRITTEN_IN_PLACE))]
    for path in paths:
        if path.exists() and not os.access(path, os.W_OK | (os.X_OK if path.is_dir() else 0)):
            raise RunFolderError(
                f"{path} is read-only: make the run folder writable (chmod -R u+w {run_dir}) "
                "and run again, or copy it to a writable place and run there"
            )


def check_run_folder(run_dir: Path) -> None:
    """Every check of a folder that vgp-train is to write into, in order (reads only)."""
    refuse_nested(run_dir)
    refuse_foreign_folder(run_dir)
    refuse_links(run_dir)
    refuse_misplaced_entries(run_dir)
    check_record(run_dir)
    refuse_read_only(run_dir)
