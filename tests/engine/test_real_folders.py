"""Folders laid out as real systems lay them out (``/usr/share/doc/PKG``, man pages, source trees):
files without an extension, reStructuredText, source code, roff, gzip/bzip2/xz, nested folders,
links, and a binary blob that must be named, not read."""

import bz2
import gzip
import logging
import lzma
import os

import pytest

from chunktree import DocumentError, read_paths
from chunktree.apps.cli.main import main
from chunktree.engine import documents
from chunktree.engine.documents import NotText, read_file

README = "Frobnicator\n\nThe frobnicator turns widgets into gadgets.\nSee NEWS for what changed.\n"
COPYRIGHT = ("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
             "Upstream-Name: frobnicator\n\nFiles: *\nCopyright: 2024 Jo Smith\nLicense: MIT\n")
NEWS = "frobnicator 2.0\n\n* Gadgets can now be blue.\n* The widget parser no longer crashes on empty widgets.\n"
CHANGELOG = "frobnicator (2.0-1) unstable; urgency=medium\n\n  * New upstream release.\n\n -- Jo Smith  Mon, 01 Jan 2024\n"
NOTES = ("Release notes\n=============\n\nIntro paragraph about the release.\n\n"
         "Upgrading\n---------\n\nRun the migration before the first start.\n\n"
         "    indented\n    --------\n\nLiteral block above is not a heading.\n")
API = "=====\nAPI\n=====\n\nfrobnicate(widget)\n~~~~~~~~~~~~~~~~~~\n\nTurns one widget into a gadget.\n"
SOURCE = '"""Frobnicate widgets."""\n\n\ndef frobnicate(widget):\n    return widget.upper()\n'
GUIDE = "A guide to gadgets: blue ones, red ones, and the widgets they come from.\n"
MAN = r""".\" Man page for frob
.TH FROB 1 "January 2024" "frob 2.0" "User Commands"
.SH NAME
frob \- turn widgets into gadgets
.SH SYNOPSIS
.B frob
[\fIOPTION\fR]... \fIWIDGET\fR
.SH DESCRIPTION
.PP
Turns each \fBWIDGET\fP into a gadget \(em quickly.
.TP
\fB\-b\fR, \fB\-\-blue\fR
make the gadget blue
.SS "Exit status"
0 if OK \[u2014] or not\[u110000]\[uD800].
.SH "SEE ALSO"
.BR widget (5)
"""
BLOB = bytes(range(256)) * 4


@pytest.fixture
def doc_folder(tmp_path):
    """A folder laid out like /usr/share/doc/frobnicator, with a nested man folder."""
    root = tmp_path / "frobnicator"
    (root / "man" / "man1").mkdir(parents=True)
    (root / "api").mkdir()
    (root / "README").write_text(README, encoding="utf-8")
    (root / "copyright").write_text(COPYRIGHT, encoding="utf-8")
    (root / "NEWS.gz").write_bytes(gzip.compress(NEWS.encode()))
    (root / "changelog.Debian.bz2").write_bytes(bz2.compress(CHANGELOG.encode()))
    (root / "notes.rst").write_text(NOTES, encoding="utf-8")
    (root / "api" / "index.rst.txt.xz").write_bytes(lzma.compress(API.encode()))
    (root / "frob.py").write_text(SOURCE, encoding="utf-8")
    (root / "guide.txt").write_text(GUIDE, encoding="utf-8")
    (root / "man" / "man1" / "frob.1.gz").write_bytes(gzip.compress(MAN.encode()))
    (root / "widgets.db").write_bytes(BLOB)
    return root


EXPECTED = {"README": README, "copyright": COPYRIGHT, "NEWS.gz": NEWS, "changelog.Debian.bz2": CHANGELOG,
            "notes.rst": NOTES, "index.rst.txt.xz": API, "frob.py": SOURCE, "guide.txt": GUIDE}


def _by_name(docs):
    return {os.path.basename(d.source): d for d in docs}


def test_a_doc_folder_gives_every_text_source_and_names_the_blob(doc_folder, caplog):
    with caplog.at_level(logging.WARNING):
        docs = read_paths([doc_folder])
    got = _by_name(docs)
    assert sorted(got) == sorted([*EXPECTED, "frob.1.gz"])
    for name, text in EXPECTED.items():  # read verbatim, decompressed where compressed
        assert got[name].text == text, name
    assert "widgets.db: binary (contains NUL bytes)" in caplog.text and "skipped 1 file(s)" in caplog.text


def test_rst_headings_are_the_underlined_titles(doc_folder):
    got = _by_name(read_paths([doc_folder]))
    assert got["notes.rst"].headings == ((0, "Release notes"), (NOTES.index("Upgrading"), "Upgrading"))
    assert got["index.rst.txt.xz"].headings == ((API.index("API"), "API"),
                                                (API.index("frobnicate("), "frobnicate(widget)"))


def test_a_man_page_reads_as_its_text_with_section_headings(doc_folder):
    (page,) = read_file(doc_folder / "man" / "man1" / "frob.1.gz")
    assert [h for _, h in page.headings] == ["FROB(1)", "NAME", "SYNOPSIS", "DESCRIPTION", "Exit status", "SEE ALSO"]
    for offset, heading in page.headings:
        assert page.text[offset:].startswith(heading)
    text = page.text
    assert "frob - turn widgets into gadgets" in text
    assert "Turns each WIDGET into a gadget — quickly." in text
    assert "-b, --blue" in text and "widget(5)" in text
    assert "0 if OK — or not." in text  # \[u2014] read; a code past Unicode or a lone surrogate dropped
    for residue in ("\\f", ".TH", ".SH", ".PP", '.\\"', "\\-", "\\("):
        assert residue not in text, residue


def test_include_and_exclude_choose_among_a_folders_files(doc_folder):
    only_rst = read_paths([doc_folder], include=["*.rst", "*.rst.txt*"])
    assert sorted(_by_name(only_rst)) == ["index.rst.txt.xz", "notes.rst"]
    no_man = read_paths([doc_folder], exclude=["man/*", "*.db"])
    assert sorted(_by_name(no_man)) == sorted(EXPECTED)
    # a file named directly is read whatever the globs say
    assert len(read_paths([doc_folder / "guide.txt"], include=["*.md"])) == 1
    with pytest.raises(DocumentError, match="no files found"):
        read_paths([doc_folder], include=["*.nothing"])


def test_each_file_is_read_once_and_link_loops_are_not_followed(doc_folder, caplog):
    (doc_folder / "api" / "up").symlink_to(doc_folder, target_is_directory=True)  # a loop
    (doc_folder / "README.link").symlink_to(doc_folder / "README")  # the same file twice
    (doc_folder / "dangling").symlink_to(doc_folder / "nowhere")
    with caplog.at_level(logging.WARNING):
        docs = read_paths([doc_folder, doc_folder / "guide.txt"])  # guide.txt reached twice as well
    assert sorted(_by_name(docs)) == sorted([*EXPECTED, "frob.1.gz"])
    assert "a link back to the folder" in caplog.text and "dangling: skipped: a broken link" in caplog.text


def test_a_named_binary_file_is_an_error_with_the_reason(doc_folder):
    with pytest.raises(NotText, match=r"widgets\.db: binary \(contains NUL bytes\)"):
        read_paths([doc_folder / "widgets.db"])


def test_a_decompression_bomb_is_refused(doc_folder, monkeypatch):
    monkeypatch.setattr(documents, "MAX_DECOMPRESSED", 64)
    with pytest.raises(NotText, match=r"NEWS\.gz: decompresses to more than"):
        read_file(doc_folder / "NEWS.gz")


def test_the_cli_reads_the_folder_and_honours_the_globs(doc_folder, tmp_path, capsys, caplog):
    out = tmp_path / "out" / "vectors.npy"
    with caplog.at_level(logging.WARNING):
        assert main(["--no-progress", "embed", str(doc_folder), "--no-cache", "-o", str(out)]) == 0
    sources = {line.split('"source": "')[1].split('"')[0]
               for line in out.with_suffix(".jsonl").read_text(encoding="utf-8").splitlines()}
    assert sorted(os.path.basename(s) for s in sources) == sorted([*EXPECTED, "frob.1.gz"])
    assert "widgets.db: binary" in caplog.text
    out2 = tmp_path / "out" / "rst.npy"
    assert main(["--no-progress", "embed", str(doc_folder), "--no-cache", "--include", "*.rst",
                 "--exclude", "api/*", "-o", str(out2)]) == 0
    assert '"source": "' + str(doc_folder / "notes.rst") in out2.with_suffix(".jsonl").read_text(encoding="utf-8")
    assert len(out2.with_suffix(".jsonl").read_text(encoding="utf-8").splitlines()) >= 1
    assert "api/" not in out2.with_suffix(".jsonl").read_text(encoding="utf-8")


def _pdf_bytes():
    fpdf = pytest.importorskip("fpdf")
    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.cell(text="A page about gadgets.")
    return bytes(pdf.output())


KINDS = {
    "notes.txt": GUIDE.encode(), "README": README.encode(), "guide.md": b"# Gadgets\n\nBlue ones.\n",
    "notes.rst": NOTES.encode(), "api.rst.txt": API.encode(), "frob.py": SOURCE.encode(), "frob.1": MAN.encode(),
    "page.html": b"<html><body><h1>Gadgets</h1><p>Blue ones are best.</p></body></html>",
    "records.jsonl": b'{"id": "a", "text": "first gadget"}\n{"id": "b", "text": "second gadget"}\n',
    "doc.pdf": None,
}
COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


@pytest.mark.parametrize("suffix", list(COMPRESS))
@pytest.mark.parametrize("name", list(KINDS))
def test_every_type_reads_the_same_compressed(tmp_path, name, suffix):
    data = KINDS[name] if KINDS[name] is not None else _pdf_bytes()
    (tmp_path / name).write_bytes(data)
    (tmp_path / "packed").mkdir()
    (tmp_path / "packed" / (name + suffix)).write_bytes(COMPRESS[suffix](data))
    plain = read_file(tmp_path / name)
    packed = read_file(tmp_path / "packed" / (name + suffix))
    assert [(d.text, d.kind, d.headings, d.page_starts, d.meta) for d in packed] == \
        [(d.text, d.kind, d.headings, d.page_starts, d.meta) for d in plain]
    assert [d.source.replace(str(tmp_path / "packed" / (name + suffix)), "X") for d in packed] == \
        [d.source.replace(str(tmp_path / name), "X") for d in plain]
    if name in ("notes.txt", "README", "notes.rst", "api.rst.txt", "frob.py"):
        assert plain[0].text == data.decode()  # read verbatim


def test_hidden_folders_are_left_out_and_a_long_skip_list_is_cut(doc_folder, caplog, monkeypatch):
    git = doc_folder / ".git" / "objects"
    git.mkdir(parents=True)
    for i in range(5):
        (git / f"obj{i}").write_bytes(b"x\x00\x01" * 10)  # binary, as git's objects are
    (doc_folder / ".hidden-notes.txt").write_text("not read unless named", encoding="utf-8")
    for i in range(4):
        (doc_folder / f"blob{i}.bin").write_bytes(BLOB)
    monkeypatch.setattr(documents, "NAMED_SKIPS", 3)
    with caplog.at_level(logging.INFO):
        docs = read_paths([doc_folder])
    assert sorted(_by_name(docs)) == sorted([*EXPECTED, "frob.1.gz"])
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "skipped 5 file(s)" in warning and "; and 2 more (-v names them)" in warning and ".git" not in warning
    assert ".git: hidden: not read" in caplog.text
    assert read_paths([doc_folder / ".hidden-notes.txt"])[0].text == "not read unless named"  # named: read
