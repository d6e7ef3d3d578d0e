"""Man pages (roff source, the ``man`` and ``mdoc`` macros) as plain text with their section headings.

Only what a reader of the page sees is kept: the title, section and subsection headings as lines of
their own, paragraphs as blank-line separated text, font and character escapes resolved. Requests
that only format (indentation, spacing, fonts, registers, conditionals) are dropped. It does not try
to lay out tables (``tbl``) or equations; their text comes through as lines.

``mdoc`` (the BSD macros: OpenSSH's pages, most of a BSD or macOS system's) is rendered as ``mandoc``
renders it to text: ``.Fl L Ar port`` reads ``-L port``, ``.Op`` puts its part in brackets, ``.Xr
ssh 1`` reads ``ssh(1)``, ``.Nm`` alone repeats the page's name, list items keep their head and
their bullet or number, and ``.Xo`` / ``.Sm off`` join their lines the way the page lays them out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

# groff's special characters (\(xx and \[xx]), as `groff -Tutf8` renders each (groff_char(7)): pairs of
# name and glyph. The hyphen and the minus are ASCII "-", so that an option reads as it is typed.
_CHARS = dict(zip(*[iter(r"""
12 ½ 14 ¼ 18 ⅛ 34 ¾ 38 ⅜ 3d ∴ 58 ⅝ 78 ⅞ aa ´ ab ˘ ac ¸ ad ¨ ae æ ah ˇ an ⎯ ao ˚ ap ∼ aq ' at @ a" ˝
a- ¯ a. ˙ a^ ^ a~ ~ ba | bb ¦ bq ‚ br │ bu • bv ⎪ ca ∩ ci ○ co © cq ’ ct ¢ cu ∪ c* ⊗ c+ ⊕ da ↓ dd ‡
de ° dg † di ÷ dq " dA ⇓ em — en – eq = es ∅ eu € fa ∀ fc › ff ff fi fi fl fl fm ′ fo ‹ f/ ⁄ ga `
gr ∇ ha ^ ho ˛ hy - hA ⇔ ib ⊆ if ∞ ij ĳ ip ⊇ is ∫ la ⟨ lb ⎩ lc ⌈ lf ⌊ lh ☜ lk ⎨ lq “ lt ⎧ lz ◊ lA ⇐
lB [ lC { mc µ md ⋅ mi - mo ∈ mu × nb ⊄ nc ⊅ ne ≢ nm ∉ no ¬ oa å oe œ oq ‘ or | oA Å pc · pd ∂ pl +
pp ⊥ ps ¶ pt ∝ ra ⟩ rb ⎭ rc ⌉ rf ⌋ rg ® rh ☞ rk ⎬ rn ‾ rq ” rs \ rt ⎫ ru _ rA ⇒ rB ] rC } r! ¡ r? ¿
sb ⊂ sc § sd ″ sh # sl / sp ⊃ sq □ sr √ ss ß st ∋ te ∃ tf ∴ ti ~ tm ™ ts ς ua ↑ ul _ uA ⇑ va ↕ vs š
vz ž vA ⇕ vS Š vZ Ž wp ℘ Ah ℵ AE Æ AN ∧ Bq „ Cs ¤ CL ♣ CR ↵ Do $ DI ♦ Eu € Fc » Fi ffi Fl ffl Fn ƒ
Fo « HE ♥ Im ℑ IJ Ĳ Of ª Om º OE Œ OK ✓ OR ∨ Po £ Re ℜ S1 ¹ S2 ² S3 ³ Sd ð SP ♠ Tp þ TP Þ Ye ¥ != ≠
%0 ‰ 'a á 'c ć 'e é 'i í 'o ó 'u ú 'y ý 'A Á 'C Ć 'E É 'I Í 'O Ó 'U Ú 'Y Ý *a α *b β *c ξ *d δ *e ε
*f ϕ *g γ *h θ *i ι *k κ *l λ *m μ *n ν *o ο *p π *q ψ *r ρ *s σ *t τ *u υ *w ω *x χ *y η *z ζ *A Α
*B Β *C Ξ *D Δ *E Ε *F Φ *G Γ *H Θ *I Ι *K Κ *L Λ *M Μ *N Ν *O Ο *P Π *Q Ψ *R Ρ *S Σ *T Τ *U Υ *W Ω
*X Χ *Y Η *Z Ζ ** ∗ +e ϵ +f φ +h ϑ +p ϖ +- ± ,c ç ,C Ç -h ℏ -D Ð -+ ∓ -> → .i ı .j ȷ /l ł /o ø /L Ł
/O Ø /_ ∠ :a ä :e ë :i ï :o ö :u ü :y ÿ :A Ä :E Ë :I Ï :O Ö :U Ü :Y Ÿ <- ← << ≪ <= ≤ <> ↔ == ≡ =~ ≅
>= ≥ >> ≫ ^a â ^e ê ^i î ^o ô ^u û ^A Â ^E Ê ^I Î ^O Ô ^U Û `a à `e è `i ì `o ò `u ù `A À `E È `I Ì
`O Ò `U Ù |= ≃ ~a ã ~n ñ ~o õ ~A Ã ~N Ñ ~O Õ ~= ≈ ~~ ≈
""".split())] * 2))
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
_STRINGS = {"lq": "“", "rq": "”", "R": "®", "Tm": "™", "Aq": "'", "Ge": "≥", "Le": "≤", "Gt": ">", "Lt": "<",
            "Ne": "≠", "Pm": "±", "If": "∞", "Ba": "|", "q": '"', "Am": "&", "Na": "NaN", "Pi": "π"}
_ONE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", "&": "", "|": "", "^": "", "c": "",
        "'": "´", "`": "`", ".": ".", "%": "", "/": "", ",": "", ":": "", "!": "", "{": "", "}": "", "t": "\t",
        "p": "", "r": "", "u": "", "d": "", "E": "\\"}
_ALTERNATING = {"BI", "IB", "BR", "RB", "IR", "RI"}  # .BR ls (1) reads "ls(1)": no space between
_HEADINGS = {"SH", "SS"}
# .RS and .RE only indent: an option's tag and the description indented under it read as one
# paragraph, as man shows them.
_PARAGRAPHS = {"PP", "LP", "P", "TP", "IP", "HP", "sp", "br", "nf", "fi", "EX", "EE", "TQ"}
_FONT_MACROS = {"B", "I", "BI", "IB", "BR", "RB", "IR", "RI", "SM", "SB", "UR", "MT"}


def looks_like_roff(text: str) -> bool:
    """Whether ``text`` starts like a man page: a ``.TH`` or ``.Dd`` request among its first 200
    lines, with nothing but requests, comments and macro definitions before it."""
    for name, _ in itertools.islice(_requests(text[:1 << 16]), 200):
        if name in ("TH", "Dd"):
            return True
        if name is None:  # text before the title: not a man page
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


class _Page:
    """The text being written: its lines, and its headings as (offset, heading) pairs."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.headings: list[tuple[int, str]] = []
        self.heading_lines: set[int] = set()
        self.offset = 0

    def emit(self, line: str, heading: bool = False) -> None:
        """Write a line; a heading stands apart, a blank line above and below it."""
        if heading:
            self.paragraph()
            self.headings.append((self.offset, line))
            self.heading_lines.add(len(self.lines))
        self.lines.append(line)
        self.offset += len(line) + 1
        if heading:
            self.paragraph()

    def paragraph(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.emit("")

    def result(self) -> tuple[str, tuple[tuple[int, str], ...]]:
        if all(not line.strip() for i, line in enumerate(self.lines) if i not in self.heading_lines):
            return "", ()
        joined = "\n".join(self.lines)
        text = joined.strip("\n")
        # strip("\n") removed leading blank lines only when no heading came first; offsets count from 0.
        lead = len(joined) - len(joined.lstrip("\n"))
        return text, tuple((o - lead, h) for o, h in self.headings if o >= lead)


def _joined(lines: list[str]) -> Iterator[str]:
    """The lines with roff's escaped newlines joined: a line ending in a lone backslash goes on."""
    held: list[str] = []
    for line in lines:
        if len(line) - len(line.rstrip("\\")) & 1:
            held.append(line[:-1])
            continue
        yield "".join(held) + line
        held = []
    if held:
        yield "".join(held)


# Requests that open a block ending at a line ".." (or ".NAME" for ``.ig NAME``): a macro's
# definition, or text to ignore; what the block holds is not text of the page.
_BLOCKS = ("de", "de1", "dei", "am", "am1", "ami", "ig")


def _requests(source: str) -> Iterator[tuple[str | None, str]]:
    """Each line that is not a comment: (request name, the rest of the line) for a request, (None,
    the line) for text. A macro definition (``.de NAME`` ... ``..``) is one request, ``("de",
    NAME)``, without its body; an ignored block (``.ig``) is left out."""
    lines = _joined(source.lstrip("\ufeff").splitlines())
    for raw in lines:
        if raw.startswith((".\\\"", "'\\\"", '.\\"', "\\\"")) or raw.strip() in (".", "'"):
            continue  # a comment or an empty request
        if raw.startswith((".", "'")):
            m = re.match(r"^[.']\s*(\S+)\s*(.*)$", raw)
            if not m:
                continue
            name, rest = m.group(1), m.group(2)
            if name in _BLOCKS:
                args = rest.split()
                stop = (args[0] if args else ".") if name == "ig" else args[1] if len(args) > 1 else "."
                # the end request; spaces may follow its control character (".  ." ends a block as
                # ".." does: Asciidoctor's pages write it so inside a conditional)
                end = re.compile(r"[.']\s*" + re.escape(stop) + r"(?:\s|$)")
                for body in lines:  # skip to the block's end
                    if end.match(body):
                        break
                if name != "ig" and args:
                    yield "de", args[0]
                continue
            yield name, rest
            continue
        yield None, raw


def to_text(source: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """The page's text and its headings as (offset, heading) pairs, title first; ``""`` and no headings
    for a page without text besides its headings (one that only links to another, ``.so``)."""
    page = _Page()
    if _is_mdoc(source):
        _Mdoc(page).render(source)
    else:
        _man(source, page)
    return page.result()


def _man(source: str, page: _Page) -> None:
    """A page written with the ``man`` macros (``.TH``, ``.SH``, ``.B``...). A bulleted or numbered
    ``.IP`` item starts its first line with the bullet or number, so that a sentence introducing a
    list is followed by its items."""
    prefix = ""
    defined: set[str] = set()  # the page's own macros: their arguments are read as text

    def text(line: str) -> None:
        nonlocal prefix
        if prefix and line.strip():
            line, prefix = prefix + line.lstrip(), ""
        page.emit(line)

    for name, rest in _requests(source):
        if name is None:
            text(_unescape(rest))
            continue
        args = _arguments(_unescape(rest))
        if name == "TH":  # .TH LS 1 ...: the heading "LS(1)"
            if args:
                page.emit(f"{args[0]}({args[1]})" if len(args) > 1 else args[0], heading=True)
        elif name in _HEADINGS:
            if args:
                page.emit(" ".join(args), heading=True)
        elif name in _PARAGRAPHS:
            page.paragraph()
            prefix = ""
            if name == "IP" and args and args[0]:
                if args[0] in ("•", "-", "*", "o", "·"):
                    prefix = "• "
                elif re.fullmatch(r"\(?\d{1,3}[.)]|[a-z][.)]", args[0]):
                    prefix = args[0] + " "
                else:  # a tag, such as an option: a line of its own
                    page.emit(args[0])
        elif name == "de":
            defined.add(rest)
        elif name == "als" and args:  # .als MTO URL: another name for a macro
            defined.add(args[0])
        elif name in _FONT_MACROS or name in defined:
            joiner = "" if name in _ALTERNATING else " "
            if args:
                text(joiner.join(args))
        # anything else formats only (.ft .in .ll .ne .if .ie .el .ds .nr .so ...): dropped


def _is_mdoc(source: str) -> bool:
    """Whether the page's title request is mdoc's ``.Dd`` / ``.Dt`` rather than man's ``.TH``."""
    for name, _ in _requests(source[:20000]):
        if name in ("Dd", "Dt"):
            return True
        if name == "TH":
            return False
    return False


# -- mdoc -------------------------------------------------------------------------------------------

# Macros that may be called from another macro's line (mdoc(7) "callable"), and so are read as
# macros, not words, wherever they stand on a macro line.
_CALLABLE = frozenset("""Ac Ad An Ao Ap Aq Ar At Bc Bo Bq Brc Bro Brq Bsx Bx Cm Dc Do Dq Dv Dx Ec Em En Eo Er Ev
    Fa Fc Fl Fn Fo Fx Ic In Li Lk Ms Mt Nm No Ns Nx Oc Oo Op Ot Ox Pa Pc Pf Po Pq Qc Ql Qo Qq Sc So Sq St Sx Sy Ta
    Tn Ux Va Vt Xc Xo Xr""".split())
# Enclosures of the rest of the line, and the macros that open and close one across lines.
_ENCLOSE = {"Op": ("[", "]"), "Bq": ("[", "]"), "Brq": ("{", "}"), "Pq": ("(", ")"), "Dq": ("“", "”"),
            "Sq": ("‘", "’"), "Ql": ("‘", "’"), "Qq": ('"', '"'), "Aq": ("<", ">")}
_OPEN = {"Oo": "[", "Bo": "[", "Bro": "{", "Po": "(", "Do": "“", "So": "‘", "Qo": '"', "Ao": "<"}
_CLOSE = {"Oc": "]", "Bc": "]", "Brc": "}", "Pc": ")", "Dc": "”", "Sc": "’", "Qc": '"', "Ac": ">"}
_CLOSING = frozenset(".,:;)]?!")  # delimiters written without a space before them
_OPENING = frozenset("([")  # and without one after them
_SYSTEMS = {"At": "AT&T UNIX", "Bsx": "BSD/OS", "Bx": "BSD", "Dx": "DragonFly", "Fx": "FreeBSD", "Nx": "NetBSD",
            "Ox": "OpenBSD", "Ux": "UNIX"}
_STANDARDS = {"-p1003.1": "IEEE Std 1003.1 (“POSIX.1”)", "-p1003.1-2008": "IEEE Std 1003.1-2008 (“POSIX.1”)",
              "-p1003.2": "IEEE Std 1003.2 (“POSIX.2”)", "-xpg4": "X/Open Portability Guide Issue 4 (“XPG4”)",
              "-susv2": "Version 2 of the Single UNIX Specification (“SUSv2”)",
              "-susv3": "Version 3 of the Single UNIX Specification (“SUSv3”)",
              "-susv4": "Version 4 of the Single UNIX Specification (“SUSv4”)", "-ansiC": "ANSI X3.159-1989 (“ANSI C89”)",
              "-isoC": "ISO/IEC 9899:1990 (“ISO C90”)", "-isoC-99": "ISO/IEC 9899:1999 (“ISO C99”)"}
_TAGGED = frozenset({"-tag", "-hang", "-ohang", "-inset", "-diag"})  # lists whose items have a head line


class _Words:
    """One output line built from words: a space between words, except before a closing
    delimiter, after an opening one, after ``Ns``, and anywhere under ``.Sm off``."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.glue = True  # no space before the next word

    def add(self, word: str, spacing: bool = True) -> None:
        if not word:
            return
        if self.parts and not self.glue and spacing and word not in _CLOSING:
            self.parts.append(" ")
        self.parts.append(word)
        self.glue = word in _OPENING

    def text(self) -> str:
        return "".join(self.parts)


class _Mdoc:
    """A page written with the mdoc macros, rendered into ``page``."""

    def __init__(self, page: _Page) -> None:
        self.page = page
        self.name = ""  # the page's name, which ``.Nm`` alone repeats
        self.spacing = True  # ``.Sm on`` / ``.Sm off``
        self.space_once = False  # the first word after ``.Sm off`` keeps its space
        self.literal = False  # inside ``.Bd -literal`` / ``-unfilled``
        self.lists: list[list[Any]] = []  # open lists: [type, items so far]
        self.joined: _Words | None = None  # an open ``.Xo`` ... ``.Xc`` line
        self.joined_head = False  # and whether it is a list item's head
        self.prefix = ""  # a bullet or number for the item's first line
        self.after_head = False  # the last line written was a list item's head

    def render(self, source: str) -> None:
        for name, rest in _requests(source):
            if name is None:
                self.text(rest)
            else:
                self.request(name, rest)
        if self.joined is not None:
            self.write(self.joined.text(), self.joined_head)

    def write(self, line: str, head: bool = False) -> None:
        if not line.strip():
            return
        if self.prefix:
            line, self.prefix = self.prefix + line, ""
        self.page.emit(line)
        self.after_head = head

    def paragraph(self) -> None:
        self.page.paragraph()
        self.after_head = False

    def space(self) -> bool:
        """Whether the next word is spaced from the one before."""
        once, self.space_once = self.space_once, False
        return self.spacing or once

    def text(self, raw: str) -> None:
        if self.joined is not None:
            for word in raw.split():
                self.joined.add(_unescape(word), self.space())
        else:
            self.write(_unescape(raw) if self.literal else _unescape(raw).strip())

    def request(self, name: str, rest: str) -> None:
        tokens = _tokens(rest)
        if name in ("Sh", "Ss"):
            self.joined = None
            self.page.emit(self.words(tokens).text(), heading=True)
            self.after_head = False
        elif name == "Dt":
            args = [t for t, _ in tokens]
            if args:
                self.page.emit(f"{args[0]}({args[1]})" if len(args) > 1 else args[0], heading=True)
        elif name in ("Pp", "Lp"):
            self.paragraph()
        elif name == "Bl":
            kind = next((t for t, _ in tokens if t.startswith("-") and t not in ("-compact", "-offset", "-width")),
                        "-item")
            self.lists.append([kind, 0])
            self.paragraph()
        elif name == "El":
            if self.lists:
                self.lists.pop()
            self.paragraph()
        elif name == "It":
            self.item(tokens)
        elif name == "Bd":
            self.literal = any(t in ("-literal", "-unfilled") for t, _ in tokens)
            self.paragraph()
        elif name == "Ed":
            self.literal = False
            self.paragraph()
        elif name == "Sm":
            self.spacing = tokens[0][0] != "off" if tokens else not self.spacing
            self.space_once = not self.spacing
        elif name == "Nd":
            line = self.words(tokens).text()
            if self.page.lines and self.page.lines[-1]:  # NAME: "ssh — OpenSSH remote login client"
                self.page.lines[-1] += " — " + line
                self.page.offset += len(line) + 3
            else:
                self.write(line)
        elif name in ("D1", "Dl"):
            self.write(self.words(tokens).text())
        elif name.startswith("%"):  # a reference's author, title, date...
            self.line(tokens)
        elif name in ("Ex", "Rv"):
            words = _Words()
            self.call(name, tokens, 0, words)
            self.write(words.text())
        elif name in _CALLABLE:
            self.line([(name, False), *tokens])
        # anything else formats only (.Dd .Os .Bk .Ek .Bf .Ef .Rs .Re .Pf .ds .nr .if ...): dropped

    def item(self, tokens: list[tuple[str, bool]]) -> None:
        kind, n = self.lists[-1] if self.lists else ("-tag", 0)
        if self.lists:
            self.lists[-1][1] += 1
        if not self.after_head:
            self.paragraph()
        if kind in _TAGGED or kind == "-column":
            self.line(tokens, head=True)
        else:
            self.prefix = {"-bullet": "• ", "-dash": "- ", "-hyphen": "- ", "-enum": f"{n + 1}. "}.get(kind, "")

    def line(self, tokens: list[tuple[str, bool]], head: bool = False) -> None:
        """A macro line: its words, written now, or kept open until ``.Xc`` when it opens ``.Xo``."""
        words = self.joined if self.joined is not None else _Words()
        self.words(tokens, words)
        if any(t == "Xo" and not literal for t, literal in tokens):
            self.joined, self.joined_head = words, head
            return
        if self.joined is not None and not any(t == "Xc" and not literal for t, literal in tokens):
            return
        if self.joined is not None:
            head = self.joined_head
        self.joined = None
        self.write(words.text(), head)

    def words(self, tokens: list[tuple[str, bool]], out: _Words | None = None) -> _Words:
        """The words of a macro line's ``tokens``: words as they are, macros as they render."""
        out = out if out is not None else _Words()
        i = 0
        while i < len(tokens):
            token, literal = tokens[i]
            if literal or token not in _CALLABLE:
                out.add(_unescape(token), self.space())
                i += 1
            else:
                i = self.call(token, tokens, i + 1, out)
        return out

    def call(self, name: str, tokens: list[tuple[str, bool]], i: int, out: _Words) -> int:
        """Render the macro ``name`` whose arguments start at ``tokens[i]``; the index after them."""
        end = i
        while end < len(tokens) and (tokens[end][1] or tokens[end][0] not in _CALLABLE):
            end += 1
        args = [_unescape(t) for t, _ in tokens[i:end]]
        words = [a for a in args if a not in _CLOSING and a not in _OPENING and a != "|"]

        def add(word: str) -> None:
            out.add(word, self.space())

        if name in _ENCLOSE:
            opening, closing = _ENCLOSE[name]
            last = len(tokens)
            while last > i and not tokens[last - 1][1] and tokens[last - 1][0] in _CLOSING:
                last -= 1  # trailing punctuation goes after the enclosure
            add(opening)
            out.glue = True
            self.words(tokens[i:last], out)
            out.glue = True
            add(closing)
            for t, _ in tokens[last:]:
                add(t)
            return len(tokens)
        if name in _OPEN:
            add(_OPEN[name])
            out.glue = True
        elif name in _CLOSE:
            out.glue = True
            add(_CLOSE[name])
        elif name == "Ns":
            out.glue = True
        elif name == "Ap":
            out.glue = True
            add("'")
            out.glue = True
        elif name == "Pf":
            if args:
                add(args[0])
                out.glue = True
            args = args[1:]
            for a in args:
                add(a)
            return end
        elif name == "Fl":
            for a in args or [""]:
                add(a if a in _CLOSING or a in _OPENING or a == "|" else "-" + a)
            if not args:
                add("-")
            return end
        elif name == "Nm":
            if not self.name and words:
                self.name = words[0]
            if not words:
                add(self.name)
        elif name == "Ar" and not words:
            add("file ...")
        elif name == "Xr":
            if len(words) >= 2:
                add(f"{words[0]}({words[1]})")
                args = args[2:]
            for a in args:
                add(a)
            return end
        elif name in _SYSTEMS:
            add(_SYSTEMS[name] + (f" {words[0]}" if words else ""))
            args = args[1:] if words else args
        elif name == "St":
            add(_STANDARDS.get(words[0], words[0]) if words else "")
            args = args[1:]
        elif name == "Fn":
            if words:
                add(f"{words[0]}({', '.join(words[1:])})")
                args = [a for a in args if a not in words]
        elif name == "In":
            if words:
                add(f"#include <{words[0]}>")
                args = args[1:]
        elif name == "Lk":
            if words:
                add(" ".join(words[1:]) + f" ({words[0]})" if len(words) > 1 else words[0])
                args = [a for a in args if a not in words]
        elif name == "Ex":
            names = [w for w in words if w != "-std"] or [self.name]
            add(f"The {' and '.join(names)} utilit{'ies exit' if len(names) > 1 else 'y exits'} 0 on success, "
                "and >0 if an error occurs.")
            return end
        elif name == "Rv":
            names = [w for w in words if w != "-std"]
            add(f"The {', '.join(n + '()' for n in names)} function{'s return' if len(names) > 1 else ' returns'} "
                "the value 0 if successful; otherwise the value -1 is returned and the global variable errno is "
                "set to indicate the error.")
            return end
        elif name == "Ta":
            add("\t")
            out.glue = True
        elif name in ("Xo", "Xc"):
            pass
        for a in args:
            add(a)
        return end


def _tokens(rest: str) -> list[tuple[str, bool]]:
    """A macro line's arguments, each with whether it is literal text (quoted, or starting with
    ``\\&``) rather than a macro's name."""
    return [(t[1:-1], True) if t.startswith('"') and t.endswith('"') and len(t) > 1
            else (t, t.startswith("\\&")) for t in re.findall(r'"[^"]*"|\S+', rest)]
