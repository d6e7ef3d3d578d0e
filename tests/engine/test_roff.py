"""Man pages read as a reader of the page sees them: the BSD ``mdoc`` macros (OpenSSH's pages, a BSD
or macOS system's) and the ``man`` macros (GNU's)."""

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from chunktree.engine import roff
from chunktree.engine.documents import read_file

# An mdoc page laid out as OpenSSH lays out ssh.1: options in a tag list, forwarding options whose
# head is joined over lines with .Xo/.Xc and .Sm off, a synopsis of .Op groups, cross references.
TUNNEL_1 = r""".\"	$OpenBSD: a comment the reader never sees $
.Dd $Mdocdate: March 3 2024 $
.Dt TUNNEL 1
.Os
.Sh NAME
.Nm tunnel
.Nd forward ports over a secure channel
.Sh SYNOPSIS
.Nm tunnel
.Bk -words
.Op Fl 46v
.Op Fl D Oo Ar bind_address : Oc Ns Ar port
.Op Fl L Ar address
.Op Fl o Ar option
.Ar destination
.Op Ar command Op Ar argument ...
.Ek
.Sh DESCRIPTION
.Nm
(the tunnel client) connects to
.Ar destination
and reads
.Pa ~/.tunnel/config ;
see
.Xr ssh_config 5 .
.Pp
The options are as follows:
.Bl -tag -width Ds
.It Fl 4
Forces
.Nm
to use IPv4 addresses only.
.It Fl L Xo
.Sm off
.Oo Ar bind_address : Oc
.Ar port : host : hostport
.Sm on
.Xc
.It Fl L Xo
.Sm off
.Ar local_socket : remote_socket
.Sm on
.Xc
Specifies that connections to the given TCP port on the local host are
forwarded to the given host and port on the remote side.
.It Fl o Ar option
Gives options in the format of the configuration file, such as
.Dq Cm Compression Li yes .
.El
.Sh FILES
.Bl -bullet -compact
.It
.Pa ~/.tunnel/config ,
the user's settings.
.It
The system's settings, read when
.Ev TUNNEL_CONFIG
is unset; the line limit is
\*(Ge 1 and \
at most 1024.
.El
.Bl -enum
.It
first step
.It
second step
.El
.Sh EXIT STATUS
.Ex -std
"""


def test_an_mdoc_page_keeps_its_flags_brackets_arguments_and_items():
    text, headings = roff.to_text(TUNNEL_1)
    lines = text.splitlines()
    assert [h for _, h in headings] == ["TUNNEL(1)", "NAME", "SYNOPSIS", "DESCRIPTION", "FILES", "EXIT STATUS"]
    assert all(text[offset:].startswith(h) for offset, h in headings)
    assert "tunnel — forward ports over a secure channel" in lines
    assert lines[lines.index("SYNOPSIS") + 1:lines.index("SYNOPSIS") + 9] == ["",  # a heading stands apart
        "tunnel", "[-46v]", "[-D [bind_address:]port]", "[-L address]", "[-o option]", "destination",
        "[command [argument ...]]"]
    assert "and reads\n~/.tunnel/config;\nsee\nssh_config(5)." in text  # .Nm alone repeats the name
    assert "(the tunnel client) connects to" in text and lines[lines.index("DESCRIPTION") + 2] == "tunnel"
    # A tag list's heads, joined over .Xo ... .Xc, each head on a line of its own with its body after it.
    assert "-4\nForces\ntunnel\nto use IPv4 addresses only." in text
    assert ("-L [bind_address:]port:host:hostport\n-L local_socket:remote_socket\n"
            "Specifies that connections") in text
    assert "-o option\nGives options" in text and "such as\n“Compression yes”." in text
    assert "• ~/.tunnel/config,\nthe user's settings." in text
    assert "is unset; the line limit is\n≥ 1 and at most 1024." in text  # an escaped newline joins the lines
    assert "1. first step" in lines and "2. second step" in lines
    assert "The tunnel utility exits 0 on success, and >0 if an error occurs." in lines
    for leak in ("Fl", "Ar", "Oo", "Oc", "Op", "Ns", "Xo", "Xc", "Sm", "Nm", "Pa", "Xr", "Dq", "Cm", "Li", "Ev",
                 "Bl", "El", "Ex", "Mdocdate", "OpenBSD", "\\"):
        assert not re.search(rf"(?<![\w-]){re.escape(leak)}(?![\w-])", text), leak


def _option_letters(source):
    """The option letters a page's tag list documents: each ``.It Fl X``."""
    return set(re.findall(r"^\.It Fl (\w)\b", source, re.MULTILINE))


@pytest.mark.parametrize("page", [
    "tunnel.1", "/usr/share/man/man1/ssh.1.gz", "/usr/share/man/man1/ssh-keygen.1.gz"])
def test_every_option_letter_of_a_page_heads_a_line_with_its_dash(page, tmp_path):
    """Read as a file (``read_file``), every option the page documents starts a line ``-X``."""
    if page == "tunnel.1":
        path = tmp_path / page
        path.write_text(TUNNEL_1, encoding="utf-8")
    else:
        path = Path(page)
        if not path.exists():
            pytest.skip(f"{page} is not installed here")
    source = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    letters = _option_letters(source)
    text = read_file(path)[0].text
    heads = {line[1] for line in text.splitlines() if re.match(r"-\w( |$)", line)}
    assert letters and letters <= heads, sorted(letters - heads)


def test_a_gnu_man_page_reads_as_before():
    page = (".TH GZIP 1 local\n.SH NAME\ngzip, gunzip \\- compress or expand files\n.SH OPTIONS\n"
            ".TP\n.B \\-k \\-\\-keep\nKeep (don't delete) input files during compression.\n"
            ".TP\n.BR \\-l \" --list\"\nFor each compressed file, list the fields.\n")
    text, headings = roff.to_text(page)
    assert [h for _, h in headings] == ["GZIP(1)", "NAME", "OPTIONS"]
    assert "-k --keep\nKeep (don't delete) input files during compression." in text
    assert "-l --list\nFor each compressed file" in text and "gzip, gunzip - compress or expand files" in text


def test_a_bulleted_man_list_keeps_its_bullets_on_the_items():
    page = (".TH BASH 1\n.SH RESTRICTED SHELL\nthe following are disallowed or not performed:\n"
            ".IP \\(bu\nchanging directories with\n.BR cd ,\n.IP \\(bu\nsetting the value of\n.SM\n.BR PATH .\n"
            ".IP 1.\na numbered item\n.IP \\fB\\-k\\fP\nan option's tag\n")
    text, _ = roff.to_text(page)
    assert ("the following are disallowed or not performed:\n\n• changing directories with\ncd,\n\n"
            "• setting the value of\nPATH.\n\n1. a numbered item\n\n-k\nan option's tag") in text


# A page laid out as Asciidoctor writes one (util-linux's and perf's pages): a macro defined, an alias,
# and inside a groff-only conditional a macro appended to, its end written ".  ." rather than "..".
ASCIIDOCTOR_PAGE = r"""'\" t
.\"     Title: frob
.\" Generator: Asciidoctor 2.0.15
.TH "FROB" "1" "2024-01-01" "frob 2.0" "User Commands"
.ie \n(.g .ds Aq \(aq
.el       .ds Aq '
.ss \n[.ss] 0
.nh
.ad l
.de URL
\fI\\$2\fP <\\$1>\\$3
..
.als MTO URL
.if \n[.g] \{\
.  mso www.tmac
.  am URL
.    ad l
.  .
.  LINKSTYLE blue R < >
.\}
.SH "NAME"
frob \- turn widgets into gadgets
.SH "OPTIONS"
.sp
\fB\-d\fP, \fB\-\-deadline\fP
.RS 4
Set the deadline; runtime \(lA deadline \(lA period, \(*m in \(+-1 ms.
.RE
.ig EE
text the page hides
.EE
.SH "AUTHORS"
.MTO "jo\(atexample.com" "Jo Smith" ""
"""


def test_a_page_keeps_its_text_after_macro_blocks_ended_as_asciidoctor_ends_them():
    """A block of requests ends at ".." with spaces after the dot as well (".  ."), and ``.ig EE`` at
    ``.EE``: the page's text after them is read, not swallowed to the end of the file. Named
    characters read as groff renders them, and a macro's alias (``.als``) as the macro."""
    text, headings = roff.to_text(ASCIIDOCTOR_PAGE)
    assert [h for _, h in headings] == ["FROB(1)", "NAME", "OPTIONS", "AUTHORS"]
    assert "frob - turn widgets into gadgets" in text
    # .RS only indents: the option's description reads on from its tag, as man shows it
    assert "-d, --deadline\nSet the deadline; runtime ⇐ deadline ⇐ period, μ in ±1 ms." in text
    assert "jo@example.com" in text and "Jo Smith" in text
    for leak in ("text the page hides", "LINKSTYLE", "mso", "ad l", "URL"):
        assert leak not in text, leak


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed here")
def test_special_characters_read_as_groff_renders_them():
    """Every named character the reader knows renders as ``groff -Tutf8`` renders it, but the
    hyphen and the minus, read as ASCII "-"."""
    names = sorted(set(roff._CHARS) - {"hy", "mi"})
    source = ".nf\n" + "\n".join(f"QZ{i}QZ\\[{name}]QZ" for i, name in enumerate(names)) + "\n"
    out = subprocess.run(["groff", "-Tutf8", "-P-c", "-ww"], input=source.encode(), capture_output=True,
                         check=True).stdout.decode()
    groff = {names[int(m.group(1))]: m.group(2) for m in re.finditer(r"QZ(\d+)QZ(.*?)QZ", out)}
    assert len(groff) == len(names)
    assert {n: roff._CHARS[n] for n in names if roff._CHARS[n] != groff[n]} == {}
    assert roff.to_text(".TH X 1\n.SH A\n\\-k \\(hy \\(mi\n")[0].endswith("-k - -")


@pytest.mark.real_data
def test_every_installed_man_page_reads_with_text():
    """Each page under /usr/share/man that is more than a ``.so`` link to another reads as text."""
    pages = sorted(Path("/usr/share/man").glob("man*/*.gz"))
    if not pages:
        pytest.skip("no man pages installed here")
    empty = []
    for path in pages:
        source = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        if roff.looks_like_roff(source) and not re.search(r"^\.so ", source, re.MULTILINE) \
                and not roff.to_text(source)[0].strip():
            empty.append(str(path))
    assert empty == []
