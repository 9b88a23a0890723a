"""One check of a number setting against its limits (_types.in_range), and one way of saying the range."""

import glob
import os

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._types import duration, in_range, range_words
from tests.support.paths import REPO

CLOSED = (0, 60, True)   # 0 allowed
OPEN = (0, 1, False)     # 0 not allowed


@pytest.mark.parametrize('value, limits, strings, want', [
    (0, CLOSED, False, 0.0),
    (60, CLOSED, False, 60.0),
    (60.5, CLOSED, False, None),
    (-0.1, CLOSED, False, None),
    (0, OPEN, False, None),
    (0.001, OPEN, False, 0.001),
    (1, OPEN, False, 1.0),
    (float('nan'), CLOSED, False, None),
    (float('inf'), (0, float('inf'), True), False, None),
    (float('-inf'), CLOSED, False, None),
    (True, CLOSED, False, None),          # a boolean is never a number
    (True, CLOSED, True, None),
    (False, CLOSED, True, None),
    ('5', CLOSED, False, None),           # a module's value is typed
    ('5', CLOSED, True, 5.0),             # a template's is a string
    (' 7.5 ', CLOSED, True, 7.5),
    ('nan', CLOSED, True, None),
    ('inf', CLOSED, True, None),
    ('soon', CLOSED, True, None),
    ('9' * 65, (0, float('1e100'), True), True, None),  # no unbounded parse of a huge string
    (None, CLOSED, True, None),
    ([5], CLOSED, True, None),
    ({'a': 1}, CLOSED, True, None),
])
def test_in_range(value, limits, strings, want):
    assert in_range(value, limits, strings=strings) == want


@pytest.mark.parametrize('limits, at_least, want', [
    (CLOSED, 'at least', 'at least 0 and at most 60'),
    (OPEN, 'at least', 'greater than 0 and at most 1'),
    ((1, 100000, True), 'from', 'from 1 and at most 100000'),
])
def test_range_words(limits, at_least, want):
    assert range_words(limits, at_least=at_least) == want


def test_no_plugin_types_the_range_check_again():
    """The bounds test and the words of a range are written once, in _types (every module, filter and unit
    that checks a number setting calls in_range)."""
    again = []
    for path in glob.glob(os.path.join(REPO, 'plugins', '**', '*.py'), recursive=True):
        if path.endswith(os.path.join('module_utils', '_types.py')):
            continue
        with open(path) as handle:
            text = handle.read()
        for spelled in ("'at least' if closed", "'greater than'", 'not low <=', 'value < low'):
            if spelled in text:
                again.append((os.path.relpath(path, REPO), spelled))
    assert again == []


@pytest.mark.parametrize('seconds, want', [
    (0, '0s'), (59.4, '59s'), (59.6, '1m00s'), (725, '12m05s'), (3600, '1h00m'), (12000, '3h20m'),
])
def test_duration(seconds, want):
    assert duration(seconds) == want
