"""OpenLineage for a refresh: its input and output tables, the Delta versions it consumed and produced, and
column lineage from the spec's ``columns``.

Naming follows OpenLineage's spec: a local table is namespace ``file``, name its path; an object-store
table is namespace ``<scheme>://<bucket>``, name its key, with ``s3a``/``s3n`` folded into ``s3`` (the
names Spark's own OpenLineage integration reports), so a lineage graph joins the two.

    >>> ol_dataset("s3a://lake/tables/orders")
    ('s3://lake', 'tables/orders')
    >>> column_sources("concat(l.first, ' ', r.`last name`)", {"l": "left", "r": "right"})
    [('left', 'first'), ('right', 'last name')]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_fkjoin.engine import location_identity, normalise_location

_OL_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfs": "abfss", "wasb": "wasbs"}
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_REFERENCE = re.compile(r"(?<![\w`.])([A-Za-z_]\w*)\s*\.\s*(`(?:[^`]|``)+`|[A-Za-z_]\w*)")


def ol_dataset(location: str) -> tuple[str, str]:
    """OpenLineage (namespace, name) of a table location.

    >>> ol_dataset("/w/orders"), ol_dataset("gs://b/t")
    (('file', '/w/orders'), ('gs://b', 't'))
    """
    location = normalise_location(location)
    if "://" not in location:
        return "file", location
    scheme, rest = location.split("://", 1)
    bucket, _, key = rest.partition("/")
    return f"{_OL_SCHEMES.get(scheme, scheme)}://{bucket}", key or "/"


def column_sources(expression: str, aliases: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``(input, column)`` pairs a spec expression reads, through the join's aliases (``l``, ``r``...),
    in order of first use; string literals are skipped, so ``'l.x'`` in quotes reads nothing."""
    code = _STRING.sub("''", expression)
    found: list[tuple[str, str]] = []
    for alias, column in _REFERENCE.findall(code):
        if alias in aliases:
            name = column[1:-1].replace("``", "`") if column.startswith("`") else column
            if (aliases[alias], name) not in found:
                found.append((aliases[alias], name))
    return found


def _version_facet(version: Any) -> dict[str, Any]:
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

    return {} if version is None else {"version": DatasetVersionDatasetFacet(datasetVersion=str(version))}


def operator_lineage(
    inputs: Sequence[tuple[str, str]],
    output: str | None,
    *,
    result: Mapping[str, Any] | None = None,
    columns: Mapping[str, str] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> Any:
    """The ``OperatorLineage`` of one refresh (the ``[openlineage]`` extra must be installed).

    :param inputs: ``(input name, location)`` per input table, as the spec names them (``left``...).
    :param output: the output table's location.
    :param result: the refresh's result: each input's ``to_version`` and the output's ``version`` become
        ``DatasetVersionDatasetFacet``s (the Delta versions consumed and produced).
    :param columns: the spec's ``columns`` (output column -> SQL over ``aliases``): column lineage.
    """
    from airflow.providers.common.compat.openlineage.facet import (
        ColumnLineageDatasetFacet,
        Fields,
        InputDataset,
        InputField,
        OutputDataset,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    consumed: dict[str, Any] = {}
    for info in ((result or {}).get("inputs") or {}).values():
        if isinstance(info, Mapping) and info.get("path"):
            try:
                consumed[location_identity(str(info["path"]))] = info.get("to_version")
            except ValueError:
                continue
    datasets = {name: ol_dataset(location) for name, location in inputs}
    input_datasets = [
        InputDataset(
            namespace=datasets[name][0],
            name=datasets[name][1],
            facets=_version_facet(consumed.get(location_identity(location))),
        )
        for name, location in inputs
    ]
    outputs = []
    if output:
        namespace, name = ol_dataset(output)
        facets = _version_facet(((result or {}).get("output") or {}).get("version")) if result else {}
        lineage: dict[str, Any] = {}
        for column, expression in (columns or {}).items():
            fields = [
                InputField(namespace=datasets[source][0], name=datasets[source][1], field=field)
                for source, field in column_sources(str(expression), aliases or {})
                if source in datasets
            ]
            if fields:
                identity = re.fullmatch(r"\s*[A-Za-z_]\w*\s*\.\s*\S+\s*", str(expression)) is not None
                lineage[column] = Fields(
                    inputFields=fields,
                    transformationType="IDENTITY" if identity else "TRANSFORMATION",
                    transformationDescription=str(expression),
                )
        if lineage:
            facets["columnLineage"] = ColumnLineageDatasetFacet(fields=lineage)
        outputs.append(OutputDataset(namespace=namespace, name=name, facets=facets))
    return OperatorLineage(inputs=input_datasets, outputs=outputs)
