"""The watchdog's results on one host (the vllm_watchdog_results contract), from the gate's decisions and the
restarts' outcomes."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._results import WORDS, watchdog_results

SECRET = 'sk-NEVER-SHOWN-0123456789'
CHAT = {'name': 'chat', 'url': 'http://127.0.0.1:8000'}
KEYS = ['host', 'instance', 'url', 'state', 'reason', 'action', 'decision', 'restarted', 'after', 'after_reason',
        'failed', 'unreachable', 'evidence_file', 'textfile_error', 'rebooted', 'evidence', 'line']


def decided(action, **more):
    return {'instances': [dict({'name': 'chat', 'state': 'stuck', 'reason': 'no progress for 300 s', 'action': action,
                                'decision': 'restart: stuck'}, **more)]}


def one(gate, done=None, check_mode=False, unreachable='', instances=(CHAT,)):
    results = watchdog_results(gate, 'gb10-01', list(instances), done, check_mode, unreachable)
    assert len(results) == len(instances)
    return results[0]


def test_every_result_has_the_contract_s_keys():
    assert sorted(one(decided('none'))) == sorted(KEYS)
    assert sorted(one({}, unreachable='timeout')) == sorted(KEYS)


@pytest.mark.parametrize('action, done, check_mode, expected', [
    ('none', None, False, {'action': 'none', 'failed': False, 'restarted': False, 'rebooted': False}),
    ('fail', None, False, {'action': 'fail', 'failed': True, 'restarted': False}),
    ('restart', {'chat': {'after': 'idle', 'after_reason': 'ready in 40 s'}}, False,
     {'action': 'restarted', 'restarted': True, 'failed': False, 'after': 'idle', 'after_reason': 'ready in 40 s',
      'decision': 'restart: stuck'}),
    ('restart', None, True, {'action': 'would restart (check mode)', 'restarted': False, 'failed': False}),
    ('restart', {'chat': {'error': 'the unit failed'}}, False,
     {'action': 'restart failed', 'failed': True, 'restarted': False,
      'decision': 'restart: stuck; the restart failed: the unit failed'}),
    # In check mode a restart's error is not looked at.
    ('restart', {'chat': {'error': 'the unit failed'}}, True, {'action': 'would restart (check mode)', 'failed': False}),
    ('reboot', {'chat': {'after': 'idle'}}, False,
     {'action': 'rebooted', 'rebooted': True, 'restarted': False, 'failed': False, 'after': 'idle'}),
    ('reboot', None, True, {'action': 'would reboot (check mode)', 'rebooted': False, 'failed': False}),
    ('reboot', {'chat': {'reboot_error': 'timed out', 'unreachable': 1}}, False,
     {'action': 'reboot failed', 'failed': True, 'unreachable': True, 'rebooted': False,
      'decision': 'restart: stuck; the reboot failed: timed out'}),
    ('reboot', {'chat': {'reboot_error': 'refused'}}, False, {'action': 'reboot failed', 'unreachable': False}),
    # Another instance's outcome is not this one's.
    ('restart', {'embed': {'error': 'x'}}, False, {'action': 'restarted', 'restarted': True, 'after': None}),
    # A missing action is none.
    (None, None, False, {'action': 'none', 'failed': False}),
])
def test_what_the_watchdog_did(action, done, check_mode, expected):
    result = one(decided(action), done, check_mode)
    assert dict((key, result[key]) for key in expected) == expected
    assert result['state'] == 'stuck' and result['reason'] == 'no progress for 300 s'
    assert result['host'] == 'gb10-01' and result['instance'] == 'chat' and result['url'] == CHAT['url']


@pytest.mark.parametrize('escalated, expected', [
    ('fail', {'action': 'restart stopped', 'failed': True, 'restarted': False, 'rebooted': False}),
    ('reboot', {'action': 'rebooted', 'rebooted': True, 'failed': False}),
])
def test_a_stopped_restart_takes_the_gate_s_next_step(escalated, expected):
    done = {'chat': {'error': 'memory did not come back', 'escalated': escalated, 'escalation': 'reboot the host'}}
    result = one(decided('restart'), done)
    assert dict((key, result[key]) for key in expected) == expected
    assert result['decision'] == 'restart: stuck; memory did not come back; then: reboot the host'


def test_a_stopped_restart_without_an_error_says_no_none():
    done = {'chat': {'escalated': 'fail', 'escalation': 'a human must look'}}
    assert one(decided('restart'), done)['decision'] == 'restart: stuck; then: a human must look'


def test_a_stopped_restart_in_check_mode_is_only_what_would_be_done():
    done = {'chat': {'error': 'x', 'escalated': 'fail', 'escalation': 'y'}}
    assert one(decided('restart'), done, check_mode=True)['action'] == 'would restart (check mode)'


def test_a_failed_reboot_after_a_stopped_restart_says_both():
    done = {'chat': {'error': 'memory', 'escalated': 'reboot', 'escalation': 'memory; reboot', 'reboot_error': 'down'}}
    result = one(decided('restart'), done)
    assert result['action'] == 'reboot failed' and result['failed']
    assert result['decision'] == 'restart: stuck; then: memory; reboot; the reboot failed: down'


@pytest.mark.parametrize('gate, unreachable, why', [
    ({}, 'ssh: connect to host gb10-01 port 22: Connection timed out', 'ssh: connect to host gb10-01 port 22'),
    ({'unreachable': True, 'msg': 'Failed to connect'}, '', 'Failed to connect'),
    ({'unreachable': True}, '', '(unreachable)'),
    # The argument wins over the gate's message.
    ({'unreachable': True, 'msg': 'gate says'}, 'argument says', '(argument says)'),
])
def test_an_unreachable_host_is_never_healthy_and_never_restarted(gate, unreachable, why):
    results = watchdog_results(gate, 'gb10-01', [CHAT, {'name': 'embed', 'url': 'http://127.0.0.1:8001'}],
                               unreachable=unreachable)
    assert [r['instance'] for r in results] == ['chat', 'embed']
    for result in results:
        assert result['state'] == 'unreachable' and result['action'] == 'unreachable'
        assert result['failed'] is True and result['unreachable'] is True and result['restarted'] is False
        assert why in result['reason'] and result['reason'].startswith('the host does not answer over SSH (')
        assert 'never restarted' in result['decision']
        assert 'host UNREACHABLE, not restarted' in result['line']


def test_the_reason_of_an_unreachable_host_is_cut():
    result = one({}, unreachable='x' * 100000)
    assert result['reason'] == 'the host does not answer over SSH (%s)' % ('x' * 300)


@pytest.mark.parametrize('gate, decision', [
    ({}, 'the watchdog could not decide: the gate gave no decision for this instance'),
    ({'failed': True, 'msg': 'the lock is held'}, 'the watchdog could not decide: the lock is held'),
    ({'instances': [{'name': 'embed', 'action': 'none'}, 'junk', None]},
     'the watchdog could not decide: the gate gave no decision for this instance'),
    ({'instances': None, 'msg': 'y' * 10000}, 'the watchdog could not decide: %s' % ('y' * 500)),
])
def test_an_instance_without_a_decision_needs_a_human(gate, decision):
    result = one(gate)
    assert result['action'] == 'fail' and result['failed'] is True and result['state'] == 'unknown'
    assert result['decision'] == decision
    assert result['line'] == 'gb10-01/chat: unknown - watchdog: NEEDS A HUMAN (%s)' % decision


def test_the_line_says_it_all_on_one_line():
    gate = decided('restart', evidence_file='/var/lib/vllm-watchdog/evidence/chat.json', evidence='stack dumped',
                   decision='restart:\n  stuck')
    result = one(gate, {'chat': {'after': 'idle'}})
    assert result['line'] == ('gb10-01/chat: stuck - watchdog: restarted (restart: stuck) -> now idle '
                              '[evidence /var/lib/vllm-watchdog/evidence/chat.json: stack dumped]')
    # Evidence without its file is not in the line.
    assert '[evidence' not in one(decided('none', evidence='x'))['line']


@pytest.mark.parametrize('outcome, action', [
    ({'after': 'idle'}, 'restarted'),
    ({'error': 'rank 1: refused'}, 'restart failed'),
])
def test_the_other_ranks_evidence_of_an_instance_across_hosts_ends_the_line(outcome, action):
    gate = decided('restart', evidence_file='/s/evidence/chat.json', evidence='py-spy 3 stack(s)')
    words = 'rank 1 on spark-02: /s/evidence/chat-rank1-1.json (py-spy 2 stack(s))'
    result = one(gate, {'chat': dict(outcome, ranks_evidence=words)})
    assert result['action'] == action
    assert result['evidence'] == 'py-spy 3 stack(s); the other ranks: ' + words
    assert result['line'].endswith('[evidence /s/evidence/chat.json: py-spy 3 stack(s); the other ranks: %s]' % words)
    assert one(gate, {'chat': dict(outcome, ranks_evidence='')})['evidence'] == 'py-spy 3 stack(s)'


@pytest.mark.parametrize('action, word', sorted(WORDS.items()))
def test_every_action_has_its_word_in_the_line(action, word):
    result = one(decided(action))
    assert result['line'] == 'gb10-01/chat: stuck - watchdog: %s (restart: stuck)' % word


def test_a_password_in_the_url_is_never_in_a_result():
    instance = {'name': 'chat', 'url': 'http://admin:%s@127.0.0.1:8000' % SECRET}
    for gate, kwargs in ((decided('none'), {}), ({}, {'unreachable': 'down'}), ({}, {})):
        result = watchdog_results(gate, 'gb10-01', [instance], **kwargs)[0]
        assert SECRET not in repr(result)
        assert result['url'] == 'http://admin:********@127.0.0.1:8000'


def test_no_instance_no_result():
    assert watchdog_results(decided('none'), 'gb10-01', []) == []
    assert watchdog_results({}, 'gb10-01', (), unreachable='x') == []


@pytest.mark.parametrize('gate, instances', [(None, [CHAT]), ([], [CHAT]), ('ok', [CHAT]), ({}, None), ({}, CHAT),
                                             ({}, 'chat')])
def test_a_gate_result_or_instances_of_the_wrong_type_are_a_value_error(gate, instances):
    with pytest.raises(ValueError) as caught:
        watchdog_results(gate, 'gb10-01', instances)
    assert str(caught.value) == 'watchdog_results expects the gate result (a dict) and the instances (a list)'
