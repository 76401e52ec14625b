"""A spec's fingerprint: the hash of what decides its output's content, stored in each output commit
so a changed spec rebuilds, and the per-field hashes that let a rebuild name what changed.

It reads any spec model through pydantic alone, so it imports none of the kinds.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel


def _fingerprinted(spec: BaseModel) -> dict[str, Any]:
    """The part of a spec that decides the output's content (see :func:`spec_fingerprint`)."""
    excluded: dict[str, Any] = dict.fromkeys(
        spec.tuning_fields() if hasattr(spec, "tuning_fields") else set(), True
    )
    excluded["adopt_existing_output"] = True
    excluded["refresh_strategy"] = True
    if hasattr(spec, "output"):
        excluded["output"] = {"adopt_existing_output", "owner"}
    return spec.model_dump(mode="json", exclude=excluded)


def spec_fingerprint(spec: BaseModel) -> str:
    """A short stable hash of everything in a spec that changes the output's content.

    Stored in each output commit: a different fingerprint on the next run means a full rebuild.
    Tuning fields a spec lists in ``tuning_fields()`` (a size limit, say) are left out, so changing
    them does not rebuild the output; so are ``adopt_existing_output``, ``refresh_strategy`` (how the same
    output is computed) and the output's ``owner``.
    """
    canonical = json.dumps(_fingerprinted(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def spec_field_hashes(spec: BaseModel) -> dict[str, str]:
    """A short hash of each fingerprinted field, by its path (``how``, ``columns.product_name``): stored
    beside the fingerprint, so a rebuild's reason names what changed without the commit holding any
    expression or value.

    >>> spec_field_hashes(fk_spec)
    {'columns.product_name': '1f2e3d4c', 'foreign_key': '9a8b7c6d', 'how': '5e4f3a2b', ...}
    """
    flat: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
            return
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        flat[path] = hashlib.sha256(text.encode()).hexdigest()[:8]

    walk(_fingerprinted(spec), "")
    return flat
