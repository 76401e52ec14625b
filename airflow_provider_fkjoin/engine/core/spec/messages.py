"""Spec errors in the user's words: each problem pydantic finds becomes one line naming the field as the
spec writes it (``left.key[0]``, ``inputs[1].aliases[0].from``), the value given, what is accepted and the
field's own description and example, the text the spec reference and the JSON Schema show too. No Python
class name or pydantic phrase reaches the user.

Example, a ``foreign_key_join`` spec with ``how: lft``::

    invalid spec: how: expected one of inner, left, got 'lft'. What happens to a left row whose foreign
    key matches no right row (or is null): inner leaves it out of the output, left keeps it with nulls ...
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

_MISSING: Any = object()
_SHOWN_MAX = 120
_NAMES_A_FIELD = re.compile(r"^[A-Za-z_][\w.\[\]]*: ")


def flow_yaml(value: Any) -> str:
    """A value as a spec author writes it in YAML's flow style: strings quoted, ``true``, ``null``.

    >>> flow_yaml({"path": "/w/orders", "key": ["order_id"], "adopt": True, "owner": None})
    "{path: '/w/orders', key: ['order_id'], adopt: true, owner: null}"
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)}: {flow_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow_yaml(item) for item in value) + "]"
    return str(value)


def _key(key: Any) -> str:
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][\w]*", key) else flow_yaml(key)


def _shown(value: Any) -> str:
    text = flow_yaml(value)
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _branches(annotation: Any) -> list[Any]:
    """The forms a type accepts, ``None`` left out (an optional field is simply left out)."""
    return [arg for arg in _union_args(annotation) if arg is not type(None)]


def _plural(annotation: Any) -> str:
    if annotation is str:
        return "names"
    if _is_model(annotation):
        return "mappings"
    return f"{_expected(annotation)} items"


def _expected(annotation: Any) -> str:
    """What a type accepts, in a spec author's words.

    >>> _expected(list[str]), _expected(typing.Literal["inner", "left"])
    ('a list of names', 'one of inner, left')
    """
    phrases = []
    for arg in _branches(annotation):
        origin = typing.get_origin(arg)
        if origin is typing.Literal:
            phrases.append("one of " + ", ".join(str(v) for v in typing.get_args(arg)))
        elif _is_model(arg):
            names = [f.alias or n for n, f in arg.model_fields.items() if f.is_required()]
            phrases.append("a mapping" + (f" with {' and '.join(names)}" if names else ""))
        elif origin is list:
            phrases.append(f"a list of {_plural(typing.get_args(arg)[0])}")
        elif origin is dict:
            phrases.append("a mapping of names to text")
        elif arg is bool:
            phrases.append("true or false")
        elif arg is int:
            phrases.append("a whole number")
        elif arg is str:
            phrases.append("text")
        else:
            phrases.append("a value of another form")
    return " or ".join(phrases)


def field_limits(info: FieldInfo | None) -> list[str]:
    """A field's bounds from its metadata, as the reference and the messages say them.

    >>> from pydantic import Field
    >>> field_limits(Field(min_length=2, max_length=8)), field_limits(Field(ge=0))
    (['at least 2 items', 'at most 8 items'], ['at least 0'])
    """
    if info is None:
        return []
    found = []
    for item in info.metadata:
        kind = type(item).__name__
        if kind == "MinLen":
            found.append(f"at least {item.min_length} item{'s' if item.min_length != 1 else ''}")
        elif kind == "MaxLen":
            found.append(f"at most {item.max_length} item{'s' if item.max_length != 1 else ''}")
        elif kind == "Ge":
            found.append(f"at least {item.ge}")
        elif kind == "Gt":
            found.append(f"more than {item.gt}")
    return found


def field_help(info: FieldInfo | None, *, literal: bool = False) -> str:
    """A field's description and example as one sentence or two, the text the reference shows."""
    if info is None or not info.description:
        return ""
    text = info.description.replace("`", "")
    examples = [] if literal else list(info.examples or [])
    if examples:
        text += (" Example: " if len(examples) == 1 else " Examples: ") + ", ".join(
            flow_yaml(example) for example in examples
        )
    return text


@dataclass(frozen=True)
class _UnionPass:
    """A place where the loc went through one branch of a union (``foreign_key``: ``list[str]``)."""

    path: str
    branch: Any
    value: Any
    info: FieldInfo | None
    annotation: Any


@dataclass(frozen=True)
class _Located:
    """One pydantic error, resolved against the models and the data the user gave."""

    item: Mapping[str, Any]
    path: str
    value: Any
    info: FieldInfo | None
    annotation: Any
    at_field: bool
    parent: type[BaseModel] | None
    unions: tuple[_UnionPass, ...] = field(default=())


def _branch_named(annotation: Any, tag: str) -> Any:
    for arg in _branches(annotation):
        name = arg.__name__ if _is_model(arg) else str(arg).replace("typing.", "")
        if name == tag or getattr(arg, "__name__", None) == tag:
            return arg
    return _MISSING


def _step_into(value: Any, key: Any) -> Any:
    if isinstance(value, Mapping) and not isinstance(key, int):
        return value.get(key, _MISSING)
    if isinstance(value, list) and isinstance(key, int) and -len(value) <= key < len(value):
        return value[key]
    return _MISSING


def _locate(item: Mapping[str, Any], data: Any, kinds: Mapping[str, Any]) -> _Located:
    """Walk an error's loc through the kind's model and the data: the path as written, the value there,
    the field it names and the unions passed on the way (their branch names are not part of the path)."""
    loc = list(item["loc"])
    current: Any = kinds
    value, path = data, ""
    info: FieldInfo | None = None
    at_field = False
    parent: type[BaseModel] | None = None
    unions: list[_UnionPass] = []
    for part in loc:
        if isinstance(current, Mapping):  # the kind's (and the windowed kind's mode's) tag
            current = current.get(part, _MISSING)
            continue
        arguments = _branches(current)
        if len(arguments) > 1 and isinstance(part, str) and _branch_named(current, part) is not _MISSING:
            branch = _branch_named(current, part)
            unions.append(_UnionPass(path, branch, value, info, current))
            current, at_field = branch, False
            continue
        current = arguments[0] if len(arguments) == 1 else current
        if _is_model(current):
            model: type[BaseModel] = current
            parent = model
            found = next(
                (f for n, f in model.model_fields.items() if part in (n, f.alias)),
                None,
            )
            path += ("." if path else "") + str(part)
            value = _step_into(value, part)
            info, current, at_field = found, (found.annotation if found else _MISSING), found is not None
            continue
        origin = typing.get_origin(current)
        if origin is list and isinstance(part, int):
            path += f"[{part}]"
            value = _step_into(value, part)
            current, at_field = typing.get_args(current)[0], False
            continue
        if origin is dict:
            path += f".{part}"
            value = _step_into(value, part)
            current, at_field = typing.get_args(current)[1], False
            continue
        path += f"[{part}]" if isinstance(part, int) else ("." if path else "") + str(part)
        value = _step_into(value, part)
        current, at_field = _MISSING, False
    return _Located(item, path or "spec", value, info, current, at_field, parent, tuple(unions))


def _fits(branch: Any, value: Any) -> bool:
    """Whether a value has a union branch's shape: a mapping for an object, a list for a list, text."""
    if _is_model(branch) or typing.get_origin(branch) is dict:
        return isinstance(value, Mapping)
    if typing.get_origin(branch) is list:
        return isinstance(value, list)
    if branch is str:
        return isinstance(value, str)
    return False


def _through_unions(errors: list[_Located]) -> list[str | _Located]:
    """Errors inside a union (``foreign_key``: a list, or ``{expr: ...}``) reported once: the branch the
    value's shape chose, or when no form fits, one line with every accepted form."""
    out: list[str | _Located] = []
    groups: dict[str, list[_Located]] = {}
    for error in errors:
        if error.unions:
            groups.setdefault(error.unions[0].path, []).append(error)
        else:
            out.append(error)
    for group in groups.values():
        union = group[0].unions[0]
        chosen = [e for e in group if _fits(e.unions[0].branch, union.value)]
        if chosen and len({id(e.unions[0].branch) for e in chosen}) == 1:
            out.extend(_through_unions([replace(e, unions=e.unions[1:]) for e in chosen]))
            continue
        line = f"{union.path or 'spec'}: expected {_expected(union.annotation)}, got {_shown(union.value)}."
        helped = field_help(union.info)
        out.append(f"{line} {helped}" if helped else line)
    return out


def _phrase(error: _Located, kind_names: tuple[str, ...]) -> tuple[str, str]:
    """The path and the problem of one located error."""
    item, path = error.item, error.path
    kind = item["type"]
    given = item.get("input")
    literal = typing.get_origin(error.annotation) is typing.Literal
    discriminator = str((item.get("ctx") or {}).get("discriminator", ""))
    if kind == "union_tag_invalid" and "mode" in discriminator:
        mode = given.get("mode") if isinstance(given, Mapping) else None
        return "mode", f"expected one of stream, table, got {_shown(mode)}"
    if kind == "union_tag_not_found" and "mode" in discriminator:
        return "mode", "is required: stream (two event tables) or table (two keyed tables)"
    if kind == "union_tag_invalid":
        got = given.get("kind") if isinstance(given, Mapping) else None
        return "kind", f"unknown kind {_shown(got)}; expected one of {', '.join(kind_names)}"
    if kind == "union_tag_not_found":
        return "kind", f"is required; one of {', '.join(kind_names)}"
    if kind == "missing":
        helped = field_help(error.info, literal=literal)
        return path, "is required" + (f". {helped}" if helped else "")
    if kind == "extra_forbidden":
        known = [f.alias or n for n, f in error.parent.model_fields.items()] if error.parent else []
        name = path.rsplit(".", 1)[-1]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return path, f"is not a known field here (check the spelling); {hint}known fields: {', '.join(known)}"
    if kind in ("value_error", "assertion_error"):
        text = str(item["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        shown = _shown(error.value)
        if (
            not all(_is_model(arg) for arg in _branches(error.annotation))
            and error.value is not _MISSING
            and shown not in text
            and repr(error.value) not in text
        ):
            text += f" (got {shown})"
        return path, text
    expected = _expected(error.annotation) if error.annotation is not _MISSING else "another form"
    limits = ", ".join(field_limits(error.info)) if error.at_field else ""
    if limits:
        expected += f" ({limits})"
    line = f"expected {expected}, got {_shown(given)}."
    helped = field_help(error.info, literal=literal)
    return path, f"{line} {helped}" if helped else line


def describe_errors(
    error: ValidationError,
    data: Any,
    kinds: Mapping[str, Any],
    kind_names: tuple[str, ...],
) -> str:
    """Every problem of a failed validation on one line: ``invalid spec: <path>: <problem>``, or with more
    than one, ``invalid spec, 2 problems: (1) <path>: <problem> (2) ...``.

    ``kinds`` maps each kind's name to its model, or for a kind with modes to a mapping of mode to model
    (the tags pydantic puts first in an error's loc); ``data`` is what was validated.
    """
    located = [_locate(item, data, kinds) for item in error.errors()]
    lines: list[str] = []
    for entry in _through_unions(located):
        if isinstance(entry, str):
            line = entry
        else:
            path, problem = _phrase(entry, kind_names)
            line = problem if path == "spec" and _NAMES_A_FIELD.match(problem) else f"{path}: {problem}"
        if line not in lines:
            lines.append(line)
    if len(lines) == 1:
        return f"invalid spec: {lines[0]}"
    return f"invalid spec, {len(lines)} problems: " + "; ".join(
        f"({number}) {line}" for number, line in enumerate(lines, start=1)
    )
