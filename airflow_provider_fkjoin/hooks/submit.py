"""The Spark provider's SparkSubmitHook, capturing spark-submit's output and masking more credentials.

In a module of its own so the Spark provider (and ``requests``, which it imports) is loaded only when a
refresh is submitted with spark-submit: a noop run (the no-JVM check) or a Spark Connect run never needs
it, nor does parsing a DAG. :class:`~airflow_provider_fkjoin.hooks.fkjoin.FkJoinHook` imports it on first
use; ``airflow_provider_fkjoin.hooks.fkjoin._CapturingSparkSubmitHook`` is this class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_provider_fkjoin.hooks.masking import mask_text, secret_values
from airflow_provider_fkjoin.jobs.fkjoin_job import REDACTION_CONF


class CapturingSparkSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that hands every line of spark-submit's output to ``on_line`` and masks more.

    The provider masks only keys containing ``secret`` or ``password``, so ``fs.s3a.session.token``,
    ``fs.azure.account.key.*`` or ``fs.azure.sas.*`` would be logged in clear with the command. Here every
    place the provider masks (the logged command, "Cannot execute" errors, the output tail) and every
    output line it logs goes through :func:`~airflow_provider_fkjoin.hooks.masking.mask_text` as well::

        hook._mask_cmd(["--conf", "fs.azure.sas.c.a.blob.core.windows.net=sv=2024&sig=abc"])
        # '--conf fs.azure.sas.c.a.blob.core.windows.net=******'
    """

    def __init__(self, *args: Any, on_line: Callable[[str], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_line = on_line
        self._known_secrets = secret_values(
            [*(kwargs.get("conf") or {}).items(), *(kwargs.get("env_vars") or {}).items()]
        )

    def _mask_cmd(self, connection_cmd: str | list[str]) -> str:
        parts = [connection_cmd] if isinstance(connection_cmd, str) else [str(p) for p in connection_cmd]
        masked: list[str] = []
        run: list[str] = []
        for part in parts:
            if part.startswith(REDACTION_CONF + "="):
                # A pattern naming secrets, not one: shown as is (the provider's masker would take the
                # word "secret" in it for a key and mask the next argument instead).
                if run:
                    masked.append(super()._mask_cmd(run))
                    run = []
                masked.append(part)
            else:
                # Element by element first: a value may hold spaces or newlines (a PEM private key).
                run.append(mask_text(part, self._known_secrets))
        if run:
            masked.append(super()._mask_cmd(run))
        return " ".join(masked)

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def tee() -> Iterator[Any]:
            for line in itr:
                text = str(line).strip()
                self._on_line(text)  # unmasked: the result JSON must parse as the driver printed it
                yield self._mask_cmd(text)

        super()._process_spark_submit_log(tee())
