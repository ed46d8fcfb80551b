"""The errors a user can fix: each message is the whole story and says what to do.

The commands print a `UserError` as its message alone (one line, no traceback on the
terminal); any other exception is a bug in the package and is printed with its type.
"""

from __future__ import annotations


class UserError(Exception):
    """A failure caused by the input (settings, files, disk) rather than by the package."""


class ConfigError(UserError, ValueError):
    """A configuration value that cannot work; the message says which key and what to use."""


class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked; nothing in it was changed."""


class MissingDataError(UserError, FileNotFoundError):
    """A file the command needs is absent; the message names the command that makes it."""


class CorruptDataError(UserError, ValueError):
    """A file exists but cannot be trusted; the message says how to rebuild or replace it."""


class NoSpaceError(UserError, OSError):
    """A write that found the disk full; the file it was to replace is unchanged."""

    def __str__(self) -> str:
        return str(self.strerror)


class NonFiniteTrainingError(UserError, RuntimeError):
    """Too many non-finite bounds in a row; the message says which settings to change."""
