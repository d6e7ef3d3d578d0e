"""Emphasis as a rendered page shows it: the words without their marks. What a Markdown renderer
would also read as emphasis but plain text (man pages, shell examples, Python names) does not mean
so is left as written."""

import pytest

from chunktree.engine.markup import shown


@pytest.mark.parametrize("text, rendered", [
    ("_Black_ ignores previous formatting.", "Black ignores previous formatting."),
    ("This is **not related** to the `FromClause.c` attribute.", "This is not related to the `FromClause.c` attribute."),
    ("**WARNING**: this option is experimental.", "WARNING: this option is experimental."),
    ("converters run on initialization *and* on attribute setting.", "converters run on initialization and on "
                                                                     "attribute setting."),
    ("triggers activated (*after* this) run, *but* should *not*, as __bold words__ say.",
     "triggers activated (after this) run, but should not, as bold words say."),
    ('the *"quoted"* name', 'the "quoted" name'),
])
def test_emphasis_shows_its_words(text, rendered):
    assert shown(text) == rendered


@pytest.mark.parametrize("text", [
    "snake_case_name and __init__ and __main__.py",
    "2*3*4 and a *b*c",
    "*.py and *.txt files",
    "f(*args, **kwargs) and **kwargs or **options",
    "expansions of “*g*.h” starting with “-”",
    "-*- mode: python -*-",
    "see `_private_` and ``**kw**`` in code",
    "\\*not emphasis\\*",
    "* a list item, not emphasis*",
])
def test_what_is_not_emphasis_is_left_as_written(text):
    assert shown(text) == text
