"""The watchdog_summary filter over a fleet: counts, the lists of who was restarted, rebooted, failed or did not
answer, one line each, the headline; and a clear error for what is not results."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_summary import FilterModule

watchdog_summary = FilterModule().filters()['_watchdog_summary']


def result(host, instance, state, line=None, **flags):
    return dict({'host': host, 'instance': instance, 'state': state, 'line': line}, **flags)


def test_the_filter_module_offers_exactly_this_filter():
    assert sorted(FilterModule().filters()) == ['_watchdog_summary']


def test_nothing_to_summarize():
    assert watchdog_summary([]) == {
        'counts': {}, 'restarted': [], 'rebooted': [], 'failed': [], 'unreachable': [], 'reasons': {}, 'lines': [],
        'textfile_errors': [],
        'headline': 'vLLM watchdog: 0 instance(s): none; restarted: none; needs a human: none; unreachable hosts: none'}


def test_a_fleet():
    results = [
        result('a', 'chat', 'idle', 'a/chat: idle - watchdog: no action (healthy)'),
        result('a', 'embed', 'stuck', 'a/embed: stuck - watchdog: restarted', restarted=True),
        result('b', 'chat', 'unreachable', 'b/chat: unreachable', failed=True, unreachable=True),
        result('b', 'embed', 'unreachable', 'b/embed: unreachable', failed=True, unreachable=True),
        result('c', 'chat', 'stuck', 'c/chat: stuck - watchdog: REBOOTED the host', rebooted=True),
        result('d', 'chat', 'idle', None),
    ]
    summary = watchdog_summary(results)
    assert summary['counts'] == {'idle': 2, 'stuck': 2, 'unreachable': 2}
    assert summary['restarted'] == ['a/embed']
    assert summary['rebooted'] == ['c/chat']
    assert summary['failed'] == ['b/chat', 'b/embed']
    assert summary['unreachable'] == ['b']  # a host once, however many instances
    assert summary['lines'] == ['a/chat: idle - watchdog: no action (healthy)', 'a/embed: stuck - watchdog: restarted',
                                'b/chat: unreachable', 'b/embed: unreachable',
                                'c/chat: stuck - watchdog: REBOOTED the host', 'd/chat']  # no line: who it is
    assert summary['headline'] == ('vLLM watchdog: 6 instance(s): 2 idle, 2 stuck, 2 unreachable; restarted: a/embed; '
                                   'needs a human: b/chat, b/embed; unreachable hosts: b; rebooted: c/chat')


def test_the_counts_in_the_headline_go_from_the_most_to_the_fewest_then_by_name():
    results = [result('h', str(n), state) for n, state in enumerate(['busy', 'stuck', 'stuck', 'idle', 'busy', 'stuck'])]
    assert watchdog_summary(results)['headline'].startswith('vLLM watchdog: 6 instance(s): 3 stuck, 2 busy, 1 idle;')


@pytest.mark.parametrize('value, counted', [
    (True, True), ('true', True), ('True', True), (' yes ', True), ('1', True), (1, True),
    (False, False), ('false', False), ('no', False), ('0', False), ('', False), (None, False), (0, False),
])
def test_flags_as_the_inventory_or_a_template_spells_them(value, counted):
    summary = watchdog_summary([result('h', 'chat', 'idle', restarted=value, failed=value, rebooted=value,
                                       unreachable=value)])
    assert summary['restarted'] == summary['failed'] == summary['rebooted'] == (['h/chat'] if counted else [])
    assert summary['unreachable'] == (['h'] if counted else [])


def test_a_result_without_a_state_is_unknown_and_a_line_is_one_line():
    summary = watchdog_summary([{'host': 'h', 'instance': 'chat', 'line': 'h/chat:\n  stuck\t- x'}, {}])
    assert summary['counts'] == {'unknown': 2}
    assert summary['lines'] == ['h/chat: stuck - x', 'None/None']


@pytest.mark.parametrize('results, message', [
    (None, 'watchdog_summary expects a list of results, got NoneType'),
    ({'host': 'h'}, 'watchdog_summary expects a list of results, got dict'),
    ('x' * 100000, 'watchdog_summary expects a list of results, got str'),
    ((), 'watchdog_summary expects a list of results, got tuple'),
    ([{'host': 'h'}, 'h/chat'], 'watchdog_summary expects dicts, got str'),
    ([[{'host': 'h'}]], 'watchdog_summary expects dicts, got list'),  # not flattened
])
def test_what_is_not_results_is_a_clear_filter_error(results, message):
    with pytest.raises(AnsibleFilterError) as caught:
        watchdog_summary(results)
    assert str(caught.value) == message
