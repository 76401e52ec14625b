"""Table locations: one spelling per place, so an output can be compared with its inputs.

Pure Python (no Spark, no airflow): the engine's spec checks, its ownership checks and the Airflow
layer all use these functions, so a location refused in one place is refused everywhere.

Two forms:

* :func:`normalise_location` is the path the engine reads and writes: an absolute local path
  (``file:`` URIs become plain paths) or a URL with a known scheme; ``//``, ``.``, ``..`` and a
  trailing ``/`` are collapsed. Relative paths, unknown schemes and credentials in a URL are refused.
* :func:`location_identity` is what two locations are compared by: the normalised location with
  object-store scheme aliases folded together (``s3``/``s3a``/``s3n``, ``abfs``/``abfss``,
  ``wasb``/``wasbs``, ``gs``/``gcs``), so ``s3://b/t`` and ``s3a://b/t/`` are the same table.

    >>> normalise_location("file:///w/./orders/")
    '/w/orders'
    >>> location_identity("s3://bucket/w/orders") == location_identity("s3a://bucket//w/orders/")
    True
    >>> is_within(location_identity("/w/orders/enriched"), location_identity("/w/orders"))
    True
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: URL schemes a Delta table location may use, mapped to the scheme they are compared by.
SCHEME_ALIASES: dict[str, str] = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gs",
    "gcs": "gs",
    "abfs": "abfs",
    "abfss": "abfs",
    "az": "abfs",
    "azure": "abfs",
    "wasb": "wasb",
    "wasbs": "wasb",
    "adl": "adl",
    "hdfs": "hdfs",
    "viewfs": "viewfs",
    "dbfs": "dbfs",
    "oss": "oss",
    "cos": "cos",
}
TABLE_SCHEMES = frozenset({"file", *SCHEME_ALIASES})
_CONTROL = re.compile(r"[`\x00-\x1f\x7f]")
_LOCAL_HOSTS = {"", "localhost"}


def normalise_location(location: str) -> str:
    """The canonical spelling of a table location; ``ValueError`` says what is wrong and how to fix it.

    >>> normalise_location("/w/x/../orders//")
    '/w/orders'
    >>> normalise_location("S3A://bucket/w/orders/")
    's3a://bucket/w/orders'
    """
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"table location must be a non-empty string, got {location!r}")
    if location != location.strip():
        raise ValueError(f"table location {location!r} has leading or trailing spaces")
    if _CONTROL.search(location):
        raise ValueError(f"table location {location!r} contains backticks or control characters")
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", location)
    if match is None:
        if not location.startswith("/"):
            raise ValueError(
                f"table location {location!r} is relative; give an absolute path (/warehouse/orders) or "
                "a URL (s3a://bucket/orders): a relative path would depend on the driver's directory"
            )
        return _clean_path(location, location)
    scheme = match.group(1).lower()
    if scheme == "file":
        parts = urlsplit(location)
        if parts.netloc.lower() not in _LOCAL_HOSTS:
            raise ValueError(
                f"table location {location!r}: a file: URI with host {parts.netloc!r} is not a local path; "
                "use file:///absolute/path or the absolute path itself"
            )
        if not parts.path.startswith("/"):
            raise ValueError(f"table location {location!r}: a file: URI needs an absolute path")
        return _clean_path(parts.path, location)
    if scheme not in SCHEME_ALIASES:
        raise ValueError(
            f"table location {location!r}: scheme {scheme!r} is not a table store; use one of "
            f"{', '.join(sorted(TABLE_SCHEMES))}, or an absolute local path"
        )
    if not location[match.end() :].startswith("//"):
        raise ValueError(f"table location {location!r}: write it as {scheme}://bucket-or-host/path")
    parts = urlsplit(location)
    if "@" in parts.netloc:
        raise ValueError(
            f"table location {scheme}://...: credentials in a URL end up in logs and commit history; "
            "remove them and give them as storage configuration (Spark conf or storage_options)"
        )
    if not parts.netloc:
        raise ValueError(f"table location {location!r}: the URL has no bucket, container or host")
    if parts.query or parts.fragment:
        raise ValueError(f"table location {location!r}: a table location has no query or fragment")
    path = _clean_path(parts.path or "/", location)
    return f"{scheme}://{parts.netloc}{'' if path == '/' else path}"


def _clean_path(path: str, original: str) -> str:
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in {"", "."}:
            continue
        if segment == "..":
            if not segments:
                raise ValueError(f"table location {original!r}: '..' climbs above the root")
            segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments)


def location_identity(location: str) -> str:
    """What locations are compared by: normalised, with scheme aliases folded (``s3a`` -> ``s3``).

    >>> location_identity("file:/w/orders/")
    '/w/orders'
    """
    normal = normalise_location(location)
    if normal.startswith("/"):
        return normal
    scheme, rest = normal.split("://", 1)
    return f"{SCHEME_ALIASES[scheme]}://{rest}"


def is_within(inner: str, outer: str) -> bool:
    """True when identity ``inner`` is ``outer`` or a folder below it (both from :func:`location_identity`).

    >>> is_within("/w/orders", "/w"), is_within("/w/orders2", "/w/orders")
    (True, False)
    """
    if inner == outer:
        return True
    prefix = outer if outer.endswith("/") else outer + "/"
    return inner.startswith(prefix)


def local_path(location: str) -> str | None:
    """The folder of a local location (a plain path or ``file:`` URI), else None.

    >>> local_path("file:///w/orders"), local_path("s3a://b/orders")
    ('/w/orders', None)
    """
    normal = normalise_location(location)
    return normal if normal.startswith("/") else None


def same_place(a: str, b: str) -> bool:
    """Whether two locations name the same folder once normalised (``s3://b/t`` == ``s3a://b/t/``)."""
    return location_identity(a) == location_identity(b)
