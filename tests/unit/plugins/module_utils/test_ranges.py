"""One check of a number setting against its limits (_types.in_range), and one way of saying the range."""

import glob
import os
import re

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


# A number compared with a number in a template: `x | float > 0`, `x | int <= 3600`, `0 < x | float`.
TEMPLATE_RANGE = re.compile(r'\|\s*(?:float|int)\s*(?:<=|>=|<|>)\s*-?\d|-?\d\s*(?:<=|>=|<|>)\s*[\w.]+\s*\|\s*(?:float|int)')


def _yaml_files():
    for pattern in ('roles/**/*.yml', 'roles/**/*.j2', 'playbooks/**/*.yml', 'extensions/**/*.yml', 'molecule/**/*.yml'):
        yield from glob.glob(os.path.join(REPO, pattern), recursive=True)


def test_the_finder_below_sees_a_range_typed_in_a_template():
    for typed in ('vllm_rollout_interval | float > 0', 'x | int >= 1', 'x|float<=3600', '0 < vllm_x | float'):
        assert TEMPLATE_RANGE.search(typed), typed
    for fine in ('x | length > 0', 'x | int', 'x | float > y | float', "'3' in x"):
        assert not TEMPLATE_RANGE.search(fine), fine


def test_no_yaml_types_a_setting_s_range():
    """The ranges are the catalogue's (_settings): a role or playbook asks it (the rollout_problems filter, the
    watchdog_instances filter, validate_variables) instead of comparing a setting with a number in Jinja."""
    typed = []
    for path in _yaml_files():
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                if TEMPLATE_RANGE.search(line) and not line.lstrip().startswith('#'):
                    typed.append('%s:%d: %s' % (os.path.relpath(path, REPO), number, line.strip()))
    assert len(list(_yaml_files())) > 20
    assert typed == []
