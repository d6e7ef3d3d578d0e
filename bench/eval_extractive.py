"""How often the extractive reader (``read`` without an LLM) quotes the sentence that answers a
question, on real documents nobody here wrote:

1. man pages as a system installs them (gzip, bash, ssh, tar, ssh-keygen, scp, chrt, taskset: GNU
   ``man``, BSD ``mdoc`` and Asciidoctor-made pages, read from ``/usr/share/man``), all of them as
   one corpus, with questions whose answer is a phrase of one page (``MAN_QUESTIONS``: a question
   is answered when the reader's answer holds the phrase; for a question about an option, whether
   the answer's line that holds the phrase also names the option);
2. SQuAD-Shifts (new Wikipedia articles, ``../shared/data``): each article is a corpus, and a
   question is answered when the reader's answer holds the sentence that holds the gold answer;
3. HotpotQA (the dev sample in ``../shared/data``, questions whose answer is not yes or no): each
   question's ten paragraphs are a corpus, and it is answered when the reader's answer holds the
   answer's words. Not used to choose ``LEXICAL_WEIGHT`` (1 and 2 were), so it checks the choice.

Each set is read twice in the run: by the default reader (512 memory tokens, query-only scores,
order ``chunktree.order``'s default) and by the same reader scoring sentences by similarity alone
(``LEXICAL_WEIGHT`` 0), the reference.

    python bench/eval_extractive.py [--limit 200]

Writes ``bench/results/eval_extractive.json``. Man pages not installed are left out, and said.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import record

from chunktree import EmbeddingCache
from chunktree.engine.chunking import chunk_documents
from chunktree.engine.documents import read_file
from chunktree.engine.inputs import default_embedder
from chunktree.engine.read import extractive, read
from chunktree.engine.read.extractive import LEXICAL_WEIGHT

SHARED = Path(os.environ.get("CHUNKTREE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
SQUAD = SHARED / "squad_shifts_new_wiki_v1.0.json"
HOTPOT = SHARED / "hotpotqa_dev_sample.jsonl"
MAN = Path("/usr/share/man/man1")
PAGES = ("gzip.1.gz", "bash.1.gz", "ssh.1.gz", "tar.1.gz", "ssh-keygen.1.gz", "scp.1.gz", "chrt.1.gz", "taskset.1.gz")
# (page, question, a phrase of the answer as the page words it, the option the answer is about or None)
MAN_QUESTIONS = (
    ("gzip.1.gz", "What happens to the original file when gzip compresses it, and how can I keep it?",
     "each file is replaced by one with the extension", None),
    ("gzip.1.gz", "How do I keep the input files when compressing?", "Keep (don't delete) input files", "-k"),
    ("gzip.1.gz", "How can gzip write to standard output and leave the files alone?",
     "Write output on standard output; keep original files unchanged", "-c"),
    ("gzip.1.gz", "How do I check that a compressed file is intact?", "Check the compressed file integrity", "-t"),
    ("gzip.1.gz", "What does the compression level digit control?",
     "Regulate the speed of compression using the specified digit", None),
    ("bash.1.gz", "What is not allowed in a restricted shell?", "changing directories with cd", None),
    ("bash.1.gz", "Which file does an interactive login shell read first?", "/etc/profile", None),
    ("bash.1.gz", "What does HISTSIZE set?", "The number of commands to remember in the command history", None),
    ("bash.1.gz", "What does the -e option of set do?", "Exit immediately if a pipeline", "-e"),
    ("ssh.1.gz", "How do I forward a local port to a remote host?",
     "Specifies that connections to the given TCP port or Unix socket on the local", "-L"),
    ("ssh.1.gz", "How do I turn off pseudo-terminal allocation?", "Disable pseudo-terminal allocation", "-T"),
    ("ssh.1.gz", "Where are the host keys of known hosts kept for a user?", "~/.ssh/known_hosts", None),
    ("ssh.1.gz", "How do I select the identity file for public key authentication?",
     "Selects a file from which the identity (private key) for public key authentication is read", "-i"),
    ("ssh-keygen.1.gz", "How do I choose the type of key to create?", "Specifies the type of key to create", "-t"),
    ("ssh-keygen.1.gz", "How do I change the passphrase of a private key?",
     "Requests changing the passphrase of a private key file instead of creating a new private key", "-p"),
    ("scp.1.gz", "How do I copy directories recursively with scp?", "Recursively copy entire directories", "-r"),
    ("tar.1.gz", "How do I list the contents of an archive?", "List the contents of an archive", "-t"),
    ("tar.1.gz", "How do I extract files from an archive?", "Extract files from an archive", "-x"),
    ("chrt.1.gz", "How do I set the round-robin scheduling policy?", "Set scheduling policy to SCHED_RR", "-r"),
    ("chrt.1.gz", "How do I set the runtime of a deadline task?",
     "Specifies runtime parameter for SCHED_DEADLINE policy", "-T"),
    ("taskset.1.gz", "How do I give the CPUs as a list of numbers rather than a bitmask?",
     "Interpret mask as numerical list of processors instead of a bitmask", "-c"),
    ("taskset.1.gz", "How do I set the affinity of every thread of a process?",
     "Set or retrieve the CPU affinity of all the tasks (threads) for a given PID", "-a"),
)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _sentence_at(context: str, start: int) -> str:
    """The sentence of ``context`` that holds the character ``start``: from the last sentence end
    before it to the next one (an end mark, with the quotes or brackets that close after it, before
    a space and a capital, a digit, a quote or a bracket)."""
    ends = [m.end() for m in re.finditer(r"[.!?][\"'”’)\]]*(?=\s+[A-Z0-9\"'“‘(])", context)]
    begin = max([e for e in ends if e <= start], default=0)
    end = min([e for e in ends if e > start], default=len(context))
    return _flat(context[begin:end])


def man_pages(embedder, cache) -> tuple[list[str], dict]:
    docs, missing = [], []
    for page in PAGES:
        if (MAN / page).exists():
            docs += read_file(MAN / page)
        else:
            missing.append(page)
    chunks = chunk_documents(docs, embedder.tokenizer)
    got, rows = 0, []
    for page, question, phrase, option in MAN_QUESTIONS:
        if page in missing:
            continue
        answer = read(chunks, question, embedder=embedder, cache=cache).answer
        quoted = next((_flat(a) for a in answer.splitlines() if _flat(phrase) in _flat(a)), None)
        hit = _flat(phrase) in _flat(answer)
        got += hit
        rows.append({"page": page, "question": question, "quoted": hit, "option": option,
                     "with_option": bool(option and quoted and re.search(rf"(?<![\w-]){re.escape(option)}\b", quoted)),
                     "lines": answer.count("\n") + 1})
    asked = len(rows)
    about = [r for r in rows if r["option"]]
    shown = sum(r["with_option"] for r in about)
    line = (f"man pages ({len(docs)} pages, {len(chunks)} chunks): the answer phrase quoted for {got} of {asked} "
            f"questions; of the {len(about)} about an option, quoted on one line with the option for {shown}")
    if missing:
        line += f" (not installed here, left out: {', '.join(missing)})"
    return [line], {"quoted": got, "questions": asked, "with_option": shown, "about_an_option": len(about),
                    "missing": missing, "rows": rows}


def squad(embedder, cache, limit: int) -> tuple[list[str], dict]:
    from chunktree.engine.documents import Document

    data = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    got = asked = 0
    for article in data:
        contexts = [p["context"] for p in article["paragraphs"]]
        chunks = chunk_documents([Document(article["title"], "\n\n".join(contexts), "text")], embedder.tokenizer)
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                if asked >= limit:
                    break
                gold = _sentence_at(p["context"], qa["answers"][0]["answer_start"])
                answer = _flat(read(chunks, qa["question"], embedder=embedder, cache=cache).answer)
                got += gold in answer
                asked += 1
        if asked >= limit:
            break
    return ([f"SQuAD-Shifts new-wiki: the gold answer's sentence quoted for {got} of {asked} questions "
             f"({got / max(asked, 1):.3f})"], {"quoted": got, "questions": asked})


def hotpot(embedder, cache) -> tuple[list[str], dict]:
    from chunktree.engine.documents import Document

    got = asked = 0
    for line in HOTPOT.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        answer = _flat(record["answers"][0]).lower()
        if answer in ("yes", "no"):
            continue
        docs = [Document(p["title"], p["text"], "text") for p in record["paragraphs"]]
        chunks = chunk_documents(docs, embedder.tokenizer)
        got += answer in _flat(read(chunks, record["question"], embedder=embedder, cache=cache).answer).lower()
        asked += 1
    return ([f"HotpotQA dev sample (held out): the answer quoted for {got} of {asked} questions "
             f"({got / max(asked, 1):.3f})"], {"quoted": got, "questions": asked})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200, help="SQuAD-Shifts questions (default %(default)s)")
    args = parser.parse_args()
    embedder, cache = default_embedder(), EmbeddingCache()
    t0 = time.perf_counter()
    lines, results = [], {}
    for weight, reading in ((LEXICAL_WEIGHT, "default"), (0.0, "similarity alone")):
        extractive.LEXICAL_WEIGHT = weight  # the reference: the same reader without the words' match
        for name, run in (("man pages", lambda: man_pages(embedder, cache)),
                          ("squad-shifts", lambda: squad(embedder, cache, args.limit)),
                          ("hotpotqa", lambda: hotpot(embedder, cache))):
            said, results.setdefault(reading, {})[name] = run()
            lines += [f"{reading} (LEXICAL_WEIGHT {weight}), {line}" for line in said]
            print("\n".join(lines[-len(said):]), flush=True)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    path = record.write("eval_extractive", record.title(__doc__, "eval_extractive"),
                        "python bench/eval_extractive.py " + " ".join(sys.argv[1:]), lines, results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
