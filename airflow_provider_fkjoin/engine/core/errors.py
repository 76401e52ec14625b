"""Errors the engine raises, each with a message that names the table, column or key and the fix.

A fix that is an option of the run rather than a spec field is spelled the way each caller sets it
(:func:`run_option`): one message serves the Airflow task's log, the ``fkjoin`` command line and Python.
"""

from __future__ import annotations

#: Each run option a message may ask for, as the Airflow operators, the ``fkjoin`` command and ``run_spec``
#: spell it. The engine cannot tell who called it (an Airflow task runs ``fkjoin run`` on its Spark
#: driver), so a message names all three.
RUN_OPTIONS: dict[str, tuple[str, str, str]] = {
    "full_refresh": (
        "the operator argument full_refresh=True (it is templated: with "
        'full_refresh="{{ params.full_refresh }}" a triggered run can ask for it)',
        "fkjoin run --full-refresh",
        "run_spec(spec, full_refresh=True)",
    ),
}


def run_option(name: str) -> str:
    """How to ask for a run option, in the words of each way to run a refresh.

    >>> run_option("full_refresh").split("; ")[1:]
    ['on the command line fkjoin run --full-refresh', 'in Python run_spec(spec, full_refresh=True)']
    """
    airflow, command, python = RUN_OPTIONS[name]
    return f"in Airflow {airflow}; on the command line {command}; in Python {python}"


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
