"""watchdog_history: the fleet's history lines, host by host, a host whose history could not be read said, never
dropped, and a headline that names every restart and every instance that asked a human."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.modelops.vllm.plugins.filter._watchdog_history import watchdog_history


def read(host, *instances, since='2026-12-01T12:00:00Z'):
    lines = []
    for item in instances:
        lines += ['%s/%s: line' % (host, item['name'])]
    return {'_vllm_history': {'changed': False, 'lines': lines, 'since': since, 'instances': list(instances)}}


def instance(name, runs=10, restarts=0, reboots=0, needs_human=0, failed_restart=False):
    return {'name': name, 'runs': runs, 'restarts': restarts, 'reboots': reboots, 'needs_human': needs_human,
            'failed_restart': failed_restart}


def test_every_host_in_order_and_a_headline_for_the_fleet():
    hostvars = {'gb10-01': read('gb10-01', instance('vllm', restarts=2)),
                'gb10-02': read('gb10-02', instance('chat'), instance('embed', needs_human=3)),
                'gb10-03': read('gb10-03', instance('vllm', reboots=1, failed_restart=True))}
    report = watchdog_history(['gb10-01', 'gb10-02', 'gb10-03'], hostvars)
    assert report['lines'] == ['gb10-01/vllm: line', 'gb10-02/chat: line', 'gb10-02/embed: line', 'gb10-03/vllm: line']
    assert report['headline'] == (
        'vLLM watchdog history since 2026-12-01T12:00:00Z: 4 instance(s) on 3 host(s), 40 run(s); restarts: '
        'gb10-01/vllm (2); host reboots: gb10-03/vllm (1); asked a human: gb10-02/embed, gb10-03/vllm; not read: none')


def test_a_host_that_did_not_answer_or_could_not_be_read_is_a_line_and_named_in_the_headline():
    hostvars = {'gb10-01': read('gb10-01', instance('vllm')),
                'gb10-02': {'_vllm_history': {'unreachable': True, 'msg': 'Failed to connect\nto the host'}},
                'gb10-03': {'_vllm_history': {'failed': True, 'msg': 'the watchdog history cannot be read: denied'}},
                'gb10-04': {}}
    report = watchdog_history(['gb10-01', 'gb10-02', 'gb10-03', 'gb10-04'], hostvars)
    assert report['lines'][1:] == [
        'gb10-02/*: history UNREACHABLE: Failed to connect to the host',
        'gb10-03/*: history NOT READ: the watchdog history cannot be read: denied',
        'gb10-04/*: history NOT READ: the host failed before its history was read (see above)']
    assert report['headline'].endswith('1 instance(s) on 1 host(s), 10 run(s); restarts: none; host reboots: none; '
                                       'asked a human: none; not read: gb10-02, gb10-03, gb10-04')


def test_all_history_says_so():
    report = watchdog_history(['h'], {'h': read('h', instance('vllm'), since=None)})
    assert report['headline'].startswith('vLLM watchdog history in all its history: ')


@pytest.mark.parametrize('hosts, hostvars', [('gb10-01', {}), (['gb10-01'], {}),
                                             (['gb10-01'], {'gb10-01': {'_vllm_history': {'lines': 'x'}}})])
def test_a_wrong_shape_is_a_filter_error(hosts, hostvars):
    with pytest.raises(AnsibleFilterError):
        watchdog_history(hosts, hostvars)
