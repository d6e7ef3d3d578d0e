"""The user's pages: the API reference covers the public API, the README stays a short guide, and
no page narrates the project's own history; nor does any comment or docstring of the code."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import chunktree

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_api_reference_documents_every_public_name():
    documented = set(re.findall(r"^::: chunktree\.(\w+)$", (ROOT / "docs" / "api.md").read_text(), re.M))
    assert set(chunktree.__all__) <= documented, sorted(set(chunktree.__all__) - documented)


def test_the_readme_is_a_short_guide():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_tells_the_projects_history(page):
    text = page.read_text(encoding="utf-8").lower()
    for phrase in ("one-off", "earlier session", "earlier run", "used to say", "before this change",
                   "before this session", "the code before", "previous chunker"):
        assert phrase not in text, f"{page.name} says {phrase!r}"


# What a lab note says: a timing, a speed ratio, the CPU it ran on, a profiler's share, a commit, an
# earlier version. Text in ``inline code`` (an example of the output) is not read.
LAB_NOTE = re.compile(r"py-spy|\bXeon\b|\bEPYC\b|\bcommits? [0-9a-f]{7}|\b\d[\d,]*(\.\d+)? ?(s|ms|µs|ns)\b"
                      r"|\b\d+(\.\d+)?x (faster|slower|the)\b"
                      r"|\b(used before|before this change|earlier version|earlier run|one-off)\b", re.I)


def _comments_and_docstrings(path):
    """(line, text) of every comment and docstring line of a module."""
    source = path.read_text(encoding="utf-8")
    lines = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                lines += [(node.body[0].lineno + i, line) for i, line in enumerate(doc.splitlines())]
    return lines


def test_no_comment_or_docstring_quotes_a_timing_or_the_projects_history():
    """Figures and history live in docs/benchmarks.md, results files and commit messages; the
    code says why in a line and points at the benchmark."""
    notes = [f"{path.relative_to(ROOT)}:{line}: {text.strip()}" for path in sorted((ROOT / "chunktree").rglob("*.py"))
             for line, text in _comments_and_docstrings(path) if LAB_NOTE.search(re.sub(r"``.*?``", "", text))]
    assert not notes, "\n".join(notes)


def test_the_lab_note_check_finds_what_it_looks_for():
    """The check above, on lines of the kinds it must refuse and of the kinds it must let pass."""
    for note in ("took 2.77 s in blocks of 8,192 rows", "(Intel Xeon, AMX)", "27% of the samples (py-spy)",
                 "at commits ff12dfa and 9a17339", "3.6x faster than the argsort", "8 ms of a 0.2 s join",
                 "semantic-text-splitter, used before, re-tokenises"):
        assert LAB_NOTE.search(note), note
    for fine in ("``embed: 1.2M/3.0M char (40%), 31 s, about 47 s left``", "10 million float16 rows take 7.7 GB",
                 "the request was abandoned", "a timeout in seconds", "faster than an argsort by target"):
        assert not LAB_NOTE.search(re.sub(r"``.*?``", "", fine)), fine


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_of_a_page_exists(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"


def test_each_integration_example_imports_only_what_its_extra_installs():
    """The integrations page's examples, each under the `pip install ".[EXTRA]"` line that precedes it:
    every module they import comes from chunktree or from a distribution that EXTRA requires."""
    from importlib.metadata import packages_distributions

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    distributions = packages_distributions()
    page = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    checked = 0
    for extra, code in re.findall(r'pip install "\.\[([\w-]+)\]".*?\n```python\n(.*?)```', page, re.S):
        wanted = {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower() for r in extras[extra]}
        for module in re.findall(r"^(?:from|import) (\w+)", code, re.M):
            if module != "chunktree":
                dists = {d.lower() for d in distributions.get(module, [])}
                assert dists & wanted, f"{extra}: the example imports {module} ({dists}), which {sorted(wanted)} lack"
                checked += 1
    assert checked >= 4
