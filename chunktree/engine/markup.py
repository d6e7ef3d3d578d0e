"""Link and role markup as a rendered page shows it: ``shown("see :ref:`the pool <pooling>` and
[the guide](guide.md)")`` is ``"see the pool and the guide"``. The extractive reader's answers
and the headings of Markdown and reStructuredText documents read so."""

from __future__ import annotations

import re

# A role of reStructuredText or MyST (":meth:`.Session.delete`", ":ref:`Pooling <pooling>`",
# ":py:class:`~a.b.Engine`", "{func}`attrs.define`"), a reStructuredText link ("`the guide
# <https://...>`_", "`the guide`_"), a Markdown link or image ("[the guide](guide.md)", "[the
# guide][1]", "![a chart](c.png)"); a code span ("`x[1](2)`"), which is left as written; emphasis
# ("_Black_", "**not**"), between marks that no letter, digit or other mark touches before it and
# that a space, a bracket, a quote or the punctuation ending a sentence follows, its words starting
# with a letter, digit, quote or bracket and ending without a space (so "snake_case_name", "2*3*4",
# "*.py and *.txt", "*g*.h" and "-*- mode -*-" are no emphasis), and a Python name such as
# "__init__" is left as written.
_MARKUP = re.compile(r"(?:(?<![\w`:]):(?:[\w+-]+:)?(?P<role>[\w+-]+):|\{(?:[\w+-]+:)?(?P<myst>[\w+-]+)\})"
                     r"`(?P<body>[^`]{1,300})`"
                     r"|`(?P<link>[^`<]{1,300}?)(?:\s*<[^<>`]{0,300}>)?`__?(?!\w)"
                     r"|(?P<code>(?s:``.{1,300}?``)|`[^`]{1,300}`)"
                     r"|!?\[(?P<text>[^\[\]]{0,300})\](?:\(\s*[^()\s]*(?:\s+\"[^\"]*\")?\)|\[[^\[\]\n]*\])"
                     r"|(?<![\w*`\\])(?!__\w+__(?!\w))(?P<mark>\*\*|__|\*|_)(?=[^\W_]|[\"'(\[])"
                     r"(?P<em>[^*_`\n]{1,300}?)(?<=[^\s*_\\])(?P=mark)"
                     r"(?=[\s)\]\"'”’]|[.,;:!?]+(?:[\s)\]\"'”’]|$)|$)")
_TEXT_ROLES = frozenset("ref doc term abbr dfn guilabel menuselection numref".split())


def _shown(m: re.Match[str]) -> str:
    """A role as Sphinx shows it (its title, or its target without a leading "." or "!"; "~"
    keeps the last part of a dotted name; a name of code in backticks, PEP and RFC numbers so), a
    link as its text, emphasis as its words, a code span as it is."""
    if m.group("code") is not None:
        return m.group("code")
    if m.group("em") is not None:
        return m.group("em")
    if m.group("body") is None:
        return m.group("link") if m.group("link") is not None else m.group("text")
    role, body = m.group("role") or m.group("myst"), m.group("body")
    titled = re.fullmatch(r"(.+?)\s*<[^<>]*>", body, re.S)
    text = titled.group(1) if titled else body.lstrip(".!")
    if text.startswith("~"):
        text = text[1:].rsplit(".", 1)[-1]
    if role in ("pep", "rfc"):
        return f"{role.upper()} {text}"
    return text if role in _TEXT_ROLES or titled else f"`{text}`"


def shown(text: str) -> str:
    """``text`` with its link and role markup as a rendered page shows it (``_MARKUP``)."""
    return _MARKUP.sub(_shown, text)
