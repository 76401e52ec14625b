"""Phase markers: ``FKJOIN_TRACE=1`` prints ``FKJOIN_PHASE <name> <monotonic s>`` to stderr.

Crash tests kill a refresh when they read a marker, and in-process tests register a listener to act at
an exact point (say, let a second refresh commit first), so markers are emitted synchronously and
flushed when the phase is reached. Phases: ``pinned``, ``changes_read``, ``merge_started`` (the write
begins), ``committing`` (a net-change commit is about to commit), ``compacting`` (after the commit, when
the output is compacted), ``state_written`` (a windowed join's state table is written, its output not
yet) and ``committed``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .protocol import PHASE_MARKER

log = logging.getLogger("airflow_provider_fkjoin")
_listeners: list[Callable[[str], None]] = []
_timeline: ContextVar[dict[str, float] | None] = ContextVar("fkjoin_phase_timeline", default=None)


def phase(name: str) -> None:
    """Mark that a refresh reached ``name``."""
    log.info("phase %s", name)
    if os.environ.get("FKJOIN_TRACE") == "1":
        sys.stderr.write(f"{PHASE_MARKER}{name} {time.monotonic():.3f}\n")
        sys.stderr.flush()
    timeline = _timeline.get()
    if timeline is not None:
        timeline.setdefault(name, time.monotonic())
    for listener in list(_listeners):
        listener(name)


@contextmanager
def phase_timeline() -> Iterator[dict[str, float]]:
    """The monotonic time at which each phase is first reached in this context (this thread's refresh,
    not a concurrent one's), for the result dict's ``phases``.

    >>> with phase_timeline() as reached:
    ...     phase("pinned")
    >>> list(reached)
    ['pinned']
    """
    reached: dict[str, float] = {}
    token = _timeline.set(reached)
    try:
        yield reached
    finally:
        _timeline.reset(token)


@contextmanager
def phase_listener(listener: Callable[[str], None]) -> Iterator[None]:
    """Call ``listener(name)`` at every phase while the block runs.

    >>> with phase_listener(lambda name: print(name)):
    ...     run_spec(spec)
    """
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
