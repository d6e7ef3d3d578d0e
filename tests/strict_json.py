"""Strict JSON parsing for the tests: ``NaN``, ``Infinity`` and ``-Infinity`` are refused, as a
strict parser (``jq``, a browser's ``JSON.parse``) refuses them."""

import json


def _refuse(constant):
    raise ValueError(f"not strict JSON: {constant}")


def loads(text):
    return json.loads(text, parse_constant=_refuse)
