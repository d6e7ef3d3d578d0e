"""What the CLI writes: never over one of its inputs, never over a file it was not asked to replace
(--force), every error naming the option typed, and out-of-range values refused or clamped aloud."""

import json
import logging
import os

import pytest


def test_embed_does_not_write_its_chunks_over_its_input(tmp_path, cli):
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"text": "my original"}\n', encoding="utf-8")
    r = cli("embed", mine, "-o", tmp_path / "mine.npy", "--no-cache")
    assert r.returncode == 2
    assert f"-o {tmp_path / 'mine.npy'}: its chunks file {mine} is one of the inputs, {mine}" in r.stderr
    assert mine.read_text(encoding="utf-8") == '{"text": "my original"}\n'
    assert not (tmp_path / "mine.npy").exists()


def test_an_output_inside_an_input_folder_is_named_as_an_input(tmp_path, cli):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Bread\nFlour, water and salt make a loaf of bread.\n", encoding="utf-8")
    (notes / "out.jsonl").write_text('{"text": "a record of mine"}\n', encoding="utf-8")
    r = cli("embed", notes, "-o", notes / "out.npy", "--no-cache")
    assert r.returncode == 2 and "is one of the inputs" in r.stderr and "(inside the input folder)" in r.stderr
    assert (notes / "out.jsonl").read_text(encoding="utf-8") == '{"text": "a record of mine"}\n'


def test_an_existing_output_is_replaced_only_with_force(tmp_path, cli):
    (tmp_path / "a.txt").write_text("Whales are the largest animals that ever lived.", encoding="utf-8")
    out = tmp_path / "v.npy"
    out.write_bytes(b"someone else's file")
    r = cli("embed", tmp_path / "a.txt", "-o", out, "--no-cache")
    assert r.returncode == 2 and "exists, and chunktree replaces no file unasked" in r.stderr and "--force" in r.stderr
    assert out.read_bytes() == b"someone else's file"
    r = cli("embed", tmp_path / "a.txt", "-o", out, "--no-cache", "--force")
    assert r.returncode == 0 and out.read_bytes()[:6] == b"\x93NUMPY"


def _existing(tmp_path, name):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("precious", encoding="utf-8")
    return path


# Each command's outputs, each already there: refused before any work, the file untouched.
@pytest.mark.parametrize("command, output", [
    (["order", "examples/notes", "--no-cache", "--html"], "tree.html"),
    (["select", "examples/notes", "-k", "2", "--no-cache", "--png"], "map.png"),
    (["read", "examples/notes", "--extractive", "--no-cache", "--trace"], "trace.jsonl"),
    (["eval-order", "examples/chats.jsonl", "--no-cache", "--json"], "eval.json"),
    (["eval-track", "examples/chats.jsonl", "--no-cache", "--json"], "track.json"),
    (["train-track", "examples/chats.jsonl", "--no-cache", "-o"], "decider.npz"),
    (["scale", "--sizes", "100", "--no-plots", "-o"], "report/scale.json"),
    (["export", "examples", "-o"], "model.onnx"),
])
def test_every_command_refuses_an_existing_output(tmp_path, cli, command, output):
    path = _existing(tmp_path, output)
    r = cli(*command, path.parent if output.startswith("report/") else path)
    assert r.returncode == 2 and "exists, and chunktree replaces no file unasked" in r.stderr, r.stderr
    assert path.read_text(encoding="utf-8") == "precious"


def test_track_save_refuses_an_existing_conversation_file(tmp_path, cli):
    dialogue = tmp_path / "d.jsonl"
    dialogue.write_text(json.dumps({"user": "How do I feed a sourdough starter?", "conversation": "bread"}) + "\n",
                        encoding="utf-8")
    saved = _existing(tmp_path, "forests/bread.json")
    r = cli("track", dialogue, "--save", tmp_path / "forests", "--no-cache")
    assert r.returncode == 2 and "--save (conversation 'bread') " in r.stderr and "exists" in r.stderr
    assert saved.read_text(encoding="utf-8") == "precious"
    r = cli("track", dialogue, "--save", tmp_path / "forests", "--no-cache", "--force")
    assert r.returncode == 0 and json.loads(saved.read_text(encoding="utf-8"))["format"] == "chunktree-forest"


@pytest.mark.parametrize("args, message", [
    (["order", "examples/notes", "-q", "hi", "--neighbours", "0"], "argument --neighbours: must be >= 1; got 0"),
    (["order", "examples/notes", "--root", "99"], "--root (a chunk index) must be in [0, 6]; got 99"),
    (["order", "examples/notes", "--overlap", "500"], "--overlap must be in [0, 253]; got 500"),
    (["order", "examples/notes", "--chunk-tokens", "2"], "--chunk-tokens must be > 2"),
    (["select", "examples/notes", "-k", "9"], "-k must be in [1, n_chunks=7]; got 9"),
    (["select", "examples/notes", "-k", "2", "--seed", "99999999999999999999"], "--seed must be in [0, "),
    (["read", "examples/notes", "--extractive", "--memory-tokens", "3"], "argument --memory-tokens: must be >= 16"),
    (["serve", "--port", "70000"], "argument --port: must be in [1, 65535]; got 70000"),
    (["serve", "--max-wait-ms", "-1"], "argument --max-wait-ms: must be a finite number >= 0"),
    (["serve", "--queue-timeout", "nan"], "argument --queue-timeout: must be a finite number > 0"),
    (["train-track", "x.jsonl", "-o", "d.npz", "--threshold", "2"], "argument --threshold: must be a finite number >= 0 "
                                                                    "and <= 1"),
    (["train-track", "x.jsonl", "-o", "d.npz", "--seed", "-1"], "argument --seed: must be >= 0; got -1"),
    (["eval-track", "x.json", "--lengths", "1"], "argument --lengths: must be >= 2; got 1"),
    (["order", "examples/notes", "--model", "nope"], "--model must be one of"),
    (["read", "examples/notes", "--extractive", "--embed-model", "nope"], "--embed-model must be one of"),
])
def test_every_error_names_the_option_typed(cli, args, message):
    r = cli(*args, "--no-cache") if args[0] != "serve" else cli(*args)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_per_cluster_past_the_clusters_sizes_says_what_it_gives(cli):
    r = cli("select", "examples/notes", "-k", "2", "--per-cluster", "99", "--no-cache")
    assert r.returncode == 0
    assert "up to 99 representative(s) each: --per-cluster 99 is more than 2 of the clusters hold" in r.stdout
    shown = [line for line in r.stdout.splitlines() if line.startswith("   #")]
    assert len(shown) == 7  # every chunk, once


def test_more_neighbours_than_chunks_are_clamped_aloud(cli, caplog):
    with caplog.at_level(logging.WARNING):
        r = cli("order", "examples/notes", "--method", "sparse", "--neighbours", "50", "--format", "json", "--no-cache")
    assert r.returncode == 0 and json.loads(r.stdout)["params"]["k"] == 6
    assert "k=50 neighbours asked for, but 7 chunks have at most 6 others each: using k=6" in caplog.text


# -- the hostile round: links planted at temporary names, one path for two outputs, full disks --

def test_a_link_planted_where_a_temporary_file_went_is_never_written_through(tmp_path, cli):
    """Earlier versions wrote OUT.jsonl.partial and OUT.npy.partial through whatever was there."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    (tmp_path / "a.txt").write_text("Whales are the largest animals that ever lived.", encoding="utf-8")
    for name in ("out1.jsonl.partial", "out1.npy.partial", ".out1.npy.partial", ".out1.jsonl.partial"):
        (tmp_path / name).symlink_to(victim)
    r = cli("embed", tmp_path / "a.txt", "-o", tmp_path / "out1.npy", "--no-cache")
    assert r.returncode == 0, r.stderr
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (tmp_path / "out1.jsonl").is_symlink() and (tmp_path / "out1.jsonl").read_text(encoding="utf-8")
    left = sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name)
    assert left == [".out1.jsonl.partial", ".out1.npy.partial", "out1.jsonl.partial", "out1.npy.partial"]


def test_force_replaces_a_link_at_the_output_not_its_target(tmp_path, cli):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    (tmp_path / "a.txt").write_text("Whales are the largest animals that ever lived.", encoding="utf-8")
    (tmp_path / "v.npy").symlink_to(victim)
    r = cli("embed", tmp_path / "a.txt", "-o", tmp_path / "v.npy", "--no-cache", "--force")
    assert r.returncode == 0, r.stderr
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (tmp_path / "v.npy").is_symlink() and (tmp_path / "v.npy").read_bytes()[:6] == b"\x93NUMPY"


@pytest.mark.parametrize("flags", [["--html", "twice.png", "--png", "twice.png"],
                                   ["--html", "twice.html", "--png", "./twice.html"]])
def test_one_path_for_two_outputs_is_refused_before_any_work(tmp_path, cli, flags):
    r = cli("order", "examples/notes", "-q", "bread", "--no-cache", *[tmp_path / f if "." in f else f for f in flags])
    assert r.returncode == 2
    assert "two outputs cannot share one path" in r.stderr and "--png" in r.stderr and "--html" in r.stderr
    assert not list(tmp_path.iterdir())


def test_a_picture_suffix_matplotlib_cannot_write_is_refused_before_any_work(tmp_path, cli):
    r = cli("order", "examples/notes", "-q", "bread", "--no-cache", "--png", tmp_path / "pic.jpgx")
    assert r.returncode == 2
    assert "pic.jpgx: a picture's suffix names its format; got 'jpgx', allowed:" in r.stderr and "png" in r.stderr
    assert "order:" not in r.stdout  # refused before the work, not after it


def test_a_device_is_not_an_output_even_with_force(tmp_path, cli):
    r = cli("order", "examples/notes", "-q", "bread", "--no-cache", "--html", "/dev/full", "--force")
    assert r.returncode == 2 and "--html /dev/full is not a regular file" in r.stderr


def test_a_full_disk_behind_stdout_is_one_line_not_a_traceback():
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "chunktree", "--no-progress", "order", "examples/notes", "-q", "bread",
                            "--no-cache", "--format", "json"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=300)
    assert r.returncode == 2, r.stderr
    assert "chunktree order: error: No space left on device" in r.stderr and "Traceback" not in r.stderr


def test_no_room_for_the_vectors_is_a_message_before_the_work_and_leaves_nothing(tmp_path):
    """The file size limit (RLIMIT_FSIZE) stands in for a full disk: the vectors' space is reserved
    before any embedding, so the run ends with a message instead of SIGBUS half way."""
    import subprocess
    import sys

    (tmp_path / "a.txt").write_text("Whales are the largest animals that ever lived. " * 50, encoding="utf-8")
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000)); from chunktree.apps.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "--no-progress", "embed", str(tmp_path / "a.txt"), "-o",
                        str(tmp_path / "o.npy"), "--no-cache"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "chunktree embed: error:" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_file_name_that_is_not_utf8_gives_valid_utf8_outputs(tmp_path, cli):
    folder = tmp_path / "n"
    folder.mkdir()
    with open(bytes(folder) + b"/bad\xff\xfe.md", "wb") as f:
        f.write(b"hello bread, flour and water")
    r = cli("embed", folder, "-o", tmp_path / "n.npy", "--no-cache")
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(line) for line in (tmp_path / "n.jsonl").read_bytes().decode("utf-8").splitlines()]
    assert row["source"].endswith("bad\\xff\\xfe.md")
    r = cli("order", folder, "-q", "bread", "--no-cache", "--format", "json")
    assert r.returncode == 0 and "bad\\\\xff\\\\xfe.md" in r.stdout


@pytest.mark.parametrize("change, message", [
    ({"text": 12345}, "field 'text' must be str; got 12345"),
    ({"start": "abc"}, "field 'start' must be int; got 'abc'"),
    ({"page": True}, "field 'page' must be int or null; got True"),
    ({"start": 9, "end": 3}, "0 <= start <= end; got 9, 3"),
    ({"colour": "blue"}, "unknown field(s) ['colour']"),
])
def test_a_chunks_file_with_wrong_types_is_named_by_line(tmp_path, cli, change, message):
    """The hostile round's NH-26: a number as ``text`` was a traceback, a string as ``start`` printed."""
    import numpy as np

    (tmp_path / "a.txt").write_text("Whales are the largest animals that ever lived.", encoding="utf-8")
    assert cli("embed", tmp_path / "a.txt", "-o", tmp_path / "x.npy", "--no-cache").returncode == 0
    rows = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()]
    (tmp_path / "x.jsonl").write_text("\n".join(json.dumps({**row, **change}) for row in rows) + "\n", encoding="utf-8")
    r = cli("order", "--embeddings", tmp_path / "x.npy")
    assert r.returncode == 2 and "x.jsonl:1: not a chunk row (" in r.stderr and message in r.stderr, r.stderr
    assert np.load(tmp_path / "x.npy").shape[0] == len(rows)


def test_track_save_is_refused_on_a_folder_another_process_writes(tmp_path, cli):
    import subprocess
    import sys

    (tmp_path / "d.jsonl").write_text('{"user": "Why did my loaf not rise?"}\n', encoding="utf-8")
    save = tmp_path / "save"
    save.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from chunktree.files import FolderLock; "
                               f"lock = FolderLock({str(save)!r}, 'chunktree serve'); print('held', flush=True); "
                               "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = cli("track", tmp_path / "d.jsonl", "--save", save)
        assert r.returncode == 2 and "is in use by chunktree serve (pid" in r.stderr
        assert sorted(p.name for p in save.iterdir()) == [".chunktree.lock"]
    finally:
        holder.communicate("", timeout=30)
    assert cli("track", tmp_path / "d.jsonl", "--save", save).returncode == 0


def test_a_link_planted_at_a_forests_old_temporary_name_is_not_written_through(tmp_path, cli):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    (tmp_path / "d.jsonl").write_text('{"conversation": "ok1", "user": "Why did my loaf not rise?"}\n',
                                      encoding="utf-8")
    save = tmp_path / "save"
    save.mkdir()
    (save / "ok1.json.tmp").symlink_to(victim)
    assert cli("track", tmp_path / "d.jsonl", "--save", save).returncode == 0
    assert victim.read_text(encoding="utf-8") == "precious"
    assert (save / "ok1.json").is_file() and not (save / "ok1.json").is_symlink()


# -- our own hostile round (OH-n in the note): outputs and options --

def test_oh19_20_outputs_that_cannot_be_files_are_named(tmp_path, cli):
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    r = cli("order", "examples/notes", "-q", "bread", "--no-cache", "--html", tmp_path / "afile" / "sub" / "x.html")
    assert r.returncode == 2 and "cannot create the folder" in r.stderr and "(Not a directory)" in r.stderr
    os.mkfifo(tmp_path / "fifo.html")
    r = cli("order", "examples/notes", "-q", "bread", "--no-cache", "--html", tmp_path / "fifo.html", "--force")
    assert r.returncode == 2 and "fifo.html is not a regular file" in r.stderr


def test_oh21_22_outputs_and_caches_in_folders_not_made_yet_are_made(tmp_path, cli):
    r = cli("embed", "examples/notes", "-o", tmp_path / "a" / "b" / "x.npy", "--cache", tmp_path / "c" / "d.sqlite")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a" / "b" / "x.jsonl").is_file() and (tmp_path / "c" / "d.sqlite").is_file()


def test_oh24_a_path_that_looks_like_an_option_after_the_double_dash(cli):
    r = cli("order", "--no-cache", "--", "-q")
    assert r.returncode == 2 and "error: -q: no such file or folder" in r.stderr


def test_oh25_a_query_of_only_invisible_characters_is_refused(cli):
    r = cli("order", "examples/notes", "--no-cache", "-q", "\u200b\u200d")
    assert r.returncode == 2 and "--query must hold visible text" in r.stderr


def test_oh26_a_sidecar_that_links_into_the_input_folder_is_refused(tmp_path, cli):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Bread\nFlour, water and salt make a loaf of bread.\n", encoding="utf-8")
    (tmp_path / "out.jsonl").symlink_to(notes / "a.md")
    r = cli("embed", notes, "-o", tmp_path / "out.npy", "--no-cache")
    assert r.returncode == 2 and "is one of the inputs" in r.stderr
    assert (notes / "a.md").read_text(encoding="utf-8").startswith("# Bread")


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_an_interrupted_embed_says_what_it_kept_and_the_rerun_resumes(tmp_path, cli, embedder, monkeypatch, stop):
    """Ctrl-C (or a SIGTERM, as `kill` or a job scheduler sends) in the middle of `embed`: one line
    and code 130 (143), no output file or temporary file left, the vectors committed so far (every
    256 texts) kept in the cache, and the same command then embeds only the rest."""
    import signal

    corpus = tmp_path / "notes"
    corpus.mkdir()
    for i in range(520):
        (corpus / f"{i:03d}.txt").write_text(f"Note {i}: the boat number {i} sailed at dawn.", encoding="utf-8")
    real, calls = embedder.embed, []

    def stopped(texts):
        calls.append(len(texts))
        if len(calls) > 2:
            if stop == "ctrl-c":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)  # the command's handler raises at once
        return real(texts)

    out, cache = tmp_path / "out" / "v.npy", tmp_path / "cache.sqlite"
    out.parent.mkdir()
    args = ["--no-progress", "embed", str(corpus), "-o", str(out), "--cache", str(cache)]
    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as m:
        m.setattr(embedder, "embed", stopped)
        r = cli(*args)
    assert r.returncode == {"ctrl-c": 130, "sigterm": 143}[stop] and r.stdout == "" and "Traceback" not in r.stderr
    assert signal.getsignal(signal.SIGTERM) is before  # the command's handler is gone with it
    how = {"ctrl-c": "interrupted", "sigterm": "terminated (SIGTERM)"}[stop]
    assert r.stderr.strip().splitlines()[-1] == (
        f"chunktree embed: {how}; no file was left half-written (one being written is removed); the 512 vector(s) "
        f"embedded are kept in the cache {cache}: the same command resumes from them")
    assert list(out.parent.iterdir()) == []
    r = cli(*args)
    assert r.returncode == 0 and "(8 embedded, 512 from cache" in r.stdout


def test_order_writes_its_order_as_npy_and_its_rows_as_jsonl_files(tmp_path, cli):
    import numpy as np

    x = np.random.default_rng(2).standard_normal((40, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = cli("order", "--embeddings", tmp_path / "x.npy", "--format", "json", "-o", tmp_path / "order.npy")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    saved = np.load(tmp_path / "order.npy")
    assert saved.dtype == np.int64 and saved.tolist() == doc["order"] and sorted(saved.tolist()) == list(range(40))
    r = cli("order", "--embeddings", tmp_path / "x.npy", "--top", "3", "-o", tmp_path / "rows.jsonl")
    assert r.returncode == 0 and f"wrote {tmp_path / 'rows.jsonl'}" in r.stderr
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    # --top limits what is printed, not the file
    assert [row["id"] for row in rows] == doc["order"] and [row["position"] for row in rows] == list(range(40))
    r = cli("order", "--embeddings", tmp_path / "x.npy", "-o", tmp_path / "order.csv")
    assert r.returncode == 2 and "the file's suffix says what it holds: .npy (the order), .json or .jsonl" in r.stderr
    assert not (tmp_path / "order.csv").exists()
