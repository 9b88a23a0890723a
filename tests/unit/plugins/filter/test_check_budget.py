"""check_budget: the health module's own deadline (check_deadline) plus 30 s, rounded up; a bad value is named."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._check_budget import FilterModule, check_budget
from ansible_collections.modelops.vllm.plugins.module_utils._settings import check_deadline


@pytest.mark.parametrize('interval, probe_timeout, metrics_timeout, expected', [
    (5, 30, 10, 2 * 5 + 2 * 30 + 8 * 10 + 30),        # the defaults: 180
    ('5', '30', '10', 180),                            # as Ansible templates them: strings
    (0, 0, 0, 30),                                     # only the margin
    (0.25, 1, 1, 41),                                  # 0.5 + 2 + 8 + 30 = 40.5 -> 41: rounded up, not truncated
    (0.1, 0.1, 0.1, 32),                               # 1.2 + 30 = 31.2 -> 32
    (2.0, 3.0, 0.25, 42),                              # a whole number stays itself
    (' 5 ', 30.0, 10, 180),
])
def test_the_budget_is_the_deadline_plus_the_margin_rounded_up(interval, probe_timeout, metrics_timeout, expected):
    budget = check_budget(interval, probe_timeout, metrics_timeout)
    assert budget == expected and isinstance(budget, int)


@pytest.mark.parametrize('interval, probe_timeout, metrics_timeout', [(5, 30, 10), (1.5, 2.25, 0.75), (0, 7, 3)])
def test_the_budget_follows_check_deadline(interval, probe_timeout, metrics_timeout):
    deadline = check_deadline(interval, probe_timeout, metrics_timeout)
    assert deadline + 30 <= check_budget(interval, probe_timeout, metrics_timeout) < deadline + 31


@pytest.mark.parametrize('margin, expected', [(0, 150), (60, 210), ('0.5', 151)])
def test_the_margin_can_be_given(margin, expected):
    assert check_budget(5, 30, 10, margin) == expected


@pytest.mark.parametrize('args, named', [
    (('five', 30, 10), "interval must be a finite number of seconds from 0, got 'five'"),
    ((5, None, 10), 'probe_timeout must be a finite number of seconds from 0, got None'),
    ((5, 30, [10]), 'metrics_timeout must be a finite number of seconds from 0, got [10]'),
    ((5, 30, {}), 'metrics_timeout must be a finite number of seconds from 0'),
    ((True, 30, 10), 'interval must be a finite number of seconds from 0, got True'),
    (('nan', 30, 10), 'interval must be a finite number of seconds from 0'),
    ((5, 'inf', 10), 'probe_timeout must be a finite number of seconds'),
    ((5, 30, 10, 'x'), "margin must be a finite number of seconds from 0, got 'x'"),
    ((5, 30, ''), "metrics_timeout must be a finite number of seconds from 0, got ''"),
])
def test_a_value_that_is_not_a_number_is_a_filter_error_that_names_it(args, named):
    with pytest.raises(AnsibleFilterError) as err:
        check_budget(*args)
    assert named in str(err.value)
    assert str(err.value).startswith('check_budget: ')


def test_the_filter_is_registered():
    assert FilterModule().filters() == {'_check_budget': check_budget}
