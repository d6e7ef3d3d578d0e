"""Prose, not assets, and text in any charset: what a folder of real documentation holds besides
its prose (SVG images, minified scripts, lock files, JSON data, PostScript, tables of numbers,
encoded blobs) is skipped and named; text that is not UTF-8 is read in the charset it is in."""

import base64
import json
import logging
import random

import pytest

from chunktree.engine.documents import read_file, read_paths

PROSE = ("The captain kept the log himself, and every evening he wrote down the wind, the sea and what the "
         "lookout had seen. ") * 8
SVG = ('<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 256 256">\n'
       + "".join(f'  <path d="M{i}.196,156.382l-54.842,-50.417c-3.849,-3.848 -9.045,-5.965 -14.24,-5.965c-5.196,0 '
                 f'-10.392,2.117 -14.24,5.965l-54.842,50.417Z" style="fill:#493e5e;"/>\n' for i in range(60))
       + "</svg>\n")
MINIFIED = "".join(f"function a{i}(b,c){{return b?c[{i}]:void 0}}var x{i}=a{i}(1,[2,3]);" for i in range(400))
LOCK = json.dumps({"name": "docs", "lockfileVersion": 3, "packages": {
    f"node_modules/pkg{i}": {"version": "1.0.0", "resolved": f"https://registry.npmjs.org/pkg{i}/-/pkg{i}-1.0.0.tgz",
                             "integrity": "sha512-abc"} for i in range(50)}}, indent=2)
DASHBOARD = json.dumps({"title": "Requests", "panels": [
    {"id": i, "type": "graph", "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * i},
     "targets": [{"expr": f"rate(http_requests_total{{code=\"{c}\"}}[5m])", "refId": "A"}]}
    for i, c in enumerate([200, 404, 500] * 10)]}, indent=2)
SCHEMA = json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Logbook entry",
                     "properties": {name: {"type": "string", "description": PROSE[:200] + f" This is the {name}."}
                                    for name in ("wind", "sea", "sighting")}}, indent=2)
POSTSCRIPT = ("%!PS-Adobe-3.0\n%%Creator: groff version 1.22.4\n%%Pages: 2\n%%EndComments\n"
              + "".join(f"/F{i} 10/Times-Roman@0 SF({PROSE[:60]})72 {700 - 12 * i} Q\n" for i in range(40)))
CSV = "time,depth,temperature\n" + "".join(f"{i * 0.5:.1f},{i % 40 + 2},{11 + (i % 7) / 10:.2f}\n" for i in range(2000))
CODE = ('import csv\n\n\ndef deepest(path):\n    """The deepest sounding in the log, in fathoms."""\n'
        '    with open(path) as f:\n        return max(int(row["depth"]) for row in csv.DictReader(f))\n')
DOCBOOK = ("<?xml version='1.0'?>\n<chapter><title>Logs</title>\n<para>" + PROSE + "</para>\n<para>" + PROSE
           + "</para></chapter>\n")
COMMENTED_MD = "<!--\n  Licensed to you under the Apache License, Version 2.0.\n-->\n# Logs\n\n" + PROSE


@pytest.fixture
def folder(tmp_path):
    docs = tmp_path / "docs"
    (docs / "_static").mkdir(parents=True)
    (docs / "guide.md").write_text(COMMENTED_MD, encoding="utf-8")
    (docs / "chapter.xml").write_text(DOCBOOK, encoding="utf-8")
    (docs / "_static" / "logo.svg").write_text(SVG, encoding="utf-8")
    (docs / "_static" / "app.js").write_text(MINIFIED, encoding="utf-8")
    (docs / "_static" / "font.txt").write_text(base64.encodebytes(random.Random(0).randbytes(30000)).decode(),
                                                encoding="utf-8")
    (docs / "package-lock.json").write_text(LOCK, encoding="utf-8")
    (docs / "_static" / "dashboard.json").write_text(DASHBOARD, encoding="utf-8")
    (docs / "entry.schema.json").write_text(SCHEMA, encoding="utf-8")
    (docs / "manual.ps").write_text(POSTSCRIPT, encoding="utf-8")
    (docs / "measurements.csv").write_text(CSV, encoding="utf-8")
    (docs / "plot.py").write_text(CODE, encoding="utf-8")
    return docs


def test_a_folder_reads_its_prose_and_names_each_asset_it_skips(folder, caplog):
    with caplog.at_level(logging.WARNING):
        docs = read_paths([folder])
    assert sorted(d.source.rsplit("/", 1)[-1] for d in docs) == ["chapter.xml", "entry.schema.json", "guide.md",
                                                                  "plot.py"]
    warning = caplog.text
    assert "skipped 7 file(s) that are not text documents or hold no prose" in warning
    assert "measurements.csv: data without prose (a table of numbers or symbols: 0% of it is words)" in warning
    assert "manual.ps: PostScript, a printer's program rather than its text" in warning
    assert "dashboard.json: JSON data without prose (0% of it is sentences in its strings)" in warning
    assert "logo.svg: markup without prose (an SVG or XML image or data: 0% of it is words outside tags)" in warning
    assert "app.js: long lines with little prose, as minified, generated or data files have" in warning
    assert "font.txt: encoded data" in warning and "package-lock.json: a lock file" in warning
    assert "read when named, or chosen by an include glob" in warning


def test_an_asset_is_read_when_named_or_chosen_by_a_glob(folder):
    (svg,) = read_file(folder / "_static" / "logo.svg")
    assert "54.842" in svg.text
    chosen = read_paths([folder], include=["*.svg", "*.md"])
    assert sorted(d.source.rsplit("/", 1)[-1] for d in chosen) == ["guide.md", "logo.svg"]


def test_a_link_in_angle_brackets_is_no_markup(tmp_path, caplog):
    """A file that starts with "<" is judged as markup only when it holds tags: a Markdown link in
    angle brackets is text (a small file is read whatever its share of words)."""
    (tmp_path / "moved.md").write_text("<https://github.com/pallets/flask/blob/main/docs/changes.rst>\n",
                                       encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([tmp_path])
    assert doc.text.startswith("<https://github.com/") and "skipped" not in caplog.text


def test_html_fragments_are_read_and_templates_and_pages_without_text_are_skipped_by_name(tmp_path, caplog):
    """A fragment (no <body>) is a page's text; a Jinja template is no page (its tags outside code),
    while a page that shows template code in <pre> is one; a page without visible text in a folder
    is skipped and named, not the end of the run."""
    (tmp_path / "note.html").write_text("<p>Bread needs an hour to rise in a warm kitchen.</p>\n", encoding="utf-8")
    (tmp_path / "layout.html").write_text('{% extends "base.html" %}\n{% block content %}<h1>{{ page.title }}</h1>'
                                          "{% endblock %}\n", encoding="utf-8")
    (tmp_path / "jinja-docs.html").write_text("<html><body><h1>Loops</h1><p>A loop repeats a block for each item of a "
                                              "list.</p><pre>{% for user in users %}{{ user.name }}{% endfor %}</pre>"
                                              "</body></html>", encoding="utf-8")
    (tmp_path / "redirect.html").write_text("<html><head><script>location.href='x.html'</script></head><body></body>"
                                            "</html>", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        docs = {d.source.rsplit("/", 1)[-1]: d.text for d in read_paths([tmp_path])}
    assert sorted(docs) == ["jinja-docs.html", "note.html"]
    assert docs["note.html"] == "Bread needs an hour to rise in a warm kitchen."
    assert "{% for user in users %}" in docs["jinja-docs.html"]
    assert "layout.html: a template (Jinja or Django tags outside code, such as '{% extends \"base.html\" %}')" \
        in caplog.text
    assert "redirect.html: HTML page has no visible text" in caplog.text
    (layout,) = read_file(tmp_path / "layout.html")  # named, it is read as the page it is
    assert "{{ page.title }}" in layout.text


@pytest.mark.parametrize("text, encoding, detected", [
    ("Le café était déjà fermé ; la façade, naïve, donnait sur la rue où l'on vendait des crêpes. " * 20,
     "latin-1", "cp1252"),
    ("Grüße aus München: die schöne Straße führt über die Brücke. " * 20, "cp1252", "cp1252"),
    ("Капитан сам вёл журнал и каждый вечер записывал ветер, море и то, что видел впередсмотрящий. " * 20,
     "cp1251", "cp1251"),
    ("Zażółć gęślą jaźń: kapitan sam prowadził dziennik i co wieczór zapisywał wiatr. " * 20, "cp1250", "cp1250"),
])
def test_text_in_another_charset_is_read_in_it_and_the_charset_named(tmp_path, caplog, text, encoding, detected):
    path = tmp_path / "notes.txt"
    path.write_bytes(text.encode(encoding))
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([tmp_path])
    assert doc.text == text
    assert "read 1 file(s) that are not all UTF-8: " in caplog.text
    assert f"notes.txt (not UTF-8; read as {detected}, the charset detected)" in caplog.text


def test_a_few_bad_bytes_in_a_large_utf8_file_are_replaced_and_counted(tmp_path, caplog):
    good = "Der Kapitän führte das Logbuch selbst — jeden Abend. ".encode()
    data = good * 20000 + b"\xff\xfe broken" + good * 20000 + b"\xc3 cut" + good * 10
    (tmp_path / "log.txt").write_bytes(data)
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([tmp_path])
    assert doc.text.count("\ufffd") == 3 and doc.text.count("Kapitän") == 40010
    assert f"log.txt (3 byte sequence(s) that are not UTF-8, the first at offset {len(good) * 20000}, replaced " \
        "with U+FFFD)" in caplog.text


def test_binary_formats_are_named_by_their_first_bytes_and_text_that_starts_alike_is_read(tmp_path, caplog):
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(1, 200)))
    (tmp_path / "riff.txt").write_text("RIFF files and ID3 tags: notes on the containers of sound files.\n")
    with caplog.at_level(logging.WARNING):
        (doc,) = read_paths([tmp_path])
    assert doc.source.endswith("riff.txt") and "logo.png: binary (a PNG image)" in caplog.text


def test_a_restructuredtext_stub_of_directives_alone_is_skipped_and_named(tmp_path, caplog):
    """A Sphinx or CMake help folder holds stubs whose text another file holds (``.. cmake-module::``,
    ``.. automodule::`` with its options); a page whose directives hold prose is read."""
    help_dir = tmp_path / "Help"
    help_dir.mkdir()
    (help_dir / "FindWidgets.rst").write_text(".. cmake-module:: ../../Modules/FindWidgets.cmake\n", encoding="utf-8")
    (help_dir / "api.rst").write_text(".. automodule:: widgets.core\n   :members:\n   :undoc-members:\n\n",
                                      encoding="utf-8")
    (help_dir / "guide.rst").write_text("Widgets\n=======\n\n.. note::\n\n   " + PROSE + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        docs = read_paths([help_dir])
    assert [d.source.rsplit("/", 1)[-1] for d in docs] == ["guide.rst"]
    assert "skipped 2 file(s) that are not text documents or hold no prose" in caplog.text
    assert "FindWidgets.rst: reStructuredText of directives alone, no prose" in caplog.text
    (stub,) = read_file(help_dir / "FindWidgets.rst")  # named on its own, it is read
    assert "cmake-module" in stub.text
