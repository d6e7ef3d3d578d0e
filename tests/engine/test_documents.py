"""Reading files into documents: every supported type, and a clear error for every bad input."""

import gzip
import json
import logging
import re
from pathlib import Path

import pytest

from chunktree import DocumentError, read_paths, sample_documents
from chunktree.engine.documents import read_file


def test_text_and_markdown(tmp_path):
    (tmp_path / "a.txt").write_text("Plain text.\nSecond line.", encoding="utf-8")
    md = "Intro line.\n\n# Whales\nBig ones.\n\n```\n# not a heading\n```\n## Ships  ##\nWooden.\n"
    (tmp_path / "b.md").write_text(md, encoding="utf-8")
    a, b = read_paths([tmp_path])  # folder, sorted
    assert a.source.endswith("a.txt") and a.text == "Plain text.\nSecond line." and a.kind == "text"
    assert b.kind == "markdown"
    assert b.headings == ((md.index("# Whales"), "Whales"), (md.index("## Ships"), "Ships"))


def test_generated_jsonl_ids_cannot_collide_with_explicit_ones(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_text('{"text": "no id here"}\n{"id": 1, "text": "explicit one"}\n', encoding="utf-8")
    first, second = read_paths([path])
    assert first.source.endswith("ids.jsonl#line-1") and second.source.endswith("ids.jsonl#1")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_a_byte_order_mark_are_read(tmp_path, encoding):
    text = "Call me Ishmael. Café, naïve — 鯨."
    path = tmp_path / "t.txt"
    bom = {"utf-16-be": b"\xfe\xff"}.get(encoding, b"")
    path.write_bytes(bom + text.encode(encoding))  # "utf-16"/"utf-32" write their own mark
    (doc,) = read_paths([path])
    assert doc.text == text


def test_utf8_bom_is_dropped(tmp_path):
    (tmp_path / "bom.txt").write_bytes("\ufeffhello".encode("utf-8"))
    assert read_file(tmp_path / "bom.txt")[0].text == "hello"


def test_html_visible_text_and_headings(tmp_path):
    html = ("<html><head><title>T</title><style>p{}</style></head><body><h1>Moby &amp; Dick</h1>"
            "<script>var x=1;</script><p>Call me <b>Ishmael</b>.</p><h2>Next</h2><p>More.</p></body></html>")
    (tmp_path / "p.html").write_text(html, encoding="utf-8")
    (doc,) = read_file(tmp_path / "p.html")
    assert "Call me **Ishmael**." in doc.text and "var x" not in doc.text and "p{}" not in doc.text
    assert [h for _, h in doc.headings] == ["Moby & Dick", "Next"]
    for offset, heading in doc.headings:
        assert doc.text[offset:].split("\n", 1)[0].lstrip("# ") == heading


def test_an_html_extractor_that_cannot_be_imported_is_one_error_naming_the_packages(tmp_path, monkeypatch):
    import sys

    from chunktree.checks import ChunktreeError

    (tmp_path / "p.html").write_text("<html><body><p>Call me Ishmael.</p></body></html>", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "trafilatura", None)  # `import trafilatura` raises ImportError
    with pytest.raises(ChunktreeError, match=r"p\.html: reading HTML needs .* pip install trafilatura lxml_html_clean"):
        read_file(tmp_path / "p.html")


def test_jsonl_records(tmp_path):
    lines = [{"id": "x1", "text": "first doc", "lang": "en", "title": "One"}, {"text": "second doc"}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n\n", encoding="utf-8")
    a, b = read_file(tmp_path / "d.jsonl")
    assert a.source.endswith("d.jsonl#x1") and a.text == "first doc" and a.meta == {"lang": "en", "title": "One"}
    assert a.headings == ((0, "One"),)
    assert b.source.endswith("d.jsonl#line-2") and b.meta == {}


def test_pdf_pages(tmp_path):
    fpdf = pytest.importorskip("fpdf")
    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=12)
    for words in ("First page about whales.", "Second page about ships."):
        pdf.add_page()
        pdf.cell(text=words)
    pdf.output(str(tmp_path / "two.pdf"))
    (doc,) = read_file(tmp_path / "two.pdf")
    assert len(doc.page_starts) == 2 and doc.page_starts[0] == 0
    assert doc.text[doc.page_starts[1]:].startswith("Second page")
    assert "First page about whales." in doc.text[:doc.page_starts[1]]


# Fonts that may hold the ligature glyphs (Debian's, which chromium's install brings along).
FONTS = [Path(p) for p in ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                           "/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf")]


def test_pdf_ligatures_read_as_their_letters(tmp_path):
    """A typeset PDF holds "ﬁ" and "ﬂ" as one glyph each; the text holds their letters, as the
    question's words and the tokenizer have them."""
    fpdf = pytest.importorskip("fpdf")
    from fontTools.ttLib import TTFont  # fpdf2's dependency

    line = "The ﬁrst ﬁles ﬂow through the oﬃce buﬀer."
    font = next((f for f in FONTS if f.is_file() and {ord(c) for c in "ﬁﬂﬃﬀ"} <= set(TTFont(f).getBestCmap())), None)
    if font is None:
        pytest.skip("no TrueType font with the ligature glyphs found")
    pdf = fpdf.FPDF()
    pdf.add_font("body", fname=str(font))
    pdf.set_font("body", size=12)
    pdf.add_page()
    pdf.cell(text=line)
    pdf.output(str(tmp_path / "typeset.pdf"))
    (doc,) = read_file(tmp_path / "typeset.pdf")
    assert "The first files flow through the office buffer." in doc.text


@pytest.mark.parametrize("layout", ["title above, number below", "title above a chapter's head and number"])
def test_pdf_without_running_heads_and_with_broken_words_whole(tmp_path, layout):
    """A manual as DocBook and Texinfo print one: the book's title at the top of each page and the
    page's printed number at the foot, or under the title a running head that ends with that
    number; words broken at a line's end. The pages read as their text: no running line (the first
    page keeps its title), the words whole ("declaration", "manipulation"), a compound keeps its
    hyphen ("well-known")."""
    fpdf = pytest.importorskip("fpdf")
    body = [["1 Introduction", "The schema parser reads every declaration of a module once.",
             "Each declara-", "tion names a type, and a well known name is kept as it is."],
            ["Setting up the parser is one call; the manip-", "ulation of the tree comes after it."],
            ["2 Trees", "A tree holds one node per type, and each node keeps its well-", "known name."],
            ["Nodes are freed with the tree, in one call, when the tree is deleted."]]

    class Manual(fpdf.FPDF):
        def header(self) -> None:
            n = self.page_no() - 1
            self.cell(text="The Frob Parser Manual", new_x="LMARGIN", new_y="NEXT")
            if layout.endswith("number"):
                self.cell(text=f"Chapter {1 + n // 2}: {'Introduction' if n < 2 else 'Trees'} {n + 3}",
                          new_x="LMARGIN", new_y="NEXT")

        def footer(self) -> None:
            if layout.endswith("below"):
                self.set_y(-15)
                self.cell(text=str(self.page_no() + 2))

    pdf = Manual()
    pdf.set_font("helvetica", size=11)
    for lines in body:
        pdf.add_page()
        for line in lines:
            pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(tmp_path / "frob.pdf"))
    (doc,) = read_file(tmp_path / "frob.pdf")
    pages = [doc.text[a:b] for a, b in zip(doc.page_starts, [*doc.page_starts[1:], len(doc.text)])]
    assert [page.split() for page in pages] == [" ".join(lines).split() for lines in [
        ["The Frob Parser Manual", "1 Introduction", "The schema parser reads every declaration of a module once.",
         "Each declaration names a type, and a well known name is kept as it is."],
        ["Setting up the parser is one call; the manipulation of the tree comes after it."],
        ["2 Trees", "A tree holds one node per type, and each node keeps its well-known name."],
        ["Nodes are freed with the tree, in one call, when the tree is deleted."]]]


@pytest.mark.parametrize("name, content, message", [
    ("empty.txt", b"", "file is empty"),
    ("blank.md", b"  \n\t\n", "file is empty"),
    ("bin.txt", b"abc\x00\x01def", r"binary \(contains NUL bytes\)"),
    ("ctrl.dat", b"\x01\x02\x03\x04abc", r"binary \(over 10% control characters\)"),
    ("bad.gz", b"\x1f\x8b\x08not really gzip", "not a readable .gz file"),
    ("README.xz", b"plain text, not xz", "not a readable .xz file"),
    ("empty.bz2", __import__("bz2").compress(b" \n"), "file is empty"),
    ("only-a-link.1", b'.TH FOO 1\n.so man1/bar.1\n', "man page without text"),
    ("bad.jsonl", b'{"text": "ok"}\n{oops\n', r"bad.jsonl:2: invalid JSON"),
    ("list.jsonl", b'["text"]\n', "must be a JSON object; got list"),
    ("notext.jsonl", b'{"body": "x"}\n', "field 'text' must be a string; got NoneType"),
    ("dup.jsonl", b'{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n', "duplicate id '1'"),
    ("emptyrec.jsonl", b'{"text": "  "}\n', "holds no text"),
    ("bad.pdf", b"%PDF-1.4 this is not really a pdf", "not a readable PDF"),
    ("script.html", b"<script>only()</script>", "no visible text"),
])
def test_bad_files_are_named_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DocumentError, match=message) as info:
        read_paths([path])
    assert name in str(info.value)


def test_missing_and_unreadable_paths(tmp_path):
    with pytest.raises(DocumentError, match="no such file or folder"):
        read_paths([tmp_path / "nope.txt"])
    (tmp_path / "dir.txt").mkdir()
    with pytest.raises(DocumentError, match=r"dir.txt: a folder: only regular files are read"):
        read_file(tmp_path / "dir.txt")
    with pytest.raises(DocumentError, match="no input paths"):
        read_paths([])
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(DocumentError, match="no files found"):
        read_paths([empty])


def test_folder_reports_skipped_files(tmp_path, caplog):
    (tmp_path / "keep.txt").write_text("kept", encoding="utf-8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with caplog.at_level(logging.WARNING):
        docs = read_paths([tmp_path])
    assert [d.text for d in docs] == ["kept"]
    assert "skipped 1 file(s)" in caplog.text


def test_sample_corpus():
    docs = sample_documents()
    assert len(docs) == 135
    assert docs[0].source == "sample:moby-dick#chapter_1" and docs[0].text.startswith("Call me Ishmael.")
    assert docs[0].headings == ((0, "Loomings."),)
    assert sum(len(d.text.split()) for d in docs) > 200_000


HANDBOOK_PAGE = """<!DOCTYPE html><html><head><title>11.5. Samba Server</title><script>var x=1;</script></head><body>
<div class="navheader"><table width="100%"><tr><td><a href="index.html">Download the ebook</a></td></tr>
<tr><td><a href="prev.html">Prev</a></td><th>Chapter 11. Network Services</th><td><a href="next.html">Next</a></td>
</tr></table></div>
<div class="section"><h2 class="title">11.5. Samba Server</h2>{body}
<div class="toc"><dl><dt><a href="a.html">11.5.1. Samba Server</a></dt><dd>Configuring with debconf.</dd>
<dt><a href="b.html">11.5.2. Samba Client</a></dt></dl></div>
<h3>11.5.1. Configuring with debconf</h3>{body}<ul><li>First item of the list.</li><li>Second item.</li></ul></div>
<div class="navfooter"><table><tr><td><a href="prev.html">Prev</a></td><td><a href="up.html">Up</a></td>
<td><a href="next.html">Next</a></td></tr><tr><td>11.4. Setting Up a DNS</td><td><a href="index.html">Home</a></td>
<td>11.6. HTTP Proxy</td></tr></table></div></body></html>"""


def test_html_main_content_without_navigation(tmp_path):
    """A page shaped like the Debian handbook's: navigation above and below, a table of contents
    in <dl>, headings, a list."""
    body = "".join(f"<p>Samba shares files and printers with Windows machines, paragraph {i}, and it needs "
                   "a workgroup name that the office network agrees on.</p>" for i in range(4))
    (tmp_path / "samba.html").write_text(HANDBOOK_PAGE.format(body=body), encoding="utf-8")
    (doc,) = read_file(tmp_path / "samba.html")
    for boilerplate in ("Download the ebook", "Prev", "Next", "Home", "11.6. HTTP Proxy", "var x"):
        assert boilerplate not in doc.text
    assert [h for _, h in doc.headings] == ["11.5. Samba Server", "11.5.1. Configuring with debconf"]
    lines = doc.text.splitlines()
    assert "- First item of the list." in lines and "- Second item." in lines
    assert not any("Server11.5" in line or "Client11" in line for line in lines)  # blocks do not run together
    assert doc.text.count("paragraph 3") == 2


# A page as GNU Texinfo 6 writes a manual in HTML: a navigation line above the section.
TEXINFO_PAGE = """<html><head><title>Thread Safety (frob: the widget library)</title></head><body lang="en">
<div class="section" id="Thread-Safety">
<div class="header">
<p>Next: <a href="Memory.html" rel="next">Memory Usage</a>, Previous: <a href="Closures.html">Closure Example</a>,
Up: <a href="Using.html">Using frob</a> &nbsp; [<a href="Index.html">Index</a>]</p>
</div>
<hr>
<h3 class="section">2.7 Thread Safety</h3>
<p><code>frob_prep_cif</code> may modify the <code>frob_type</code> objects passed to it, so only one
thread should prepare a given <code>frob_cif</code> [see below] at a time; my_config_file and *.frob
files are read once, and a literal back\\slash stays as it is.</p>
<pre class="example">frob_init([1, 2]);  /* a_b */
</pre>
<p>Calls through a prepared interface are safe from any thread once preparation is done, which is
the usual case in a program that prepares its interfaces at start-up.</p>
<p>1. Prepare each interface once, at start-up, before any thread calls through it.</p>
<p>- Keep one interface a thread when the types differ from call to call.</p>
</div></body></html>"""


def test_html_text_reads_as_the_page_shows_it_without_texinfo_navigation(tmp_path):
    """What the HTML extractor's Markdown escapes (``my\\_config``, ``\\[see below\\]``, ``\\*.frob``,
    a paragraph's leading ``1\\.``) reads as the page shows it, code included; a GNU manual's "Next:
    ..., Up: ..." line is left out."""
    (tmp_path / "Thread-Safety.html").write_text(TEXINFO_PAGE, encoding="utf-8")
    (doc,) = read_file(tmp_path / "Thread-Safety.html")
    assert "Next:" not in doc.text and "Memory Usage" not in doc.text and "Index" not in doc.text
    assert "a given `frob_cif` [see below] at a time; my_config_file and *.frob" in " ".join(doc.text.split())
    assert "back\\slash" in doc.text and "frob_init([1, 2]);  /* a_b */" in doc.text
    assert "\n1. Prepare each interface once" in doc.text and "\n- Keep one interface" in doc.text
    assert "\\_" not in doc.text and "\\[" not in doc.text and "\\*" not in doc.text and "\\." not in doc.text


# A page as Sphinx writes it: a permalink sign after each heading, and an inline literal that wraps
# a line of the source (which the extractor writes as a code block that opens mid-sentence).
SPHINX_PAGE = """<html><head><title>Dialect internals</title></head><body><div class="body" role="main">
<section id="dialect-internals"><h1>Dialect internals<a class="headerlink" href="#dialect-internals"
title="Link to this heading">¶</a></h1>
<p>A dialect tells the engine how to talk to one database through its DBAPI driver, and each method
below is called by the engine at a fixed point of a connection's life.</p>
<dl>
<dt>do_execute()</dt><dd><p>Provide an implementation of <code class="docutils literal"><span
class="pre">cursor.execute(statement,</span>
<span class="pre">parameters)</span></code>.</p></dd>
<dt>do_execute_no_params()</dt><dd><p>Provide an implementation of
<code class="docutils literal"><span class="pre">cursor.execute(statement)</span></code>.</p></dd>
</dl>
<section id="do-ping"><h2>Pinging a connection<a class="headerlink" href="#do-ping" title="Link to this
heading">¶</a></h2>
<p>The engine calls do_ping() on a pooled connection before it hands it out, when pre_ping is set,
and the pool discards a connection whose ping fails.</p></section></section></div></body></html>"""


def test_sphinx_page_reads_without_permalink_signs_or_escapes(tmp_path):
    """No "¶" after a heading (in the text or the headings); a name after an inline literal that
    wraps a line (``do_execute_no_params``) reads as the page shows it, not ``do\\_execute...``."""
    (tmp_path / "internals.html").write_text(SPHINX_PAGE, encoding="utf-8")
    (doc,) = read_file(tmp_path / "internals.html")
    assert [h for _, h in doc.headings] == ["Dialect internals", "Pinging a connection"]
    assert "¶" not in doc.text
    assert "do_execute_no_params()" in doc.text and "\\_" not in doc.text
    assert "do_ping() on a pooled connection before it hands it out, when pre_ping is set" in doc.text


def test_jupyter_notebooks_read_as_their_cells(tmp_path):
    """Notebooks as Jupyter writes them (nbformat 4 and 3): Markdown cells as they are, code in
    fenced blocks of the notebook's language, headings found; outputs (a printed line, a PNG) left
    out. In a folder a notebook is read, not skipped as data; one that is not JSON is an error
    naming it."""
    nbformat = pytest.importorskip("nbformat")
    v4, v3 = nbformat.v4, nbformat.v3
    png = {"image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk" * 20}
    notebook = v4.new_notebook(metadata={"language_info": {"name": "python"}}, cells=[
        v4.new_markdown_cell("# Cleaning the survey data\n\nRows without an age are dropped before the model "
                             "sees them."),
        v4.new_code_cell("df = df.dropna(subset=['age'])\nprint(len(df))", outputs=[
            v4.new_output("stream", name="stdout", text="1822 rows kept\n"),
            v4.new_output("display_data", data=png)]),
        v4.new_raw_cell("Raw text for the exporter."),
        v4.new_markdown_cell("## Ages\n\nThe ages run from 18 to 97."),
    ])
    folder = tmp_path / "analysis"
    folder.mkdir()
    (folder / "survey.ipynb").write_text(nbformat.writes(notebook), encoding="utf-8")
    old = v3.new_notebook(worksheets=[v3.new_worksheet(cells=[
        v3.new_heading_cell("Loading the data", level=2),
        v3.new_code_cell(input="import pandas as pd\ndf = pd.read_csv('survey.csv')", language="python"),
        v3.new_text_cell("markdown", source="The file holds one row per answer."),
    ])])
    (folder / "load.ipynb").write_text(v3.writes_json(old), encoding="utf-8")
    (folder / "empty.ipynb").write_text(nbformat.writes(v4.new_notebook()), encoding="utf-8")  # skipped
    load, survey = read_paths([folder])
    assert survey.text == ("# Cleaning the survey data\n\nRows without an age are dropped before the model sees them."
                           "\n\n```python\ndf = df.dropna(subset=['age'])\nprint(len(df))\n```\n\nRaw text for the "
                           "exporter.\n\n## Ages\n\nThe ages run from 18 to 97.\n")
    assert [h for _, h in survey.headings] == ["Cleaning the survey data", "Ages"]
    assert load.text == ("## Loading the data\n\n```python\nimport pandas as pd\ndf = pd.read_csv('survey.csv')\n```"
                         "\n\nThe file holds one row per answer.\n")
    (tmp_path / "broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    with pytest.raises(DocumentError, match=r"broken\.ipynb: not a readable Jupyter notebook \(invalid JSON"):
        read_file(tmp_path / "broken.ipynb")


def test_links_and_roles_in_headings_read_as_their_text(tmp_path):
    """A changelog's Markdown heading that links its release, a reStructuredText title with a role:
    the chunk headings are what the rendered page shows; the text stays as written."""
    (tmp_path / "CHANGELOG.md").write_text("# Changes\n\n## [22.2.0](https://example.org/tree/22.2.0) - 2022-12-21\n\n"
                                           "Added {func}`attrs.define`.\n", encoding="utf-8")
    (tmp_path / "frob.rst").write_text(":mod:`frob` --- Frobbing widgets\n================================\n\n"
                                       "See `the guide <https://example.org>`_.\n", encoding="utf-8")
    changelog, frob = read_paths([tmp_path])
    assert [h for _, h in changelog.headings] == ["Changes", "22.2.0 - 2022-12-21"]
    assert [h for _, h in frob.headings] == ["`frob` --- Frobbing widgets"]
    assert "## [22.2.0](https://example.org/tree/22.2.0)" in changelog.text and frob.text.startswith(":mod:`frob`")


# An Info file as makeinfo 6 writes one: a preamble with its dir entry, nodes split by 0x1f under a
# "File: ..., Node: ..." line, menus, an index node marked with NUL bytes, the tag table.
INFO = ("This is frob.info, produced by makeinfo version 6.8 from frob.texi.\n\nThis manual is for Frob 2.1, "
        "the widget frobnicator.\n\nINFO-DIR-SECTION Utilities\nSTART-INFO-DIR-ENTRY\n* frob: (frob).   "
        "Frobnicate widgets.\nEND-INFO-DIR-ENTRY\n\n\x1f\nFile: frob.info,  Node: Top,  Next: Invoking,  "
        "Up: (dir)\n\nFrob\n****\n\nFrob turns a widget over until it fits.\n\n* Menu:\n\n* Invoking::\n* Index::"
        "\n\n\x1f\nFile: frob.info,  Node: Invoking,  Next: Index,  Prev: Top,  Up: Top\n\n1 Invoking frob\n"
        "***************\n\n'frob' reads the widgets named on its command line.\n\n'-k'\n'--keep'\n     Keep the "
        "input widgets.\n\n\x1f\nFile: frob.info,  Node: Index,  Prev: Invoking,  Up: Top\n\nIndex\n*****\n\n"
        "\x00\x08[index\x00\x08]\n* Menu:\n\n* keep:                                  Invoking.             "
        "(line 9)\n\n\x1f\nTag Table:\nNode: Top\x7f180\nNode: Invoking\x7f400\n\x1f\nEnd Tag Table\n\n\x1f\n"
        "Local Variables:\ncoding: utf-8\nEnd:\n")


def test_an_info_manual_reads_as_info_shows_its_nodes(tmp_path):
    """A GNU Info file (gzipped, as /usr/share/info holds them) is read, not refused as binary for
    its index marker's NUL bytes: each node's text under its title, without the node lines, menus,
    tables, dir entry and makeinfo line; titles with their underlines are the headings."""
    (tmp_path / "frob.info.gz").write_bytes(gzip.compress(INFO.encode()))
    (doc,) = read_paths([tmp_path])
    assert doc.text == ("This manual is for Frob 2.1, the widget frobnicator.\n\nFrob\n****\n\nFrob turns a widget "
                        "over until it fits.\n\n1 Invoking frob\n***************\n\n'frob' reads the widgets named on "
                        "its command line.\n\n'-k'\n'--keep'\n     Keep the input widgets.\n\nIndex\n*****\n")
    assert [h for _, h in doc.headings] == ["Frob", "1 Invoking frob", "Index"]
    (tmp_path / "other.bin").write_bytes(b"\x00\x08[index\x00\x08] and \x00 a NUL of its own")
    with pytest.raises(DocumentError, match=r"binary \(contains NUL bytes\)"):
        read_file(tmp_path / "other.bin")


@pytest.mark.real_data
def test_every_installed_info_manual_reads_without_its_navigation():
    """Each GNU Info file under /usr/share/info reads as text, with no node line, menu or
    control byte of the format left in it."""
    from pathlib import Path

    manuals = sorted(p for p in Path("/usr/share/info").glob("*.info*") if not p.name.endswith(".png"))
    if not manuals:
        pytest.skip("no Info manuals installed here")
    wrong = []
    for path in manuals:
        (doc, *_) = read_file(path)
        if re.search(r"^File: .*Node: |^\* Menu:|[\x00\x08\x1f\x7f]", doc.text, re.M):
            wrong.append(path.name)
    assert wrong == []


def test_pdf_chapter_heads_and_a_heading_that_starts_with_the_page_number(tmp_path):
    """A DocBook-style manual: a title page with the contents, then five chapters of four pages,
    each page after a chapter's first under the chapter's title, every page's printed number at
    its foot; chapter 1 opens on printed page 1 with "1. Setup". The heads, numbers and the
    contents' dot-leader lines go, the headings stay."""
    fpdf = pytest.importorskip("fpdf")
    names = ["Setup", "Usage", "Cleaning", "Repairs", "Storage"]
    words = "widget bench cable light button tray cloth screw panel fan filter lamp belt gear spring valve".split()
    body = [f"Page {n} tells how the {words[n % 16]} and the {words[(3 * n + 5) % 16]} are looked after."
            for n in range(20)]

    class Manual(fpdf.FPDF):
        def header(self) -> None:
            n = self.page_no() - 2
            if n >= 0 and n % 4:
                self.cell(text=names[n // 4], new_x="LMARGIN", new_y="NEXT")

        def footer(self) -> None:
            if self.page_no() > 1:
                self.set_y(-15)
                self.cell(text=str(self.page_no() - 1))

    pdf = Manual()
    pdf.set_font("helvetica", size=11)
    pdf.add_page()
    pdf.cell(text="The Widget Manual", new_x="LMARGIN", new_y="NEXT")
    pdf.cell(text="Contents", new_x="LMARGIN", new_y="NEXT")
    for k, name in enumerate(names):  # dot leaders to the page numbers: navigation, not text
        pdf.cell(text=f"{k + 1}. {name} " + ". " * 30 + str(4 * k + 1), new_x="LMARGIN", new_y="NEXT")
    for n, line in enumerate(body):
        pdf.add_page()
        if n % 4 == 0:
            pdf.cell(text=f"{n // 4 + 1}. {names[n // 4]}", new_x="LMARGIN", new_y="NEXT")
        pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(tmp_path / "manual.pdf"))
    (doc,) = read_file(tmp_path / "manual.pdf")
    pages = [doc.text[a:b].split() for a, b in zip(doc.page_starts, [*doc.page_starts[1:], len(doc.text)])]
    assert pages == [["The", "Widget", "Manual", "Contents"]] + [
        ([f"{n // 4 + 1}.", names[n // 4]] if n % 4 == 0 else []) + line.split() for n, line in enumerate(body)]


def test_text_written_for_a_terminal_reads_as_the_terminal_shows_it(tmp_path):
    """A coloured build log and nroff's output (bold and underline by overstriking, grotty's
    escape sequences): the text without the codes."""
    (tmp_path / "build.log").write_text("\x1b[1m\x1b[32mPASSED\x1b[0m tests/test_io.py::test_read - 0.2 s\n"
                                        "\x1b]8;;https://example.org\x1b\\docs\x1b]8;;\x1b\\ and \x1b[31;1mFAILED\x1b[m "
                                        "tests/test_io.py::test_write\n", encoding="utf-8")
    (tmp_path / "frob.txt").write_text("N\bNA\bAM\bME\bE\n     frob - turn a _\bw_\bi_\bd_\bg_\be_\bt over\n\n"
                                       "\x1b[1mSYNOPSIS\x1b[0m\n     \x1b[1mfrob\x1b[0m [\x1b[4mfile\x1b[24m]\n",
                                       encoding="utf-8")
    log, page = read_paths([tmp_path])
    assert log.text == ("PASSED tests/test_io.py::test_read - 0.2 s\ndocs and FAILED tests/test_io.py::test_write\n")
    assert page.text == "NAME\n     frob - turn a widget over\n\nSYNOPSIS\n     frob [file]\n"


def test_org_mode_headlines_are_headings(tmp_path):
    """An Org file's headlines head its chunks: the title without its TODO keyword, priority and
    tags, a link as its text; bold text (``*not a heading*``) and the file's settings are not."""
    (tmp_path / "HACKING.org").write_text(
        "#+TITLE: Frob developer guide\n\n* Hacking on Frob\n** TODO [#A] Build with [[https://x.org][waf]]   "
        ":build:debug:\n\nTo configure the build, add =--debug=:\n\n: ./waf configure --debug\n\n*not a heading* "
        "here.\n** Testing\n", encoding="utf-8")
    (doc,) = read_paths([tmp_path])
    assert [h for _, h in doc.headings] == ["Hacking on Frob", "Build with waf", "Testing"]
    assert all(doc.text[offset:].startswith("*") for offset, _ in doc.headings)


def test_word_documents_read_as_their_body(tmp_path):
    """A .docx as Word (here python-docx) writes it, in a folder: title and headings as ``#``
    lines that head the chunks, list items, a table a row a line, in the body's order; the page
    header is left out. A file named .docx that is no Word document is an error naming it."""
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "ACME internal - do not distribute"
    document.add_heading("Boiler maintenance", level=0)
    document.add_paragraph("Bleed the radiators once a year, before the heating season starts.")
    document.add_heading("Pressure", level=1)
    document.add_paragraph("Check the gauge reads between 1 and 1.5 bar when the boiler is cold.")
    document.add_paragraph("Top up through the filling loop.", style="List Bullet")
    document.add_paragraph("Close the loop tightly afterwards.", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for (r, c), text in {(0, 0): "Reading", (0, 1): "Action", (1, 0): "below 1 bar", (1, 1): "top up"}.items():
        table.cell(r, c).text = text
    document.add_paragraph("Call an engineer if it drops again within a week.")
    document.save(tmp_path / "boiler.docx")
    docx.Document().save(tmp_path / "blank.docx")  # without text: skipped and named in a folder
    (doc,) = read_paths([tmp_path])
    assert doc.text == ("# Boiler maintenance\n\nBleed the radiators once a year, before the heating season starts.\n\n"
                        "# Pressure\n\nCheck the gauge reads between 1 and 1.5 bar when the boiler is cold.\n\n"
                        "- Top up through the filling loop.\n\n- Close the loop tightly afterwards.\n\n"
                        "| Reading | Action |\n| below 1 bar | top up |\n\n"
                        "Call an engineer if it drops again within a week.\n")
    assert [h for _, h in doc.headings] == ["Boiler maintenance", "Pressure"]
    import zipfile

    with zipfile.ZipFile(tmp_path / "other.docx", "w") as z:
        z.writestr("notes.txt", "not a Word document")
    with pytest.raises(DocumentError, match=r"other\.docx: not a readable Word document"):
        read_file(tmp_path / "other.docx")
    with zipfile.ZipFile(tmp_path / "boiler.docx") as good, zipfile.ZipFile(tmp_path / "cut.docx", "w") as cut:
        for item in good.infolist():  # the body's XML cut in half, as a damaged copy has it
            data = good.read(item.filename)
            cut.writestr(item, data[:len(data) // 2] if item.filename == "word/document.xml" else data)
    with pytest.raises(DocumentError, match=r"cut\.docx: not a readable Word document"):
        read_file(tmp_path / "cut.docx")


def _epub(path, chapters: list[tuple[str, str]]) -> None:
    """An EPUB 3 book as the specification lays one out: the mimetype first and stored, the
    container naming the package, the package's manifest and spine (in an order that is not the
    files' names), one XHTML file a chapter."""
    import zipfile

    items = "".join(f'<item id="c{i}" href="text/ch%20{i}.xhtml" media-type="application/xhtml+xml"/>'
                    for i in range(len(chapters)))
    spine = "".join(f'<itemref idref="c{i}"/>' for i in reversed(range(len(chapters))))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" '
                   'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
                   'full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>')
        z.writestr("OEBPS/content.opf", '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" '
                   'version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
                   '<dc:title>Sea Notes</dc:title></metadata><manifest><item id="css" href="style.css" '
                   f'media-type="text/css"/>{items}</manifest><spine>{spine}</spine></package>')
        z.writestr("OEBPS/style.css", "p { margin: 0 }")
        for i, (title, body) in enumerate(chapters):
            z.writestr(f"OEBPS/text/ch {i}.xhtml", '<?xml version="1.0" encoding="utf-8"?><html '
                       f'xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title></head><body>'
                       f"<h1>{title}</h1>{''.join(f'<p>{p}</p>' for p in body.split(chr(10)))}</body></html>")


def test_an_epub_book_reads_its_chapters_in_reading_order(tmp_path):
    """The chapters in the spine's order (not the files'), each as its HTML page reads, their
    titles as headings; a zip that is no EPUB is an error naming the file."""
    _epub(tmp_path / "sea.epub", [
        ("The Harbour", "The harbour was full of whalers, each waiting for the spring tide to carry it out.\n"
                        "Their crews mended nets on the quay and argued about the price of oil."),
        ("The Storm", "On the third night the wind turned and the sea rose over the bow of the ship.\n"
                      "The mate ordered the sails reefed and the boats lashed down on the deck.")])
    (doc,) = read_paths([tmp_path])
    assert [h for _, h in doc.headings] == ["The Storm", "The Harbour"]
    assert doc.text.index("the wind turned") < doc.text.index("full of whalers") < doc.text.index("price of oil")
    import zipfile

    with zipfile.ZipFile(tmp_path / "other.epub", "w") as z:
        z.writestr("notes.txt", "not a book")
    with pytest.raises(DocumentError, match=r"other\.epub: not a readable EPUB book"):
        read_file(tmp_path / "other.epub")
