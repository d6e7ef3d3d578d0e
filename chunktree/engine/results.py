"""What every result's ``to_dict`` shares: JSON-ready numbers and a chunk's provenance fields.

Each result type (``OrderResult``, ``SelectResult``, ``ReadResult``) turns itself into a
JSON-ready dict in its own ``to_dict``; the CLI prints that dict and the HTTP service returns it,
so both always say the same thing. Parameters and timings are separate fields of every result.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from chunktree.engine.chunking import Chunk

PROVENANCE = ("source", "index", "start", "end", "page", "heading")


def json_float(value: Any) -> float | None:
    """A float, with NaN (no value) as None."""
    if value is None:
        return None
    v = float(value)
    return None if math.isnan(v) else v


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float in it (also NumPy scalars and arrays, inside dicts,
    lists and tuples) as None, and NumPy values as Python ones: what strict JSON can hold."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if isinstance(value, np.ndarray):
        return finite(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _plain(value: Any) -> Any:
    """What the JSON encoder cannot write itself: NumPy values as Python ones, anything else as text."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_plain)


def dumps(value: Any, *, indent: int | None = None) -> str:
    """Strict JSON (RFC 8259): non-finite numbers become null (``finite``), never ``NaN``, which
    strict parsers (``jq``, a browser's ``JSON.parse``) refuse; text is kept as UTF-8. A value
    without a non-finite number (the encoder refuses one) is written as it is, without the copy
    ``finite`` makes."""
    if indent is None:
        try:
            return _STRICT.encode(value)
        except ValueError:
            pass
    return json.dumps(finite(value), ensure_ascii=False, indent=indent, allow_nan=False, default=_plain)


def chunk_fields(item: Chunk | str | None) -> dict[str, Any]:
    """The provenance and text of one input item: every key always present, None where unknown
    (strings have a text but no provenance; embeddings have neither)."""
    if isinstance(item, Chunk):
        return {**{key: getattr(item, key) for key in PROVENANCE}, "text": item.text}
    return {**dict.fromkeys(PROVENANCE), "text": item}
