"""The ``multiway_join`` kind (Yelp Joinery's N-way join): its named inputs with their join keys,
excluded fields and aliases, and its output with ``pkey``. Only this kind uses them, so they live apart.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from .refs import (
    ChangelogFormat,
    OutputRef,
    SourceRef,
    _KindSpec,
    _Strict,
    check_column_name,
    check_distinct_locations,
)

_INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
DEFAULT_MAX_ROWS_PER_JOIN_KEY = 1_000_000


class FieldAlias(_Strict):
    """Joinery's rename of one input field: ``{from: business_id, to: biz_id}``."""

    from_: str = Field(
        alias="from",
        description="The input's field to rename, as the input names it.",
        examples=["business_id"],
    )
    to: str = Field(
        description="Its name in the output (and in `join_keys` matching, and `output.pkey`).",
        examples=["biz_id"],
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("from_", "to")
    @classmethod
    def _names_ok(cls, value: str) -> str:
        return check_column_name(value)


class MultiWayInput(_Strict):
    """One input of a ``multiway_join``: a keyed table (``path``, or catalog ``table``) or a changelog
    source, named for results and progress, with the columns it joins on and how its fields are shown.

    ``join_keys`` match the other inputs' by position. Every field is shown except ``exclude_fields``
    (named before renaming), renamed by ``aliases``; ``key`` is the primary key (one row per key).
    """

    name: str = Field(
        description=(
            "The input's name in results, progress and messages: an identifier (letters, digits, "
            "underscores; at most 64), unique among the inputs."
        ),
        examples=["review"],
    )
    path: str | None = Field(
        default=None,
        description=(
            "Where the input's Delta table lives: an absolute local path or a table-store URL. Give `path` "
            "or `table`, not both."
        ),
        examples=["/warehouse/reviews"],
    )
    table: str | None = Field(
        default=None,
        description="The input's catalog table name (`db.table`), instead of a `path`.",
        examples=["yelp.reviews"],
    )
    key: list[str] = Field(
        min_length=1,
        description=(
            "The input's primary key: the columns that identify a row (one row per key). One column may "
            "be given as a string."
        ),
        examples=[["review_id"]],
    )
    changelog: ChangelogFormat | None = Field(
        default=None,
        description=(
            "Read this input as a log of CDC events and join the table they describe (the latest event per "
            "key). Leave it out for a table with one row per key."
        ),
        examples=[{"op_column": "op", "order_by": ["lsn"]}],
    )
    join_keys: list[str] = Field(
        min_length=1,
        description=(
            "The columns this input joins on, matched by position to every other input's `join_keys` "
            "(each input gives the same number). One column may be given as a string."
        ),
        examples=[["biz_id"]],
    )
    exclude_fields: list[str] = Field(
        default_factory=list,
        description=(
            "Fields of this input left out of the output, named as the input names them (before "
            "`aliases`). Default: none."
        ),
        examples=[["content"]],
    )
    aliases: list[FieldAlias] = Field(
        default_factory=list,
        description="Fields of this input renamed in the output. Default: none.",
        examples=[[{"from": "business_id", "to": "biz_id"}]],
    )

    @field_validator("name")
    @classmethod
    def _input_name_ok(cls, value: str) -> str:
        if not _INPUT_NAME.match(value):
            raise ValueError("must be an identifier (letters, digits, underscores; at most 64) like 'review'")
        return value

    @field_validator(
        "key", "join_keys", "exclude_fields", mode="before", json_schema_input_type=list[str] | str
    )
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("key", "join_keys", "exclude_fields")
    @classmethod
    def _columns_ok(cls, value: list[str]) -> list[str]:
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MultiWayInput:
        sources = [a.from_ for a in self.aliases]
        if len(set(sources)) != len(sources):
            raise ValueError(f"aliases: a field is renamed twice ({sources})")
        excluded_and_renamed = sorted(set(sources) & set(self.exclude_fields))
        if excluded_and_renamed:
            raise ValueError(f"aliases: {excluded_and_renamed} are also in exclude_fields; keep one")
        self.source_ref()  # the table reference's own checks (one location, changelog columns)
        return self

    def source_ref(self) -> SourceRef:
        """The input as the table reference every kind reads."""
        fields: dict[str, Any] = {"key": list(self.key)}
        if self.path is not None:
            fields["path"] = self.path
        if self.table is not None:
            fields["name"] = self.table
        if self.changelog is not None:
            fields["changelog"] = self.changelog
        return SourceRef.model_validate(fields)

    def shown_name(self, column: str) -> str:
        """The output name of one of this input's fields (its alias, or itself)."""
        for alias in self.aliases:
            if alias.from_ == column:
                return alias.to
        return column


class MultiWayOutputRef(OutputRef):
    """A ``multiway_join``'s output, with ``pkey``: the output columns that identify a row (checked on
    every refresh unless the spec says ``enforce_pkey: false``)."""

    pkey: list[str] | None = Field(
        default=None,
        description=(
            "The output columns that should identify a row, checked on every refresh (see "
            "`enforce_pkey`); when unique, the output's key, so each refresh changes at most one row per "
            "pkey value. One column may be given as a string. Optional."
        ),
        examples=[["biz_id", "review_id"]],
    )

    @field_validator("pkey", mode="before", json_schema_input_type=list[str] | str | None)
    @classmethod
    def _pkey_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("pkey")
    @classmethod
    def _pkey_ok(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("give at least one output column, or leave pkey out")
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value


class MultiWayJoinSpec(_KindSpec):
    """Yelp Joinery's N-way un-windowed inner join (``docs/kinds/multiway-join.md``): 2 to 8 keyed
    inputs joined on their ``join_keys`` (by position), 1:1, 1:N or N:M. The output holds the shown fields
    only; it is keyed by ``output.pkey`` when that is unique, else by the columns showing every input's key,
    else it is a multiset of rows (``docs/kinds/multiway-join.md#output-key``).

    Example (a business's reviews, with its owner)::

        {"kind": "multiway_join",
         "inputs": [
             {"name": "review", "path": "/w/reviews", "key": ["review_id"], "join_keys": ["biz_id"],
              "exclude_fields": ["content"]},
             {"name": "business", "path": "/w/business", "key": ["business_id"],
              "join_keys": ["business_id"], "aliases": [{"from": "business_id", "to": "biz_id"}]}],
         "output": {"path": "/w/business_reviews", "pkey": ["review_id"]}}
    """

    kind: Literal["multiway_join"] = Field(
        description="The join kind: an inner join of 2 to 8 keyed tables on shared join keys.",
        examples=["multiway_join"],
    )
    inputs_: list[MultiWayInput] = Field(
        alias="inputs",
        min_length=2,
        max_length=8,
        description=(
            "The 2 to 8 inputs, each a keyed table or changelog, joined on their `join_keys`. Every output "
            "row combines one row of each input."
        ),
        examples=[
            [
                {
                    "name": "review",
                    "path": "/warehouse/reviews",
                    "key": ["review_id"],
                    "join_keys": ["biz_id"],
                },
                {
                    "name": "business",
                    "path": "/warehouse/business",
                    "key": ["business_id"],
                    "join_keys": ["business_id"],
                },
            ]
        ],
    )
    output: MultiWayOutputRef = Field(
        description=(
            "The output Delta table: every input's fields (minus `exclude_fields`, renamed by `aliases`), "
            "kept equal to the join of the inputs."
        ),
        examples=[{"path": "/warehouse/business_reviews", "pkey": ["review_id"]}],
    )
    enforce_pkey: bool = Field(
        default=True,
        description=(
            "Fail a refresh that would give two output rows the same `output.pkey`. `false` counts such "
            "repeats in `rows.pkey_duplicates` with a warning instead. Default `true`. Changing it rebuilds "
            "nothing."
        ),
        examples=[False],
    )
    max_rows_per_join_key: int = Field(
        default=DEFAULT_MAX_ROWS_PER_JOIN_KEY,
        ge=1,
        description=(
            "The N:M guard: a refresh fails before writing when one join key would produce more output rows "
            "than this (the product of its rows in each input). Default 1000000. Changing it rebuilds "
            "nothing."
        ),
        examples=[50000000],
    )
    format: Literal["native", "joinery"] = Field(
        default="native",
        description=(
            "Where the spec came from: `native`, or `joinery` when converted from Joinery's own YAML. Filled "
            "in by the conversion; leave it out."
        ),
        examples=["native"],
    )
    notes: list[str] = Field(
        default_factory=list,
        description=(
            "What converting a Joinery spec noticed (a `pkey` renamed by an alias, say); results repeat "
            "them. Filled in by the conversion; leave it out."
        ),
        examples=[["pkey 'business_id' is renamed by an alias; used as 'biz_id'"]],
    )
    description: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Joinery's descriptive output fields (`namespace`, `source`, `doc`), kept for reference. Filled "
            "in by the conversion; leave it out."
        ),
        examples=[{"namespace": "yelp", "doc": "Reviews with their business"}],
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _consistent(self) -> MultiWayJoinSpec:
        names = [i.name for i in self.inputs_]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"inputs: names {repeated} are used twice; give each input its own name")
        arity = len(self.inputs_[0].join_keys)
        for index, item in enumerate(self.inputs_):
            if len(item.join_keys) != arity:
                raise ValueError(
                    f"inputs[{index}].join_keys: {item.name!r} joins on {len(item.join_keys)} column(s) but "
                    f"{self.inputs_[0].name!r} on {arity}; join keys match by position, so give each input "
                    "the same number"
                )
        refs = self.inputs()
        identities: dict[str, str] = {}
        for name, ref in refs.items():
            if ref.identity in identities:
                raise ValueError(
                    f"inputs: {name!r} and {identities[ref.identity]!r} are the same table ({ref.location}); "
                    "an N-way join of a table with itself is not supported"
                )
            identities[ref.identity] = name
        check_distinct_locations(self.output, dict(refs))
        return self

    def inputs(self) -> dict[str, SourceRef]:
        """The input tables by name, in spec order (the order of the telescoping rule)."""
        return {item.name: item.source_ref() for item in self.inputs_}

    def tuning_fields(self) -> set[str]:
        """Fields that do not change the output's rows (left out of the fingerprint)."""
        return {"enforce_pkey", "max_rows_per_join_key", "format", "notes", "description"}
