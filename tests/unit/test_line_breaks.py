"""No line of the product starts with a binary operator (pycodestyle's W503).

ansible-test's pep8 ignores W503, but galaxy-importer's Automation Hub profile runs flake8 with it and warns, and a
warning fails scripts/publish-check.sh (test_publish.py, in the integration tier): this test says it in seconds, in
the unit tier. An operator that ends the line before instead (W504) is what the product writes."""

import glob
import io
import os
import tokenize

import pytest

from tests.support.paths import REPO

SOURCES = sorted(glob.glob(os.path.join(REPO, 'plugins', '**', '*.py'), recursive=True) +
                 glob.glob(os.path.join(REPO, 'extensions', '**', '*.py'), recursive=True))


def _binary(token):
    """pycodestyle's test: an operator token, or and/or, but not a bracket, a separator, '=', '%' or '~'."""
    return (token.type == tokenize.OP or token.string in ('and', 'or')) and token.string not in '()[]{},:.;@=%~'


def breaks_before_operators(text):
    """The lines (numbers) that continue a line broken inside brackets with a binary operator first, as pycodestyle's
    W503 finds them (a break by a backslash is not one; after an operator it is a unary one)."""
    found, previous, broken = [], None, False
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            continue
        if token.type == tokenize.NL:
            broken = True
            continue
        if token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            previous, broken = None, False
            continue
        after_operand = previous is not None and previous.string not in '([{,;' and not _binary(previous)
        if broken and after_operand and _binary(token):
            found.append(token.start[0])
        previous, broken = token, False
    return found


def test_the_reader_finds_a_break_before_an_operator():
    assert breaks_before_operators('x = (a\n     and b)\n') == [2]
    assert breaks_before_operators('x = (a and\n     b)\n') == []
    assert breaks_before_operators('x = [\n    -1,\n]\n') == []  # a unary minus is no binary operator
    assert breaks_before_operators('x = (a and\n     -b < c)\n') == []
    assert breaks_before_operators('if a:\n    b = 1\nelse:\n    b = 2\n') == []
    assert breaks_before_operators('x = a \\\n    and b\n') == []  # a backslash: pycodestyle does not see a break


@pytest.mark.parametrize('path', SOURCES, ids=lambda path: os.path.relpath(path, REPO))
def test_no_line_starts_with_a_binary_operator(path):
    with open(path) as handle:
        assert breaks_before_operators(handle.read()) == []
