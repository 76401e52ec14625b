"""Credentials kept out of logs: which conf keys hold secrets, and masking them in argv and log lines.

Used by the hook for the spark-submit command it logs and by the spark-submit wrapper for every line the
driver prints, so it imports neither of them.

>>> mask_text("--conf spark.hadoop.fs.s3a.secret.key=wJalrXUtnFEMI --conf spark.executor.cores=2")
'--conf spark.hadoop.fs.s3a.secret.key=****** --conf spark.executor.cores=2'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "******"

#: A conf key or environment variable name whose value is a credential. Broad on purpose: showing
#: ``spark.sql.session.timeZone=******`` in a log costs little, leaking ``fs.s3a.session.token`` a lot.
SENSITIVE_KEY = re.compile(
    r"key|token|sas|secret|passw(?:or)?d|credential|private|auth|session|signature|^sig$", re.IGNORECASE
)
# One argv element ``key=value``: the value may hold spaces or newlines (a PEM private key).
_ARGUMENT = re.compile(r"(?P<key>[^\s=]+)=(?P<value>.*)", re.DOTALL)
# ``key=`` inside free text (log lines, JVM options), then its value: quoted, else up to the next space.
_KEY_EQUALS = re.compile(r"(?P<key>[\w.\-]{1,200})=")
_VALUE = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|\S*")
_NOT_SECRETS = frozenset({"true", "false", "none", "null", "yes", "no"})


def is_sensitive_key(key: str) -> bool:
    """Whether the value of conf key (or env var) ``key`` is a credential to keep out of logs.

    >>> is_sensitive_key("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net")
    True
    >>> is_sensitive_key("spark.executor.memory")
    False
    """
    return SENSITIVE_KEY.search(key) is not None


def secret_values(items: Iterable[tuple[str, Any]]) -> list[str]:
    """The values of sensitive keys worth masking verbatim (longest first), from ``(key, value)`` pairs.

    Values shorter than 5 characters, booleans and numbers are left out, as Airflow's masker does: masking
    every ``true`` or ``1`` in a log would hide everything and protect nothing.

    >>> secret_values([("fs.s3a.secret.key", "wJalrXUtnFEMI"), ("spark.authenticate", "true")])
    ['wJalrXUtnFEMI']
    """
    found = {
        text
        for key, value in items
        if is_sensitive_key(str(key))
        and len(text := str(value)) >= 5
        and text.strip().lower() not in _NOT_SECRETS
        and not text.strip().replace(".", "", 1).isdigit()
    }
    return sorted(found, key=lambda text: (-len(text), text))


def mask_text(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with credentials replaced by ``******``: known secret values, and ``key=value`` pairs
    whose key is sensitive (:data:`SENSITIVE_KEY`). The Spark provider's own masking (keys containing
    ``secret`` or ``password``, ``key value`` pairs too) runs on top of this in ``_mask_cmd``.

    >>> mask_text("--conf spark.hadoop.fs.s3a.session.token=IQoJb3JpZ2lu --conf spark.executor.cores=2")
    '--conf spark.hadoop.fs.s3a.session.token=****** --conf spark.executor.cores=2'
    >>> mask_text("INFO conf: spark.app.name=x -Dfs.azure.sas.token='sv=1&sig=2' -Xmx1g")
    "INFO conf: spark.app.name=x -Dfs.azure.sas.token='******' -Xmx1g"

    A text that is a whole ``key=value`` argument with a sensitive key is masked to its end, spaces and
    newlines included (a PEM private key is one argv element of many lines).
    """
    for value in known:
        text = text.replace(value, MASK)
    whole = _ARGUMENT.fullmatch(text)
    if whole is not None and is_sensitive_key(whole.group("key")):
        return f"{whole.group('key')}={MASK}"
    pieces: list[str] = []
    copied = 0
    for match in _KEY_EQUALS.finditer(text):
        if match.start() < copied or not is_sensitive_key(match.group("key")):
            continue
        value = _VALUE.match(text, match.end())
        assert value is not None  # the pattern matches the empty string
        quote = value.group()[0] if value.group()[:1] in {"'", '"'} else ""
        pieces += [text[copied : match.end()], quote, MASK, quote]
        copied = value.end()
    pieces.append(text[copied:])
    return "".join(pieces)
