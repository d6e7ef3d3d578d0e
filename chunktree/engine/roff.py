"""Man pages (roff source, the ``man`` and ``mdoc`` macros) as plain text with their section headings.

Only what a reader of the page sees is kept: the title, section and subsection headings as lines of
their own, paragraphs as blank-line separated text, font and character escapes resolved. Requests
that only format (indentation, spacing, fonts, registers, conditionals) are dropped. It does not try
to lay out tables (``tbl``) or equations; their text comes through as lines.
"""

from __future__ import annotations

import re

# Character escapes a man page uses for punctuation and symbols: \(xx and \[name].
_CHARS = {"em": "—", "en": "–", "hy": "-", "bu": "•", "co": "©", "rg": "®", "tm": "™", "lq": "“", "rq": "”",
          "oq": "‘", "cq": "’", "aq": "'", "dq": '"', "mi": "-", "pl": "+", "mu": "×", "di": "÷", "<=": "≤",
          ">=": "≥", "!=": "≠", "->": "→", "<-": "←", "de": "°", "ga": "`", "ti": "~", "ha": "^", "rs": "\\",
          "ba": "|", "sl": "/", "lB": "[", "rB": "]", "lC": "{", "rC": "}", "la": "⟨", "ra": "⟩"}
# Every bracketed or quoted name is bounded (NAME, MOTION characters): an unclosed ``\[`` scans no
# further than that, so unescaping is linear in the line whatever it holds.
_ESCAPE = re.compile(r"""\\(?:
      \((?P<two>..)                      # \(em
    | \[(?P<name>[^\]\n]{0,40})\]         # \[em]
    | [fF](?:\[[^\]\n]{0,40}\]|\(..|.)    # fonts: \fB \f(CW \f[B]
    | s[-+]?\d                           # size: \s-1 \s0
    | \*(?:\[(?P<str>[^\]\n]{0,40})\]|\((?P<str2>..)|(?P<str1>.))  # strings: \*(lq \*[R]
    | [kmMnwgYVXZ](?:\[[^\]\n]{0,40}\]|\(..|.)  # registers and the like
    | [hvlLoDbxRSN]'[^'\n]{0,200}'        # motions and drawings
    | (?P<char>.)                        # \- \e \& \  \| \^ \c
)""", re.VERBOSE)
_STRINGS = {"lq": "“", "rq": "”", "R": "®", "Tm": "™", "Aq": "'"}
_ONE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "&": "", "|": "", "^": "", "c": "",
        "'": "´", "`": "`", ".": ".", "%": "", "/": "", ",": "", ":": "", "!": "", "{": "", "}": "", "t": "\t",
        "p": "", "r": "", "u": "", "d": "", "E": "\\"}
_ALTERNATING = {"BI", "IB", "BR", "RB", "IR", "RI"}  # .BR ls (1) reads "ls(1)": no space between
_HEADINGS = {"SH", "Sh", "SS", "Ss"}
_PARAGRAPHS = {"PP", "LP", "P", "Pp", "Lp", "TP", "IP", "HP", "sp", "br", "Bl", "El", "It", "RS", "RE", "nf", "fi",
               "EX", "EE", "Bd", "Ed", "TQ"}
_FONT_MACROS = {"B", "I", "BI", "IB", "BR", "RB", "IR", "RI", "SM", "SB", "UR", "MT", "Nm", "Fl", "Ar", "Cm", "Pa",
                "Ev", "Va", "Dv", "Er", "Fn", "Ft", "Xr", "Em", "Sy", "Li", "Ql", "Dq", "Sq", "Pq", "Op", "Nd", "Ic"}


def looks_like_roff(text: str) -> bool:
    """Whether ``text`` starts like a man page: a ``.TH`` or ``.Dd`` request among its first lines."""
    for line in text.lstrip("\ufeff").splitlines()[:40]:
        if re.match(r"^\.\s*(TH|Dd)\b", line):
            return True
        if line.strip() and not line.startswith((".", "'")):  # text before the title: not a man page
            return False
    return False


def _unescape(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group("two") is not None:
            return _CHARS.get(m.group("two"), "")
        if m.group("name") is not None:
            name = m.group("name")
            code = int(name[1:], 16) if re.fullmatch(r"u[0-9A-Fa-f]{4,6}", name) else -1  # \[u2014]
            return _CHARS.get(name, chr(code) if 0 <= code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "")
        for key in ("str", "str2", "str1"):
            if m.group(key) is not None:
                return _STRINGS.get(m.group(key), "")
        if m.group("char") is not None:
            return _ONE.get(m.group("char"), m.group("char"))
        return ""  # fonts, sizes, registers, motions
    return _ESCAPE.sub(one, text)


def _arguments(rest: str) -> list[str]:
    """A request's arguments: words, with "double quoted" ones kept whole."""
    return [a[1:-1] if a.startswith('"') and a.endswith('"') and len(a) > 1 else a
            for a in re.findall(r'"[^"]*"|\S+', rest)]


def to_text(source: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """The page's text and its headings as (offset, heading) pairs, title first; ``""`` and no headings
    for a page without text besides its headings (one that only links to another, ``.so``)."""
    lines: list[str] = []
    headings: list[tuple[int, str]] = []
    heading_lines: set[int] = set()
    offset = 0

    def emit(line: str, heading: bool = False) -> None:
        nonlocal offset
        if heading:
            if lines and lines[-1] != "":
                emit("")
            headings.append((offset, line))
            heading_lines.add(len(lines))
        lines.append(line)
        offset += len(line) + 1

    for raw in source.lstrip("\ufeff").splitlines():
        if raw.startswith((".\\\"", "'\\\"", '.\\"', "\\\"")) or raw.strip() in (".", "'"):
            continue  # a comment or an empty request
        if raw.startswith((".", "'")):
            m = re.match(r"^[.']\s*(\S+)\s*(.*)$", raw)
            if not m:
                continue
            name, args = m.group(1), _arguments(_unescape(m.group(2)))
            if name in ("TH", "Dt"):  # .TH LS 1 ...: the heading "LS(1)"
                if args:
                    emit(f"{args[0]}({args[1]})" if len(args) > 1 else args[0], heading=True)
            elif name in _HEADINGS:
                if args:
                    emit(" ".join(args), heading=True)
            elif name in _PARAGRAPHS:
                if name == "IP" and args and args[0] not in ("", "\\(bu"):
                    emit("")
                    emit(args[0])
                elif lines and lines[-1] != "":
                    emit("")
            elif name in _FONT_MACROS:
                joiner = "" if name in _ALTERNATING else " "
                if args:
                    emit(joiner.join(args))
            # anything else formats only (.ft .in .ll .ne .de .if .ie .el .ds .nr .so ...): dropped
            continue
        emit(_unescape(raw))
    if all(not line.strip() for i, line in enumerate(lines) if i not in heading_lines):
        return "", ()
    text = "\n".join(lines).strip("\n")
    # strip("\n") removed leading blank lines only when no heading came first; offsets count from 0.
    lead = len("\n".join(lines)) - len("\n".join(lines).lstrip("\n"))
    return text, tuple((o - lead, h) for o, h in headings if o >= lead)
