"""watchdog_summary(hostvars): the play's results gathered in Python, the hosts without a result as lost lines."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_summary import (
    lost_result, play_results, watchdog_summary)

LOST = ('{0}/*: unreachable - watchdog: host UNREACHABLE or failed before a verdict, not restarted '
        '(see the task that failed for this host above)')


def result(host, instance='chat', state='idle', **more):
    item = {'host': host, 'instance': instance, 'state': state, 'action': 'none', 'failed': False,
            'unreachable': False, 'restarted': False, 'line': '%s/%s: %s - fine' % (host, instance, state)}
    item.update(more)
    return item


def gated(*results):
    """A host whose gate ran in this run, with its fact."""
    return {'_vllm_watchdog_gate': {'changed': False}, 'ansible_facts': {'vllm_watchdog_results': list(results)}}


def lost(host):
    """What the role's Jinja built for a host without a result (the same dict, the same words)."""
    return {'host': host, 'instance': '*', 'state': 'unreachable', 'action': 'unreachable', 'failed': True,
            'unreachable': True, 'restarted': False, 'line': LOST.format(host)}


A1 = result('a')
A2 = result('a', 'embed', 'busy')
B1 = result('b', state='stuck', restarted=True)

CASES = [
    # (hosts, hostvars, the results gathered)
    (['a', 'b'], {'a': gated(A1, A2), 'b': gated(B1)}, [A1, A2, B1]),
    # the order of the play, not of hostvars
    (['b', 'a'], {'a': gated(A1, A2), 'b': gated(B1)}, [B1, A1, A2]),
    # a host that failed before the gate (its preflight): no gate registered, one lost line
    (['a', 'b'], {'a': gated(A1), 'b': {'ansible_facts': {}}}, [A1, lost('b')]),
    # a fact from a persistent fact cache, without this run's gate: not this run's verdict
    (['a', 'b'], {'a': gated(A1), 'b': {'ansible_facts': {'vllm_watchdog_results': [B1]}}}, [A1, lost('b')]),
    # a gate registered (skipped: the host did not answer) and no fact
    (['a', 'b'], {'a': gated(A1), 'b': {'_vllm_watchdog_gate': {'skipped': True}, 'ansible_facts': {}}},
     [A1, lost('b')]),
    # no ansible_facts at all
    (['a'], {'a': {'_vllm_watchdog_gate': {}}}, [lost('a')]),
    # a gate whose fact is an empty list: lost too
    (['a'], {'a': gated()}, [lost('a')]),
    # a host reported in another host's results (the unreachable command's host) is not lost
    (['a', 'b'], {'a': gated(A1, result('b', '*', 'down')), 'b': {}}, [A1, result('b', '*', 'down')]),
    # every host lost
    (['a', 'b'], {'a': {}, 'b': {}}, [lost('a'), lost('b')]),
    ([], {}, []),
]


@pytest.mark.parametrize('hosts, hostvars, expected', CASES)
def test_the_play_s_results_are_the_gated_hosts_facts_then_the_lost_hosts(hosts, hostvars, expected):
    assert play_results(hosts, hostvars) == expected


@pytest.mark.parametrize('hosts, hostvars, expected', CASES)
def test_one_call_with_hostvars_is_the_summary_of_those_results(hosts, hostvars, expected):
    assert watchdog_summary(hosts, hostvars) == watchdog_summary(expected)


def test_the_lost_line_is_the_role_s_text():
    assert lost_result('gb10-02') == lost('gb10-02')
    summary = watchdog_summary(['gb10-01', 'gb10-02'], {'gb10-01': gated(result('gb10-01')), 'gb10-02': {}})
    assert summary['lines'][-1] == LOST.format('gb10-02')
    assert summary['unreachable'] == ['gb10-02'] and summary['failed'] == ['gb10-02/*']
    assert summary['headline'] == ('vLLM watchdog: 2 instance(s): 1 idle, 1 unreachable; restarted: none; '
                                   'needs a human: gb10-02/*; unreachable hosts: gb10-02')


@pytest.mark.parametrize('hosts, hostvars, message', [
    ('a', {'a': {}}, 'expects the host names of the play, got str'),
    (['a', 'x'], {'a': {}}, 'x is not in hostvars'),
    (['a'], {'a': {'_vllm_watchdog_gate': {}, 'ansible_facts': {'vllm_watchdog_results': 'nope'}}},
     'the vllm_watchdog_results of a is not a list'),
])
def test_what_cannot_be_gathered_is_a_filter_error(hosts, hostvars, message):
    with pytest.raises(AnsibleFilterError) as err:
        watchdog_summary(hosts, hostvars)
    assert message in str(err.value)


def test_a_textfile_mistake_is_said_once_by_the_host_that_fails_for_it_else_by_one_summary_line():
    why = 'the textfile /x/v.prom could not be written (its directory /x does not exist): ...'

    def required(host, value):
        found = gated(result(host, textfile_error=why))
        found['_vllm_watchdog_gate']['textfile_required'] = value  # as the host's gate returned it
        return found

    hostvars = {'a': gated(result('a', textfile_error=why)), 'b': required('b', True), 'c': required('c', False),
                'd': required('d', 'false')}
    summary = watchdog_summary(['a', 'b', 'c', 'd'], hostvars, textfile_required=True)
    # a and b fail for it with their own (one, shared) line; c and d do not fail: the summary says it for them.
    assert [line for line in summary['lines'] if 'TEXTFILE' in line] == [
        'c, d: watchdog: TEXTFILE NOT WRITTEN - %s' % why]
    assert summary['headline'].endswith('textfile not written: a, b, c, d')
    assert len([line for line in watchdog_summary(['a', 'b'], hostvars)['lines'] if 'TEXTFILE' in line]) == 1
