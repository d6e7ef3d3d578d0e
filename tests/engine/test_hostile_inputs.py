"""Inputs built to hang or exhaust the readers (the hostile round's NH cases, and our own): each is
read in bounded time and memory, or refused with a reason that names the file."""

import gzip
import io
import logging
import os
import subprocess
import sys

import pytest

from chunktree import DocumentError, read_paths
from chunktree.engine import documents, roff
from chunktree.engine.documents import NotText, iter_documents, read_file

# Lines shaped to make a backtracking reader quadratic: an escape that never closes, a heading
# whose title is a long run of spaces, a line of hashes, adornment-like lines, unclosed quotes.
PATHOLOGICAL = {
    "evil.1": lambda n: ".TH EVIL 1\n.SH DESCRIPTION\n" + "\\[" * (n // 2) + "\n" + "\\*[" * (n // 3) + "\n"
                        + "\\h'" * (n // 3) + "\n" + '.B "' * (n // 4) + "\n",
    "spaces.md": lambda n: "# a" + " " * n + "b\n" + "#" * n + "\n" + "# " + "#" * n + "x\n",
    "adorn.rst": lambda n: "title\n" + "=" * n + "x\n" + "-" * n + "\n",
    "line.txt": lambda n: "word " * (n // 5) + "\n" + "." * n + "\n",
    "page.html": lambda n: "<html><body><p>" + "<b>" * (n // 3) + "text</p></body></html>",
    "rows.jsonl": lambda n: '{"text": "' + "a " * (n // 2) + '"}\n',
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_each_reader_reads_a_pathological_line_of_100_kb(tmp_path, name):
    """The time ratio between sizes is measured in bench/bench_readers.py; here each reader must
    come back at all (a quadratic one took minutes at this size) with text or a named reason."""
    path = tmp_path / name
    path.write_text(PATHOLOGICAL[name](100_000), encoding="utf-8")
    try:
        docs = read_file(path)
    except DocumentError as exc:
        assert name in str(exc)
    else:
        assert docs and all(d.text.strip() for d in docs)


def test_an_unclosed_roff_escape_is_read_as_text_and_closed_ones_still_resolve():
    text, _ = roff.to_text(".TH X 1\n.SH A\nan \\[em] dash, \\[u2014] and \\[" + "x" * 100 + "\n")
    assert "an — dash, — and [" + "x" * 100 in text


def test_a_markdown_heading_keeps_its_title_without_the_closing_hashes(tmp_path):
    (tmp_path / "h.md").write_text("# Title ##\n\ntext\n\n## C# #\n\nmore\n#" + " " * 50 + "\n", encoding="utf-8")
    (doc,) = read_file(tmp_path / "h.md")
    assert [h for _, h in doc.headings] == ["Title", "C"]


def test_folders_linked_as_a_dag_are_walked_once_each(tmp_path, caplog):
    """31 levels, each linking twice to the next: 2**30 paths, 31 folders."""
    root = tmp_path / "dag"
    for i in range(31):
        (root / f"L{i}").mkdir(parents=True)
    for i in range(30):
        os.symlink(f"../L{i + 1}", root / f"L{i}" / "a")
        os.symlink(f"../L{i + 1}", root / f"L{i}" / "b")
    (root / "L30" / "note.txt").write_text("bread rises", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="chunktree.engine.documents"):
        (doc,) = read_paths([root / "L0"])
    assert doc.text == "bread rises"
    assert sum("already walked" in r.getMessage() for r in caplog.records) == 30  # each level's second link


def test_a_folder_1500_deep_is_read(tmp_path):
    deep = tmp_path / "d"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(1500):  # one level at a time: os.makedirs itself recurses
        os.mkdir("a", dir_fd=fd)
        fd, parent = os.open("a", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    with open("n.txt", "w", opener=lambda name, flags: os.open(name, flags, 0o644, dir_fd=fd)) as f:
        f.write("bread")
    os.close(fd)
    try:
        (doc,) = read_paths([deep])
        assert doc.source.endswith("/a/n.txt")
    finally:  # removed here, bottom up: shutil.rmtree (pytest's clean-up) recurses once per level
        subprocess.run(["rm", "-rf", str(deep)], check=True)


def test_a_link_back_up_is_named_and_not_followed(tmp_path, caplog):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "n.txt").write_text("bread", encoding="utf-8")
    os.symlink("..", tmp_path / "d" / "sub" / "up")
    with caplog.at_level(logging.WARNING):
        assert len(read_paths([tmp_path / "d"])) == 1
    assert "a link back to the folder" in caplog.text


def test_a_file_link_loop_and_special_files_in_a_folder_are_skipped_with_their_reasons(tmp_path, caplog):
    d = tmp_path / "f"
    d.mkdir()
    (d / "note.md").write_text("bread", encoding="utf-8")
    os.symlink("b.txt", d / "a.txt")
    os.symlink("a.txt", d / "b.txt")
    os.symlink("/dev/zero", d / "zero.txt")
    os.mkfifo(d / "pipe.txt")
    os.symlink("missing.txt", d / "gone.txt")
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([d])
    assert doc.source.endswith("note.md")
    log = caplog.text
    assert "a.txt: skipped: a link loop" in log and "b.txt: skipped: a link loop" in log
    assert "zero.txt: a character device: only regular files are read" in log
    assert "pipe.txt: a named pipe: only regular files are read" in log
    assert "gone.txt: skipped: a broken link" in log


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_named_as_input_is_refused_before_it_is_read(device):
    with pytest.raises(DocumentError, match=f"{device}: a character device: only regular files are read"):
        read_paths([device])


def test_a_named_pipe_given_by_name_is_read(tmp_path):
    fifo = tmp_path / "in.txt"
    os.mkfifo(fifo)
    writer = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'w').write('bread from a pipe')"])
    (doc,) = read_paths([fifo])
    writer.wait(timeout=30)
    assert doc.text == "bread from a pipe"


def test_a_large_sparse_file_is_found_binary_from_its_prefix(tmp_path):
    """2 GiB of NUL bytes (sparse: no disk): skipped from the first 8 KiB, so the reading process
    stays far below the file's size."""
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "a.txt").write_text("bread notes", encoding="utf-8")
    with open(folder / "big.txt", "wb") as f:
        f.truncate(2 << 30)
    # VmHWM: this process's peak (ru_maxrss would keep the forking test worker's across exec)
    code = ("import re, sys; from chunktree import read_paths; docs = read_paths([sys.argv[1]]); "
            "peak = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print(len(docs), int(peak) // 1024)")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    n_docs, peak_mb = map(int, out.stdout.split())
    assert n_docs == 1
    assert peak_mb < 1024, f"peak {peak_mb} MB reading past a 2 GiB binary file"
    assert "big.txt: binary (contains NUL bytes)" in out.stderr


def test_the_total_text_is_bounded_and_the_file_that_passes_it_is_named(tmp_path):
    """Three small .gz files that each decompress under the per-file cap: the total budget stops the
    read at the file that passes it, before it is decompressed whole."""
    folder = tmp_path / "bombs"
    folder.mkdir()
    body = ("the quick brown fox jumps over the lazy dog near the bakery\n" * 2000).encode()  # 120 KB
    for name in "abc":
        (folder / f"{name}.txt.gz").write_bytes(gzip.compress(body))
    docs = iter_documents([folder], max_bytes=300_000)
    assert next(docs).source.endswith("a.txt.gz")
    assert next(docs).source.endswith("b.txt.gz")
    with pytest.raises(DocumentError, match=r"c\.txt\.gz: the inputs hold more than 0\.286102 MiB of text.*max_bytes"):
        next(docs)
    assert len(read_paths([folder], max_bytes=400_000)) == 3
    with pytest.raises(DocumentError, match=r"a\.txt: the inputs hold more than"):
        (tmp_path / "a.txt").write_bytes(body)
        read_file(tmp_path / "a.txt", max_bytes=1000)


def test_a_decompression_bomb_is_refused_under_the_per_file_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(documents, "MAX_DECOMPRESSED", 10_000)
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"x " * 100_000))
    with pytest.raises(NotText, match="decompresses to more than"):
        read_file(tmp_path / "a.txt.gz")


def _aes_pdf() -> bytes:
    """A PDF whose /Encrypt dictionary asks for AES-256 (revision 6), the usual 'protected' PDF."""
    from pypdf import PdfWriter
    from pypdf.generic import ByteStringObject, DictionaryObject, NameObject, NumberObject

    def name(n):
        return NameObject(n)

    w = PdfWriter()
    w.add_blank_page(100, 100)
    w._encrypt_entry = w._add_object(DictionaryObject({
        name("/Filter"): name("/Standard"), name("/V"): NumberObject(5), name("/R"): NumberObject(6),
        name("/Length"): NumberObject(256), name("/P"): NumberObject(-4),
        name("/O"): ByteStringObject(b"\0" * 48), name("/U"): ByteStringObject(b"\0" * 48),
        name("/OE"): ByteStringObject(b"\0" * 32), name("/UE"): ByteStringObject(b"\0" * 32),
        name("/Perms"): ByteStringObject(b"\0" * 16),
        name("/CF"): DictionaryObject({name("/StdCF"): DictionaryObject({name("/CFM"): name("/AESV3"),
                                                                           name("/Length"): NumberObject(32)})}),
        name("/StmF"): name("/StdCF"), name("/StrF"): name("/StdCF")}))
    out = io.BytesIO()
    w.write(out)
    return out.getvalue()


def test_an_aes_encrypted_pdf_in_a_folder_is_skipped_with_its_reason(tmp_path, caplog):
    pytest.importorskip("pypdf")
    try:
        import cryptography  # noqa: F401
        pytest.skip("with cryptography installed pypdf opens AES PDFs itself")
    except ImportError:
        pass
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "enc.pdf").write_bytes(_aes_pdf())
    (tmp_path / "d" / "a.md").write_text("bread", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([tmp_path / "d"])
    assert doc.source.endswith("a.md")
    assert "enc.pdf: an encrypted PDF that pypdf cannot open" in caplog.text
    assert "pip install cryptography" in caplog.text
    with pytest.raises(NotText, match=r"enc\.pdf: an encrypted PDF"):
        read_paths([tmp_path / "d" / "enc.pdf"])


def test_a_file_name_that_is_not_utf8_is_a_printable_source(tmp_path):
    folder = tmp_path / "n"
    folder.mkdir()
    raw = os.fsencode(str(folder)) + b"/bad\xff\xfe.md"
    with open(raw, "wb") as f:
        f.write(b"hello bread")
    nl = folder / "two\nlines.txt"
    nl.write_text("more bread", encoding="utf-8")
    sources = sorted(d.source for d in read_paths([folder]))
    assert sources[0].endswith("/bad\\xff\\xfe.md")
    assert sources[1].endswith("/two\\nlines.txt")
    assert all(s.encode("utf-8") and s.isprintable() for s in sources)


@pytest.mark.parametrize("text", ["\u200b" * 1000, "\ufeff\u200d\u2060", "\x01\x02 \t\n", "\u202e\u200f  "])
def test_text_of_only_invisible_characters_is_skipped_and_named(tmp_path, caplog, text):
    folder = tmp_path / "z"
    folder.mkdir()
    (folder / "zw.txt").write_text(text, encoding="utf-8")
    (folder / "ok.txt").write_text("bread", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([folder])
    assert doc.source.endswith("ok.txt")
    assert "zw.txt:" in caplog.text
    with pytest.raises(DocumentError, match=r"zw\.txt: "):
        read_paths([folder / "zw.txt"])


# -- our own hostile round (OH-n in the issue's note): inputs --

def test_oh1_a_pseudo_file_that_stats_as_empty_is_read_whole():
    (doc,) = read_paths(["/proc/self/status"])
    assert "VmPeak" in doc.text or "Name:" in doc.text


@pytest.mark.parametrize("line, message", [
    ('{"id": ' + "9" * 5000 + ', "text": "x"}', r"big\.jsonl:1: invalid JSON"),                       # OH-2
    ('{"text": "bad \\ud800 text"}', r"big\.jsonl:1: field 'text' is not valid Unicode: a lone surrogate"),  # OH-3
    ('{"id": null, "text": "a"}', r"big\.jsonl:1: field 'id' must be a string or an integer; got None"),  # OH-4
    ('{"id": [1], "text": "a"}', r"big\.jsonl:1: field 'id' must be a string or an integer"),
])
def test_oh2_4_a_jsonl_record_with_a_bad_id_or_text_is_named_by_line(tmp_path, line, message):
    (tmp_path / "big.jsonl").write_text(line + "\n", encoding="utf-8")
    with pytest.raises(DocumentError, match=message):
        read_file(tmp_path / "big.jsonl")


def test_oh5_markdown_headings_with_windows_line_endings(tmp_path):
    (tmp_path / "crlf.md").write_bytes(b"# Title\r\n\r\ntext\r\n## Sub ##\r\nmore\r\n")
    assert [h for _, h in read_file(tmp_path / "crlf.md")[0].headings] == ["Title", "Sub"]


def test_oh6_7_a_page_of_a_hundred_thousand_headings(tmp_path):
    (tmp_path / "many.md").write_text("# h\ntext\n" * 100_000, encoding="utf-8")
    (tmp_path / "many.1").write_text(".TH X 1\n" + ".SH A\ntext\n" * 100_000, encoding="utf-8")
    assert len(read_file(tmp_path / "many.md")[0].headings) == 100_000
    assert len(read_file(tmp_path / "many.1")[0].headings) == 100_001


def test_oh8_10_paths_that_lead_nowhere_are_named(tmp_path):
    os.symlink("nothere.txt", tmp_path / "broken.txt")
    os.symlink("l2.txt", tmp_path / "l1.txt")
    os.symlink("l1.txt", tmp_path / "l2.txt")
    with pytest.raises(DocumentError, match=r"broken\.txt: cannot be read \(No such file or directory\)"):
        read_paths([tmp_path / "broken.txt"])                                                        # OH-8
    with pytest.raises(DocumentError, match=r"l1\.txt: a link loop"):
        read_paths([tmp_path / "l1.txt"])                                                            # OH-9
    with pytest.raises(DocumentError, match=r"aaaa.*: cannot be read \(File name too long\)"):
        read_paths([tmp_path / ("a" * 5000)])                                                        # OH-10


@pytest.mark.parametrize("name, data, reason", [
    ("z.txt", b"PK\x03\x04" + bytes(range(256)) * 8, "binary (a ZIP archive)"),                      # OH-11
    ("u16.txt", "hello bread".encode("utf-16-le"), "binary (contains NUL bytes)"),                   # OH-12
    ("gz2.txt.gz", gzip.compress(gzip.compress(b"hello bread", mtime=0), mtime=0), "binary"),       # OH-14
    ("bom.txt", b"\xef\xbb\xbf", "holds no visible text"),                                           # OH-17
], ids=["zip", "utf-16", "gzip-in-gzip", "bom-only"])
def test_oh11_17_files_that_are_not_text_are_skipped_with_their_reasons(tmp_path, caplog, name, data, reason):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / name).write_bytes(data)
    (folder / "ok.md").write_text("bread", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([folder])
    assert doc.source.endswith("ok.md") and f"{name}: {reason}" in caplog.text


def test_oh13_a_pdf_of_no_pages_is_named(tmp_path):
    from pypdf import PdfWriter

    out = io.BytesIO()
    PdfWriter().write(out)
    (tmp_path / "empty.pdf").write_bytes(out.getvalue())
    with pytest.raises(DocumentError, match=r"empty\.pdf: PDF has no extractable text"):
        read_file(tmp_path / "empty.pdf")


def test_oh15_16_globs_that_leave_out_everything_say_so_and_backtrack_nowhere(tmp_path):
    folder = tmp_path / "g"
    folder.mkdir()
    for i in range(3):
        (folder / (f"{i}" + "x" * 200 + ".md")).write_text("bread", encoding="utf-8")
    with pytest.raises(DocumentError, match=r"no files found, and 3 left out by the include/exclude globs"):
        read_paths([folder], include=["*a" * 50 + "*b"])  # a pattern a backtracking matcher is slow on


def test_oh18_a_budget_below_one_byte_is_refused():
    with pytest.raises(ValueError, match="max_bytes must be >= 1; got 0"):
        read_paths(["examples/notes"], max_bytes=0)
