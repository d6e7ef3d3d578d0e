"""What every result's ``to_dict`` shares: JSON-ready numbers and a chunk's provenance fields.

Each result type (``OrderResult``, ``SelectResult``, ``ReadResult``) turns itself into a
JSON-ready dict in its own ``to_dict``; the CLI prints that dict and the HTTP service returns it,
so both always say the same thing. Parameters and timings are separate fields of every result.
"""

from __future__ import annotations

import math
from typing import Any

from chunktree.engine.chunking import Chunk

PROVENANCE = ("source", "index", "start", "end", "page", "heading")


def json_float(value: Any) -> float | None:
    """A float, with NaN (no value) as None."""
    if value is None:
        return None
    v = float(value)
    return None if math.isnan(v) else v


def chunk_fields(item: Chunk | str | None) -> dict[str, Any]:
    """The provenance and text of one input item: every key always present, None where unknown
    (strings have a text but no provenance; embeddings have neither)."""
    if isinstance(item, Chunk):
        return {**{key: getattr(item, key) for key in PROVENANCE}, "text": item.text}
    return {**dict.fromkeys(PROVENANCE), "text": item}
