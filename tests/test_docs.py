"""The user's pages: the API reference covers the public API, the README stays a short guide, and
no page narrates the project's own history."""

import re
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
