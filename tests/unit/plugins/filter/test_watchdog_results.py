"""The watchdog_results filter: the role's results of one host, as the gate module computes them, and a clear error."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_results import FilterModule
from ansible_collections.modelops.vllm.plugins.module_utils import _results

watchdog_results = FilterModule().filters()['_watchdog_results']

SECRET = 'sk-NEVER-SHOWN-0123456789'
INSTANCES = [{'name': 'chat', 'url': 'http://admin:%s@127.0.0.1:8000' % SECRET},
             {'name': 'embed', 'url': 'http://127.0.0.1:8001'}]
GATE = {'instances': [{'name': 'chat', 'state': 'stuck', 'action': 'restart', 'decision': 'restart: stuck'},
                      {'name': 'embed', 'state': 'idle', 'action': 'none', 'decision': 'healthy'}]}


def test_the_filter_module_offers_exactly_this_filter():
    assert sorted(FilterModule().filters()) == ['_watchdog_results']


@pytest.mark.parametrize('gate, done, check_mode, unreachable', [
    (GATE, None, False, ''),
    (GATE, {'chat': {'after': 'idle', 'after_reason': 'ready'}}, False, ''),
    (GATE, {'chat': {'error': 'the unit failed'}}, False, ''),
    (GATE, None, True, ''),
    ({}, None, False, 'Connection timed out'),
    ({'unreachable': True, 'msg': 'Failed to connect'}, None, False, ''),
    ({'failed': True, 'msg': 'the lock is held'}, None, False, ''),
    # A skipped gate task (when: false) registers this.
    ({'changed': False, 'skipped': True, 'skip_reason': 'Conditional result was False'}, None, False, ''),
])
def test_the_filter_gives_what_the_gate_module_gives(gate, done, check_mode, unreachable):
    out = watchdog_results(gate, 'gb10-01', INSTANCES, done, check_mode, unreachable)
    assert out == _results.watchdog_results(gate, 'gb10-01', INSTANCES, done, check_mode, unreachable)
    assert [r['instance'] for r in out] == ['chat', 'embed']
    assert SECRET not in repr(out)


def test_the_defaults_are_no_outcome_not_check_mode_reachable():
    out = watchdog_results(GATE, 'gb10-01', INSTANCES)
    expected = [('restarted', False, False), ('none', False, False)]
    assert [(r['action'], r['failed'], r['unreachable']) for r in out] == expected
    assert out[0]['line'] == 'gb10-01/chat: stuck - watchdog: restarted (restart: stuck)'


@pytest.mark.parametrize('gate, instances', [(None, INSTANCES), ('x' * 100000, INSTANCES), ([GATE], INSTANCES),
                                             (GATE, None), (GATE, {'name': 'chat'}), (GATE, 'chat')])
def test_input_of_the_wrong_type_is_a_clear_filter_error(gate, instances):
    with pytest.raises(AnsibleFilterError) as caught:
        watchdog_results(gate, 'gb10-01', instances)
    assert str(caught.value) == 'watchdog_results expects the gate result (a dict) and the instances (a list)'


@pytest.mark.parametrize('instances, done', [(['chat'], None), (INSTANCES, ['chat'])])
def test_items_of_the_wrong_type_are_a_clear_filter_error(instances, done):
    with pytest.raises(AnsibleFilterError):
        watchdog_results(GATE, 'gb10-01', instances, done)
