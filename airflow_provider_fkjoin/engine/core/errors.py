"""Errors the engine raises, each with a message that names the table, column or key and the fix."""

from __future__ import annotations


class FkJoinError(Exception):
    """Base class of every error the engine raises on purpose."""

    retryable: bool = False


class SpecError(FkJoinError, ValueError):
    """A spec is invalid: the message names the field path (``left.key[0]``) and what was expected.

    Raised before any data is read or written.
    """


class InputDataError(FkJoinError):
    """An input table holds data the join cannot use (duplicate keys), found before anything is written."""


class ConcurrentRefreshError(FkJoinError):
    """Another refresh of the same output committed first. Nothing of this refresh was written.

    Retrying is safe: the retry starts from the versions the winner consumed.
    """

    retryable = True


class TableNotBootstrappedError(FkJoinError):
    """The join's table is a global table whose checkpoint is behind its source's high watermark.

    Retryable: once the table's ``global_table_bootstrap`` has run, the join can start.
    """

    retryable = True


class FullRebuildRefusedError(FkJoinError):
    """A refresh would have to replace an append-only output (its earlier rows would be re-derived from
    the inputs as they are now), and the spec did not opt in. Nothing was written.

    Not retryable: the user decides (``allow_full_replace: true``, or a ``full_refresh`` run).
    """
