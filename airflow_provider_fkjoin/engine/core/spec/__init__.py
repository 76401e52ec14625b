"""Specs: a dict, YAML or JSON file turned into typed, validated objects.

Every problem raises :class:`SpecError` naming the field path and what to do, before any data is read.

Example::

    spec = load_spec({
        "kind": "foreign_key_join",
        "left": {"path": "/warehouse/orders", "key": ["order_id"]},
        "right": {"path": "/warehouse/customers", "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": "/warehouse/orders_enriched"},
    })

Where each thing lives (each module imports only the ones listed before it; every name is importable from
here, as it was when this was one module):

- ``.refs``: table references (:class:`TableRef`, :class:`KeyedTableRef`, :class:`OutputRef`,
  :class:`SourceRef` with its :class:`ChangelogFormat`), the checks every kind shares
  (:func:`check_column_name`, :func:`check_projection`, :func:`check_distinct_locations`),
  :data:`RESERVED_PREFIX` and :func:`quote`.
- ``.keyed``: ``foreign_key_join``, ``global_table_bootstrap`` and ``stream_table_join``
  (:class:`ForeignKeyJoinSpec`, :class:`GlobalTableBootstrapSpec`, :class:`StreamTableJoinSpec`), with
  :class:`ForeignKeyExpr`, :func:`check_key_mapping` and :class:`StreamRef`.
- ``.windowed``: ``windowed_join`` in both modes and ``self_join`` (:class:`WindowedJoinSpec`,
  :class:`WindowedTableJoinSpec`, :class:`SelfJoinSpec`), with :func:`parse_duration`,
  :class:`JoinWindow`, :class:`EventStreamRef`, :class:`WindowedTableRef` and :data:`EVENT_TIME`.
- ``.multiway``: ``multiway_join`` (:class:`MultiWayJoinSpec`, :class:`MultiWayInput`,
  :class:`FieldAlias`, :class:`MultiWayOutputRef`).
- ``.loading``: the union of the kinds (:data:`AnySpec`), :data:`KIND_NAMES`, :data:`WRITE_PATHS`,
  :func:`read_spec_file`, :func:`load_spec` and its error messages, :func:`as_self_join` and
  :func:`spec_expressions`.
- ``.fingerprint``: :func:`spec_fingerprint` and :func:`spec_field_hashes`.
- ``.messages``: validation errors in the user's words (:func:`flow_yaml` shows values as YAML does).
- ``.schema``: :func:`spec_json_schema`, the JSON Schema editors validate spec files with, and
  :func:`spec_model_classes`.
"""

from ..errors import SpecError
from .fingerprint import spec_field_hashes, spec_fingerprint
from .keyed import (
    DEFAULT_BROADCAST_LIMIT_BYTES,
    DEFAULT_BROADCAST_WARN_BYTES,
    ForeignKeyExpr,
    ForeignKeyJoinSpec,
    GlobalTableBootstrapSpec,
    KeyMapping,
    StreamRef,
    StreamTableJoinSpec,
    check_key_mapping,
    key_mapping_arity,
)
from .loading import (
    KIND_NAMES,
    WRITE_PATHS,
    AnySpec,
    Spec,
    WindowedJoinModes,
    as_self_join,
    load_spec,
    read_spec_file,
    spec_expressions,
)
from .messages import field_limits, flow_yaml
from .multiway import (
    DEFAULT_MAX_ROWS_PER_JOIN_KEY,
    FieldAlias,
    MultiWayInput,
    MultiWayJoinSpec,
    MultiWayOutputRef,
)
from .refs import (
    RESERVED_PREFIX,
    ChangelogFormat,
    ChangelogOps,
    KeyedTableRef,
    OutputRef,
    SourceRef,
    TableRef,
    check_column_name,
    check_distinct_locations,
    check_projection,
    quote,
)
from .schema import spec_json_schema, spec_json_schema_text, spec_model_classes
from .windowed import (
    EVENT_TIME,
    Duration,
    EventStreamRef,
    JoinWindow,
    SelfJoinSpec,
    TableWindow,
    WindowedJoinSpec,
    WindowedTableJoinSpec,
    WindowedTableRef,
    check_event_projection,
    parse_duration,
)

__all__ = [
    "DEFAULT_BROADCAST_LIMIT_BYTES",
    "DEFAULT_BROADCAST_WARN_BYTES",
    "DEFAULT_MAX_ROWS_PER_JOIN_KEY",
    "EVENT_TIME",
    "KIND_NAMES",
    "RESERVED_PREFIX",
    "WRITE_PATHS",
    "AnySpec",
    "ChangelogFormat",
    "ChangelogOps",
    "Duration",
    "EventStreamRef",
    "FieldAlias",
    "ForeignKeyExpr",
    "ForeignKeyJoinSpec",
    "GlobalTableBootstrapSpec",
    "JoinWindow",
    "KeyMapping",
    "KeyedTableRef",
    "MultiWayInput",
    "MultiWayJoinSpec",
    "MultiWayOutputRef",
    "OutputRef",
    "SelfJoinSpec",
    "SourceRef",
    "Spec",
    "SpecError",
    "StreamRef",
    "StreamTableJoinSpec",
    "TableRef",
    "TableWindow",
    "WindowedJoinModes",
    "WindowedJoinSpec",
    "WindowedTableJoinSpec",
    "WindowedTableRef",
    "as_self_join",
    "check_column_name",
    "check_distinct_locations",
    "check_event_projection",
    "check_key_mapping",
    "check_projection",
    "field_limits",
    "flow_yaml",
    "key_mapping_arity",
    "load_spec",
    "parse_duration",
    "quote",
    "read_spec_file",
    "spec_expressions",
    "spec_field_hashes",
    "spec_fingerprint",
    "spec_json_schema",
    "spec_json_schema_text",
    "spec_model_classes",
]
