"""The Chain-of-Agents reader: LLM workers over a loopback server, and the extractive worker."""


import pytest
from llm_server import LLMServer
from strict_json import loads

from chunktree import Chunk
from chunktree.engine.read import ChatClient, read
from chunktree.engine.read.extractive import keep_best
from chunktree.engine.read.memory import parse_memory

TEXTS = [f"Paragraph {i}. " + "The whale swam past the ship near the island. " * (3 + i % 4) for i in range(12)]


@pytest.fixture
def server():
    with LLMServer() as s:
        yield s


def test_workers_pass_memory_along_the_order(server, embedder, tmp_path):
    client = ChatClient(server.base_url, "memory", backoff=0)
    order = [3, 1, 4, 0, 5, 9, 2, 6, 8, 7, 10, 11]
    r = read(TEXTS, "Where did the whale swim?", sequence=order, llm=client, embedder=embedder,
             memory_tokens=2000, window_tokens=8000, trace=tmp_path / "trace.jsonl")
    assert r.order == order and not r.failures and r.strategy == "given" and r.reader == "llm"
    assert [i for s in r.steps for i in s.chunks] == order  # every chunk read once, in order
    assert r.answer == "ANSWER: seen " + ",".join(map(str, order))
    lines = [loads(x) for x in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [x["chunks"] for x in lines] == [s.chunks for s in r.steps]
    assert all(x["ok"] and x["prompt_tokens"] > 0 for x in lines)


def test_window_is_never_exceeded(server, embedder):
    client = ChatClient(server.base_url, "memory", backoff=0)
    window, memory = 600, 64
    r = read(TEXTS, "Where?", strategy="document", llm=client, embedder=embedder, memory_tokens=memory,
             window_tokens=window)
    assert len(r.steps) > 1  # packing had to split the text over several calls
    for req in server.requests[:-1]:  # worker calls
        prompt = sum(len(embedder.tokenizer.encode(m["content"], add_special_tokens=False).ids)
                     for m in req["body"]["messages"])
        assert prompt + memory <= window
    for step in r.steps:
        assert step.memory_tokens <= memory  # the growing memory was cut to its budget
    assert server.requests[-1]["body"]["max_tokens"] == memory  # the manager's answer is bounded too


def test_long_chunk_is_split_to_fit(server, embedder):
    client = ChatClient(server.base_url, "memory", backoff=0)
    long_text = "A long sentence about whales and the sea. " * 200
    r = read([long_text, "short"], "q", sequence=[0, 1], llm=client, embedder=embedder, memory_tokens=32,
             window_tokens=400)
    assert [i for s in r.steps for i in s.chunks].count(0) > 1
    assert r.steps[-1].chunks[-1] == 1


def test_malformed_reply_is_retried_once(server, embedder):
    r = read(TEXTS[:3], "q", sequence=[0, 1, 2], llm=ChatClient(server.base_url, "malformed-once", backoff=0),
             embedder=embedder, memory_tokens=500, window_tokens=8000)
    assert not r.failures and all(s.attempts == 2 for s in r.steps)
    assert r.answer == "ANSWER: seen 0,1,2"


def test_malformed_twice_keeps_previous_memory(server, embedder):
    r = read(TEXTS[:2], "q", sequence=[0, 1], llm=ChatClient(server.base_url, "malformed", backoff=0),
             embedder=embedder, memory_tokens=500, window_tokens=8000)
    assert len(r.failures) == len(r.steps) == 1 and r.steps[0].attempts == 2
    assert "malformed reply" in r.steps[0].error
    assert r.memory == {"conclusion": "", "open_questions": [], "evidence": []}
    assert len(server.requests) == 3  # two worker attempts, then the manager


def test_parse_memory():
    assert parse_memory('```json\n{"conclusion": "x", "open_questions": [], "evidence": []}\n```')["conclusion"] == "x"
    with pytest.raises(ValueError):
        parse_memory("no json here")
    with pytest.raises(ValueError):
        parse_memory('{"conclusion": 3}')


def test_keep_best_is_order_dependent():
    # budget 10: h (0.9, 8 tokens) evicts x (0.5, 3) first; g (0.95, 5) then evicts h, but x is gone.
    h, x, g = (0.9, 8, 1), (0.5, 3, 2), (0.95, 5, 3)
    first = keep_best([h, x], 10)
    assert first == [h]
    assert keep_best(first + [g], 10) == [g]
    assert keep_best([h, x, g], 10) == [g, x]  # seeing everything at once keeps x


def test_extractive_reader(embedder):
    chunks = [Chunk(id=i, text=t, source="doc.txt", index=i, start=100 * i, end=100 * i + len(t))
              for i, t in enumerate(["Ships carry cargo. The harbour was quiet.",
                                     "The blue whale is the largest animal. It eats krill.",
                                     "Sailors sing songs at night."])]
    r = read(chunks, "What is the largest animal?", strategy="document", embedder=embedder, memory_tokens=16)
    best = r.memory["evidence"][0]
    assert best["quote"] == "The blue whale is the largest animal."
    assert (best["source"], best["start"], best["end"]) == ("doc.txt", 100, 100 + len(best["quote"]))
    assert sum(len(embedder.tokenizer.encode(e["quote"], add_special_tokens=False).ids)
               for e in r.memory["evidence"]) <= 16
    assert r.order == [0, 1, 2] and r.reader == "extractive" and r.strategy == "document"
    doc = r.to_dict()
    assert doc["answer"] == r.answer and doc["failures"] == 0 and "memory" not in doc["steps"][0]
    assert set(doc["timings"]) == {"order_s", "read_s", "answer_s", "total_s"}
    assert set(r.peak_memory_mb) in ({"order", "read", "answer"}, set()) and doc["memory_mb"] == r.peak_memory_mb
    assert all(mb > 0 for mb in r.peak_memory_mb.values())
    # The order it read in comes with its tree; the chunks with their provenance.
    assert r.ordered is not None and r.ordered.order.tolist() == r.order and r.ordered.strategy == "document"
    assert r.items == chunks
    given = read(chunks, "What is the largest animal?", sequence=[2, 0], embedder=embedder, memory_tokens=16)
    assert given.order == [2, 0] and given.ordered is None and given.strategy == "given"


@pytest.mark.parametrize("kwargs, message", [
    ({"sequence": [0, 0]}, "distinct chunk indices"),
    ({"sequence": [5]}, "distinct chunk indices"),
    ({"memory_tokens": 4}, "memory_tokens must be >= 16; got 4"),
    ({"strategy": "zigzag"}, "strategy must be one of"),
    ({"prompts": {"wroker": "x"}}, r"prompts keys must be among .*\['wroker'\]"),
])
def test_bad_input(embedder, kwargs, message):
    with pytest.raises(ValueError, match=message):
        read(["a", "b"], "q", embedder=embedder, **kwargs)


def test_window_too_small(server, embedder):
    with pytest.raises(ValueError, match="window_tokens=300 leaves"):
        read(["a"], "q", llm=ChatClient(server.base_url, "memory"), embedder=embedder, memory_tokens=200,
             window_tokens=300)


def test_sentences_run_across_hard_line_breaks_but_not_across_paragraphs_or_headings():
    from chunktree.engine.read.extractive import split_sentences

    text = ("# Why a loaf does not rise\n\nA loaf that stays flat was proofed wrongly. Under-proofed dough has\n"
            "not made enough gas and tears open.\nA weak starter slows it down.\n- a list item\n1. a numbered one")
    got = [text[a:b] for a, b in split_sentences(text)]
    assert got == ["# Why a loaf does not rise", "A loaf that stays flat was proofed wrongly.",
                   "Under-proofed dough has\nnot made enough gas and tears open.", "A weak starter slows it down.",
                   "- a list item", "1. a numbered one"]
    windows = text.replace("\n", "\r\n")  # a Windows text file's line breaks
    assert [windows[a:b] for a, b in split_sentences(windows)] == [s.replace("\n", "\r\n") for s in got]


def test_a_dot_that_starts_a_name_in_code_or_markup_does_not_end_a_sentence():
    """``.venv``, ``.gz``, reStructuredText's ``:attr:`.Pool``` and Python's ``types.__all__`` are
    names, not sentence ends."""
    from chunktree.engine.read.extractive import split_sentences

    text = ("For the driver's own connection, call the\n:attr:`.PoolProxiedConnection.dbapi_connection` attribute "
            "on that. Run `.venv/bin/python` on the `.gz` file (\".tar\" too). It unpacks. Added BIGINT to "
            "types.__all__ and cleared self._cache too.")
    got = [text[a:b] for a, b in split_sentences(text)]
    assert got == ["For the driver's own connection, call the\n:attr:`.PoolProxiedConnection.dbapi_connection` "
                   "attribute on that.", "Run `.venv/bin/python` on the `.gz` file (\".tar\" too).", "It unpacks.",
                   "Added BIGINT to types.__all__ and cleared self._cache too."]


def test_an_end_mark_inside_inline_code_or_a_role_does_not_end_a_sentence():
    """A "?" or "!" in a role's title or a code span is part of the name; after the span, it ends
    the sentence as usual."""
    from chunktree.engine.read.extractive import split_sentences

    text = ("For the changes, see :doc:`What's New in SQLAlchemy 2.1? <changelog/whatsnew_21>` for details. "
            "The ``re.match(r\"a?b!\")`` call matches. Run `make`! Done.")
    got = [text[a:b] for a, b in split_sentences(text)]
    assert got == ["For the changes, see :doc:`What's New in SQLAlchemy 2.1? <changelog/whatsnew_21>` for details.",
                   "The ``re.match(r\"a?b!\")`` call matches.", "Run `make`!", "Done."]


def test_a_sentence_in_brackets_ends_where_they_close_and_a_code_block_is_one_sentence():
    from chunktree.engine.read.extractive import split_sentences

    text = ("(Search tools do not exist in print.) The second reason is teaching. Run it (e.g. now.) and stop.\n\n"
            "```console\n$ make test\nran 3 tests.\n```\nThat is all.")
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "(Search tools do not exist in print.)", "The second reason is teaching.", "Run it (e.g. now.) and stop.",
        "```console\n$ make test\nran 3 tests.", "```", "That is all."]


def test_a_man_pages_name_line_is_quoted_and_a_like_fragment_elsewhere_is_not(embedder):
    """The NAME line ("gzip, gunzip, zcat - compress or expand files") is a man page's own summary:
    lower case and without an end mark, it is still quoted, only under the NAME heading."""
    page = ("GZIP(1)\n\nNAME\n\ngzip, gunzip, zcat - compress or expand files\n\nSYNOPSIS\n\ngzip [ -cdfhklLnNrtvV19 ] "
            "[ name ... ]\n\nDESCRIPTION\n\nGzip reduces the size of the named files using Lempel-Ziv coding.\n")
    notes = "See also:\n\ngzip_levels - compress files faster or smaller\n"
    chunks = [Chunk(id=i, text=t, source=f"{i}.txt", index=0, start=0, end=len(t)) for i, t in enumerate((page, notes))]
    answer = read(chunks, "What does gzip do to files?", embedder=embedder, memory_tokens=200).answer.splitlines()
    assert "gzip, gunzip, zcat - compress or expand files" in answer
    assert not any("gzip_levels" in line for line in answer)


def test_the_extractive_answer_reads_whole_sentences_once(embedder):
    """Chunks as a real folder gives them: an reStructuredText title with its underline, list markers,
    hard-wrapped lines, overlapping chunks that share a sentence, the same sentence in two files, and
    chunks cut in the middle of a sentence."""
    from chunktree.engine.read.extractive import plain

    rbash = ("6.10 The Restricted Shell\n=========================\n\nIf Bash is started with the name rbash, the\n"
             "shell becomes restricted. A restricted shell may not change directories with cd.\n"
             "It may not set or unset the values of SHELL, PATH or ENV.\n")
    news = ("a.  A restricted shell may not change directories with cd.\nb.  Restricted shells can no longer "
            "redirect from /dev/tcp, since the kernel calls make those descriptors read-write.\n")
    cut = len(rbash) // 2 + 7  # the second chunk starts inside a sentence and overlaps the first
    texts = [(rbash[:cut + 30], "RBASH", 0), (rbash[cut:], "RBASH", cut), (news, "NEWS", 0),
             ("the first chunk's sentence ends here. Restricted mode forbids changing PATH in the restricted "
              "shell and the last sentence of this chunk is cut in the mid", "COMPAT", 500)]
    chunks = [Chunk(id=i, text=t, source=src, index=i, start=start, end=start + len(t))
              for i, (t, src, start) in enumerate(texts)]
    docs = {"RBASH": rbash, "NEWS": news}
    r = read(chunks, "What may a restricted shell not do?", strategy="document", embedder=embedder, memory_tokens=400)
    lines = r.answer.splitlines()
    assert lines and len(lines) == len({line.casefold() for line in lines})  # no duplicates
    assert "A restricted shell may not change directories with cd." in lines  # in RBASH and NEWS, once
    for line in lines:
        assert "===" not in line and not line.startswith(("a.", "b.", "#")) and "\n" not in line
        assert line[0].isupper() and line[-1] in ".!?:;", line  # whole sentences, no tails or cut ends
    for item in r.memory["evidence"]:  # each item says where it is: the quote is the source's own text
        assert {"source", "start", "end", "chunk"} <= set(item)
        if item["source"] in docs:
            assert docs[item["source"]][item["start"]:item["end"]] == item["quote"]
    assert [plain(e["quote"]) for e in r.memory["evidence"]] == lines


def test_read_prints_how_much_evidence_it_shows(tmp_path, capsys):
    from chunktree.apps.cli.main import main

    assert main(["--no-progress", "read", "examples/notes", "--extractive", "--no-cache", "-q", "Why does a loaf "
                 "not rise?", "--evidence", "2"]) == 0
    out = capsys.readouterr().out
    found = len(out.split("evidence in memory")[1].splitlines()) - 1
    assert "(2 of " in out and found == 2
    assert "#chunk id and [start:end] character offsets count from 0" in out
    (tmp_path / "frag.md").write_text("# Title\n\nshort bit\n", encoding="utf-8")
    assert main(["--no-progress", "read", str(tmp_path / "frag.md"), "--extractive", "--no-cache", "-q", "what?"]) == 0
    assert "answer:\n(no whole sentence in the chunks to quote" in capsys.readouterr().out
    assert main(["read", "examples/notes", "--extractive", "--evidence", "-1"]) == 2
    assert "argument --evidence: must be >= 0; got -1" in capsys.readouterr().err


def test_a_read_stops_once_the_endpoint_fails_requests_in_a_row(server, embedder, tmp_path):
    """An endpoint that is down costs a few requests, not retries on every step of a long read: the
    first step's request is retried, the next two get one attempt each, then the read stops."""
    from chunktree.engine.read.llm import LLMUnavailable

    client = ChatClient(server.base_url, "500", backoff=0, retries=3, max_failed_requests=3)
    with pytest.raises(LLMUnavailable, match="failed 3 requests in a row; last: HTTP 500"):
        read(TEXTS, "Where did the whale swim?", sequence=list(range(12)), llm=client, embedder=embedder,
             memory_tokens=200, window_tokens=900, trace=tmp_path / "trace.jsonl")
    assert len(server.requests) == 4 + 1 + 1
    assert not (tmp_path / "trace.jsonl").exists()  # a read that stopped leaves no half trace


def test_a_quoted_sentence_keeps_the_list_it_introduces_and_boilerplate_and_holes_are_not_quoted(embedder):
    """A man page's restricted-shell section as the man reader gives it (each item a bulleted
    paragraph), a licence line, and a sentence with a hole where a reader lost inline code."""
    page = ("RESTRICTED SHELL\nA restricted shell is used to set up an environment more controlled than the "
            "standard shell.\nIt behaves identically to bash with the exception that the following are "
            "disallowed or not performed:\n\n• changing directories with cd\n\n• setting or unsetting the values "
            "of SHELL, PATH, HISTFILE, ENV, or BASH_ENV\n\n• specifying command names containing /\n\n"
            "These restrictions are enforced after any startup files are read.\n\n"
            "Copyright (C) 1989-2022 by the Free Software Foundation, Inc. All rights reserved.\n\n"
            "When restricted, the shell keeps the rules and its prompt uses the .\n")
    chunks = [Chunk(id=0, text=page, source="bash.1", index=0, start=0, end=len(page))]
    r = read(chunks, "What is not allowed in a restricted shell?", embedder=embedder, memory_tokens=400)
    intro = ("It behaves identically to bash with the exception that the following are disallowed or not performed:\n"
             "  • changing directories with cd\n"
             "  • setting or unsetting the values of SHELL, PATH, HISTFILE, ENV, or BASH_ENV\n"
             "  • specifying command names containing /")
    assert intro in r.answer
    assert "rights reserved" not in r.answer and "uses the ." not in r.answer
    quote = next(e for e in r.memory["evidence"] if e["quote"].startswith("It behaves"))
    assert page[quote["start"]:quote["end"]] == quote["quote"] and quote["quote"].endswith("containing /")
    asked = read(chunks, "Who holds the copyright of bash?", embedder=embedder, memory_tokens=400)
    assert "Copyright (C) 1989-2022 by the Free Software Foundation, Inc." in asked.answer


def test_an_option_described_under_its_tag_is_quoted_with_the_tag(embedder, tmp_path):
    """A page laid out as Asciidoctor lays out util-linux's (the tag, then the description indented
    under it with .RS): the quoted description names its option, as ``man`` shows the two. So does
    a description's second sentence after a first too short to quote (gzip's "-t --test Test.")."""
    from chunktree.engine.chunking import chunk_documents
    from chunktree.engine.documents import read_file

    page = tmp_path / "sched.1"
    page.write_text('.TH "SCHED" "1"\n.SH "OPTIONS"\n.sp\n\\fB\\-f\\fP, \\fB\\-\\-fifo\\fP\n.RS 4\n'
                    "Set scheduling policy to SCHED_FIFO (first in, first out).\n.RE\n.sp\n"
                    "\\fB\\-r\\fP, \\fB\\-\\-rr\\fP\n.RS 4\nSet scheduling policy to SCHED_RR (round-robin "
                    "scheduling).\n.RE\n.TP\n.B \\-t \\-\\-test\nTest. Check the policy of a running process, then quit.\n"
                    ".TP\n.B \\-v\nVerbose. Print each change to the policy as it is made.\n", encoding="utf-8")
    chunks = chunk_documents(read_file(page), embedder.tokenizer)
    answer = read(chunks, "How do I choose round-robin scheduling?", embedder=embedder, memory_tokens=100).answer
    assert "-r, --rr Set scheduling policy to SCHED_RR (round-robin scheduling)." in answer.splitlines()
    r = read(chunks, "How do I check the policy of a running process?", embedder=embedder, memory_tokens=100)
    assert "-t --test Test. Check the policy of a running process, then quit." in r.answer.splitlines()
    assert r.memory["evidence"]
    for quote in r.memory["evidence"]:  # each quote is its span of the chunk, tag included
        assert chunks[quote["chunk"]].text[quote["start"]:quote["end"]] == quote["quote"]


def test_a_quoted_code_block_is_shown_without_its_fence_lines(embedder):
    """A Markdown page's console block, quoted: its text, without the ```` ``` ```` lines."""
    page = ("# Stopping a run\n\nPress Ctrl-C and the run ends with one line:\n\n```console\nchunktree embed: "
            "interrupted; the vectors embedded so far are kept in the cache.\n```\n")
    chunks = [Chunk(id=0, text=page, source="embed.md", index=0, start=0, end=len(page))]
    r = read(chunks, "What does an interrupted embed print?", embedder=embedder, memory_tokens=200)
    assert "chunktree embed: interrupted; the vectors embedded so far are kept in the cache." in r.answer.splitlines()
    assert "```" not in r.answer


def test_a_quoted_sentence_shows_links_and_roles_as_the_rendered_page_does(embedder):
    """Markdown links and images, reStructuredText links and Sphinx roles read as their text (a
    name of code in backticks); a code span keeps what looks like a link; the quote in memory
    stays the source's span."""
    rst = ("Pooling\n=======\n\nTo test each connection before use, pass :paramref:`~.create_engine.pool_pre_ping` "
           "to :func:`.create_engine`, see :ref:`the pool\nguide <pool_disconnects>` and :pep:`249`.\n")
    md = ("# Install\n\nThe pool checks each connection before it is handed out when pre-ping is set in "
          "[the engine options](engines.md#pre-ping \"Engines\") or `opts[1](x)` as ![the diagram](pool.png) "
          "shows and `the FAQ <https://example.org/faq>`_ says.\n")
    chunks = [Chunk(id=0, text=rst, source="pooling.rst", index=0, start=0, end=len(rst)),
              Chunk(id=1, text=md, source="install.md", index=0, start=0, end=len(md))]
    r = read(chunks, "How do I test each connection in the pool before it is used?", embedder=embedder,
             memory_tokens=200)
    lines = r.answer.splitlines()
    assert ("To test each connection before use, pass `pool_pre_ping` to `create_engine`, see the pool guide "
            "and PEP 249.") in lines
    assert ("The pool checks each connection before it is handed out when pre-ping is set in the engine options "
            "or `opts[1](x)` as the diagram shows and the FAQ says.") in lines
    for quote in r.memory["evidence"]:
        assert chunks[quote["chunk"]].text[quote["start"]:quote["end"]] == quote["quote"]


def test_a_word_the_question_names_finds_its_sentence_among_sentences_on_the_same_subject(embedder):
    """Six sentences about connection pools; the question names "pre-ping", which one of them
    holds. The embedding ranks them alike (without the words' match another sentence is kept);
    the sentence's BM25 match with the question's words puts it first."""
    from chunktree.engine.read.extractive import Sentences, lexical_index, lexical_scores

    page = ("# Connection pools\n\nA connection pool keeps database connections open for reuse. "
            "The pool hands out a connection when the application asks for one. "
            "Connections return to the pool when the application is done with them. "
            "A pool that has no connection left waits until one comes back. "
            "The pessimistic approach emits a test statement at the start of each checkout, named pre-ping. "
            "Pool size limits how many connections are open at once.\n")
    chunks = [Chunk(id=0, text=page, source="pooling.md", index=0, start=0, end=len(page))]
    r = read(chunks, "What is the pre-ping of a pool?", embedder=embedder, memory_tokens=25)
    assert r.answer.splitlines()[0] == ("The pessimistic approach emits a test statement at the start of each "
                                        "checkout, named pre-ping.")
    sentences = Sentences.of([page], embedder)
    index = lexical_index(sentences, [page])
    lexical = lexical_scores(index, "What is the pre-ping of a pool?")
    assert lexical.max() == 1.0 and lexical.min() >= 0.0
    assert lexical_scores(index, "Which whales did Ahab hunt?").tolist() == [0.0] * len(lexical)


def test_a_directive_line_is_no_part_of_a_sentence_and_closing_markup_stays_with_its_sentence():
    """reStructuredText's ``.. warning::`` line does not start the sentence under it, and the
    ``**`` or ``*`` that closes right after a sentence's end belongs to that sentence, not the next."""
    from chunktree.engine.read.extractive import split_sentences

    text = (".. warning::\n    **Do not reveal the secret key when you commit code.**\n\nA key should be *as random "
            "as possible.* Then use \"it.\" Done.")
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "**Do not reveal the secret key when you commit code.**", "A key should be *as random as possible.*",
        "Then use \"it.\"", "Done."]


def test_a_wrapped_line_that_starts_with_an_option_goes_on_the_sentence():
    """Hard-wrapped text whose next line starts with "-d" (not a list item: no space after the
    dash) is one sentence; "- item" and "• item" lines are items."""
    from chunktree.engine.read.extractive import split_sentences

    text = ("Compressed files are restored using ‘gzip\n-d’ or ‘gunzip’.  A name that does not fit is made legal.\n"
            "- an item\n• another item")
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "Compressed files are restored using ‘gzip\n-d’ or ‘gunzip’.", "A name that does not fit is made legal.",
        "- an item", "• another item"]
