"""Phase markers for operators and crash tests: ``FKJOIN_TRACE=1`` prints ``FKJOIN_PHASE <name>`` to stderr.

The crash tests kill a refresh when they read a marker, so a marker is printed (and flushed) exactly
when its phase is reached, never buffered.
"""

from __future__ import annotations

import logging
import os
import sys
import time

log = logging.getLogger("airflow_provider_fkjoin")


def phase(name: str) -> None:
    """Mark that a refresh reached ``name`` (pinned, changes_read, merge_started, committed)."""
    log.info("phase %s", name)
    if os.environ.get("FKJOIN_TRACE") == "1":
        sys.stderr.write(f"FKJOIN_PHASE {name} {time.monotonic():.3f}\n")
        sys.stderr.flush()
