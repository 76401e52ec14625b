"""The driver's wire protocol: what the ``fkjoin`` CLI, the spark-submit job and the Airflow hook agree on.

A refresh runs in another process (spark-submit, a cluster driver); the hook learns its outcome only from
the exit code and a few marked lines of output. Every side reads the values here, so they cannot drift.

>>> from airflow_provider_fkjoin.engine.core.protocol import EXIT_RETRY, PHASE_MARKER
>>> line = "FKJOIN_PHASE committed 12.5"
>>> line.startswith(PHASE_MARKER)
True
"""

from __future__ import annotations

#: A refresh or audit that succeeded.
EXIT_OK = 0
#: An unexpected failure (a bug or an environment problem): worth a look, not a blind retry.
EXIT_ERROR = 1
#: A bad spec or bad input data: retrying cannot help. Python also exits 2 for a file it cannot open,
#: so the hook counts it only with the CLI's :data:`ERROR_PREFIX` line beside it.
EXIT_BAD_INPUT = 2
#: ``fkjoin audit`` found the output differs from a recompute.
EXIT_AUDIT_DIFFERS = 3
#: The spark-submit job's code for a bad spec or bad input (``EX_DATAERR``): unlike 2, Python never
#: exits with it on its own.
EXIT_JOB_BAD_INPUT = 65
#: A transient failure (a concurrent writer, a lost executor): a retry is expected to pass.
EXIT_RETRY = 75

#: ``FKJOIN_TRACE=1`` makes a refresh print ``FKJOIN_PHASE <name> <monotonic seconds>`` to stderr.
PHASE_MARKER = "FKJOIN_PHASE "
#: The CLI's one-line error message on stderr: ``error: <message>``.
ERROR_PREFIX = "error: "
#: The job's first stdout line: ``FKJOIN_APP {"app_id": ..., "ui_url": ..., "master": ...}``.
APP_INFO_PREFIX = "FKJOIN_APP "
