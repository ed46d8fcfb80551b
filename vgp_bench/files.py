"""Files written so that a crash or a full disk never leaves a half-written one: atomic writes
beside the target, the temporaries a killed write left, and opens that never follow a link."""

from __future__ import annotations

import errno
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from vgp_bench.errors import CorruptDataError, MissingDataError, NoSpaceError

# What names this package's temporary files: `.<name>.vgp-<random>.tmp`. Only files so named
# are ever removed as left by a killed write; anyone else's `.x.tmp` is not ours to delete.
TEMPORARY_MARK = ".vgp-"


def no_space_error(path: Path) -> NoSpaceError:
    return NoSpaceError(
        errno.ENOSPC,
        f"no space left on {path.parent} (writing {path.name}, which is "
        f"{'unchanged' if path.exists() else 'not written'}); free some space and run the same "
        "command again",
    )


def unwritable_reason(path: Path) -> str | None:
    """Why a file cannot be written at `path` (its folder, or the nearest ancestor that would
    hold it, is read-only or a file), or None; reads only."""
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is read-only"
    return None


def current_umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary path `.<name>.vgp-*.tmp` beside `path`, renamed over `path` on success.

    For writers that need a name (h5py). The file gets the usual permissions, 0666 less the
    umask (mkstemp alone makes 0600); on any error the temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        prefix=f".{path.name}{TEMPORARY_MARK}", suffix=".tmp", dir=path.parent
    )
    try:
        try:
            os.fchmod(handle, 0o666 & ~current_umask())
        finally:
            os.close(handle)
        yield Path(temporary)
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        if error.errno == errno.ENOSPC and not isinstance(error, NoSpaceError):
            raise no_space_error(path) from error
        raise
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def orphaned_temporaries(folder: Path) -> list[Path]:
    """The temporary files in `folder` of this package's atomic writes whose process was
    killed (named `.<name>.vgp-*.tmp`; no other file, whatever its name)."""
    if not folder.is_dir():
        return []
    found = folder.glob(f".*{TEMPORARY_MARK}*.tmp")
    return sorted(path for path in found if path.is_file() and not path.is_symlink())


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call `write(stream)` on a temporary file, flush it to disk, then rename it over `path`."""
    with atomic_file(path) as temporary, open(temporary, "wb") as stream:
        write(stream)
        stream.flush()
        os.fsync(stream.fileno())


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` atomically (a link at `path` is replaced, never written through)."""
    data = text.encode()
    atomic_write(path, lambda stream: stream.write(data))


def open_no_follow(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """`os.open` with O_NOFOLLOW: a symbolic link at `path` raises OSError (ELOOP)."""
    return os.open(path, flags | os.O_NOFOLLOW, mode)


class NoFollowFileHandler(logging.FileHandler):
    """A logging FileHandler that appends to its file, never through a symbolic link."""

    def _open(self):  # type: ignore[override]
        descriptor = open_no_follow(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        return open(descriptor, self.mode, encoding=self.encoding, errors=self.errors)


def read_json(path: str | Path) -> Any:
    """The JSON value in the file a user named; a missing file or one that is not JSON text is
    the user's error, said in one line."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise MissingDataError(
            f"{path} does not exist; give the JSON file a command wrote"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise CorruptDataError(f"{path} cannot be read as JSON text ({error})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CorruptDataError(f"{path} is not JSON ({error})") from None
