"""One instance across hosts (_ranks): the inventory's rules, what each rank's host said, the instance's verdict and the
service the decision reads; then the gate, which decides once for the instance from the head's verdict and its ranks."""

import time

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _ranks
from ansible_collections.modelops.vllm.plugins.module_utils._types import STATES

from tests.unit.plugins.module_utils.test_gate import (  # noqa: F401  pylint: disable=unused-import
    SERVING, START, make, served, systemd)  # served: a fixture
from tests.unit.plugins.module_utils.test_gate import item as gate_item

HEAD = {'name': 'big', 'restart_method': 'docker', 'service': 'vllm-head', 'compose_project_dir': '',
        'launch': 'nnodes', 'ranks': [{'host': 'spark-02', 'service': 'vllm-rank1'}]}


def test_ranks_are_numbered_from_one_with_the_head_s_method_unless_their_own():
    instance = dict(HEAD, ranks=[{'host': 'spark-02'}, {'host': 'spark-03', 'service': 'r2', 'restart_method': 'systemd'}])
    assert _ranks.ranks_of(instance) == [
        {'rank': 1, 'instance': 'big', 'host': 'spark-02', 'service': 'vllm-head', 'restart_method': 'docker',
         'compose_project_dir': ''},
        {'rank': 2, 'instance': 'big', 'host': 'spark-03', 'service': 'r2', 'restart_method': 'systemd',
         'compose_project_dir': ''}]
    assert _ranks.ranks_of({'name': 'one'}) == [] and _ranks.ranks_of({'ranks': 'garbage'}) == []


def test_a_restart_across_hosts_stops_the_head_then_the_last_rank_first_and_starts_the_head_then_in_order():
    """The one place the order is written (both roles loop over it): the head stops first and starts first."""
    instance = dict(HEAD, ranks=[{'host': 'spark-02'}, {'host': 'spark-03', 'service': 'r2'}, {'host': 'spark-04'}])
    steps = _ranks.restart_steps(instance, 'spark-01')
    assert [(s['host'], s['rank']) for s in steps['stop']] == [('spark-01', 0), ('spark-04', 3), ('spark-03', 2),
                                                               ('spark-02', 1)]
    assert [(s['host'], s['rank']) for s in steps['start']] == [('spark-01', 0), ('spark-02', 1), ('spark-03', 2),
                                                                ('spark-04', 3)]
    assert steps['start'][0] == {'host': 'spark-01', 'rank': 0, 'restart_method': 'docker', 'service': 'vllm-head',
                                 'compose_project_dir': ''}
    assert steps['start'][2]['service'] == 'r2' and steps['start'][3]['service'] == 'vllm-head'
    # Only what a stop and a start take: never the instance's API key or anything else it carries.
    keyed = dict(instance, api_key='sk-never-a-loop-item', ranks=[{'host': 'spark-02', 'api_key': 'sk-x'}])
    assert all(set(s) == set(_ranks.STEP_KEYS) for s in _ranks.restart_steps(keyed, 'spark-01')['stop'])
    assert 'sk-' not in repr(_ranks.restart_steps(keyed, 'spark-01'))
    # One host: the head alone, both ways; garbage ranks are no ranks.
    alone = _ranks.restart_steps({'name': 'one', 'restart_method': 'systemd', 'service': None}, 'gb10-01')
    head = {'host': 'gb10-01', 'rank': 0, 'restart_method': 'systemd', 'service': '', 'compose_project_dir': ''}
    assert alone == {'stop': [head], 'start': [head]}
    assert len(_ranks.restart_steps(dict(HEAD, ranks='garbage'), 'h')['stop']) == 1


@pytest.mark.parametrize('change, words', [
    ({}, None),
    ({'ranks': [], 'launch': ''}, None),  # one host, as always
    ({'ranks': [], 'launch': 'nnodes'}, "launch 'nnodes' is given without ranks"),
    ({'launch': None}, 'launch must be nnodes or ray for an instance with ranks, got None'),
    ({'launch': 'mpi'}, "launch must be nnodes or ray for an instance with ranks, got 'mpi'"),
    ({'restart_method': 'command'}, "its restart_method must be systemd, docker, compose, got 'command'"),
    ({'ranks': 'spark-02'}, 'ranks must be a list of the other nodes ({host, service}), got str'),
    ({'ranks': ['spark-02']}, 'rank 1 must be a dict ({host, service}), got str'),
    ({'ranks': [{'service': 'x'}]}, 'rank 1: host must be the inventory name of its host, got None'),
    ({'ranks': [{'host': 'spark-01'}]}, 'rank 1: host spark-01 is the head itself'),
    ({'ranks': [{'host': 'spark-09'}]}, 'rank 1: host spark-09 is not a host of the inventory'),
    ({'ranks': [{'host': 'spark-02'}, {'host': 'spark-02'}]}, 'rank 2: host spark-02 is listed twice'),
    ({'ranks': [{'host': 'spark-02', 'servce': 'x'}]}, "rank 1: unknown key(s) 'servce'"),
    ({'ranks': [{'host': 'spark-02', 'restart_method': 'command'}]}, "rank 1: restart_method must be systemd, docker, "
                                                                     "compose, got 'command'"),
    ({'ranks': [{'host': 'spark-02', 'restart_method': 'compose'}]}, 'rank 1: compose_project_dir is needed'),
    ({'service': '', 'ranks': [{'host': 'spark-02'}]}, 'rank 1: service is needed'),
])
def test_the_inventory_s_mistakes_are_named_one_sentence_each(change, words):
    found = _ranks.problems(dict(HEAD, **change), head='spark-01', inventory=['spark-01', 'spark-02', 'spark-03'])
    if words is None:
        assert found == []
    else:
        assert any(words in one for one in found), found


def result(running=True, started='@%d' % (START - 7200), rank=1, host='spark-02', **over):
    one = {'item': {'instance': 'big', 'rank': rank, 'host': host, 'service': 'vllm-rank%d' % rank}, 'changed': False,
           'running': running, 'started_at': started, 'status': 'running' if running else 'exited (137)'}
    one.update(over)
    return one


def test_each_rank_s_report_says_whether_its_host_answered_and_its_service_runs():
    unreachable = {'item': result()['item'], 'unreachable': True, 'msg': 'ssh: connect to host 127.0.0.3 port 22'}
    failed = {'item': result()['item'], 'failed': True, 'msg': 'docker: command not found'}
    found = _ranks.reports([result(), result(False), unreachable, failed, 'garbage', {'no': 'item'}])
    assert [(r['answered'], r['running']) for r in found] == [(True, True), (True, False), (False, None), (True, None)]
    assert found[2]['status'] == 'the host did not answer: ssh: connect to host 127.0.0.3 port 22'
    assert found[3]['status'] == 'its state could not be read: docker: command not found'
    assert _ranks.reports(None) == [] and _ranks.reports('x') == []


@pytest.mark.parametrize('state', STATES)
def test_every_rank_running_leaves_every_verdict_as_the_head_said(state):
    assert _ranks.instance_verdict(state, 'why', _ranks.reports([result()])) == (state, 'why')


@pytest.mark.parametrize('state', STATES)
def test_a_rank_that_does_not_run_makes_a_verdict_that_proves_no_step_down_naming_it(state):
    new, reason = _ranks.instance_verdict(state, 'why', _ranks.reports([result(False)]))
    assert 'rank 1 (spark-02, vllm-rank1): not running (exited (137))' in reason
    if state in ('idle', 'busy', 'up', 'restarted', 'paused', 'sleeping'):
        # A step went through every rank (or the head is paused on purpose): the inventory may name another service.
        assert new == state and reason.startswith('why (yet ')
    else:
        assert new == 'down' and reason.endswith('so the instance cannot serve (the head: why)')


def test_a_rank_host_that_does_not_answer_is_down_and_its_service_cannot_be_told():
    ranks = _ranks.reports([{'item': result()['item'], 'unreachable': True, 'msg': 'timed out'}])
    state, reason = _ranks.instance_verdict('stuck', 'frozen 400 s', ranks)
    assert state == 'down' and 'rank 1 (spark-02, vllm-rank1): the host did not answer: timed out' in reason
    service = _ranks.combined_service({'running': True, 'started_at': '@%d' % START, 'main_pid': 7}, ranks)
    assert service['running'] is None and service['main_pid'] == 7  # not restartable: down, state unknown


def test_the_instance_runs_only_when_every_rank_runs_since_the_latest_start():
    head = {'running': True, 'started_at': '@%d' % (START - 7200), 'main_pid': 7, 'status': 'running'}
    docker_time = time.strftime('%Y-%m-%dT%H:%M:%S.5Z', time.gmtime(START - 60))  # as Docker says a start
    later = _ranks.reports([result(started=docker_time), result(rank=2, host='spark-03')])
    service = _ranks.combined_service(head, later)
    assert service['running'] is True and service['started_at'] == START - 59.5 and service['main_pid'] == 7
    assert [r['rank'] for r in service['ranks']] == [1, 2]
    stopped = _ranks.combined_service(head, _ranks.reports([result(False)]))
    assert stopped['running'] is False and stopped['status'] == 'rank 1 (spark-02, vllm-rank1): exited (137)'
    unknown_start = _ranks.combined_service(head, _ranks.reports([result(started=None)]))
    assert unknown_start['running'] is True and unknown_start['started_at'] is None
    assert _ranks.combined_service(head, []) == head
    assert _ranks.combined_service({}, later) == {'ranks': service['ranks']}  # the head's service was not asked


# ----------------------------------------------------------------------------------------------- the gate, with ranks

def test_a_stuck_head_with_every_rank_running_is_restarted_once_for_the_instance(tmp_path, served):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING),
                                                    'journalctl': (0, 'log\n', '')}, ranks=[result()])
    out = gate.run([gate_item('big', verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)], {}, None)[0]
    assert out['state'] == 'stuck' and out['action'] == 'restart', out
    assert out['service']['ranks'][0]['host'] == 'spark-02' and out['restarts_in_window'] == 1


def test_a_rank_started_after_the_head_keeps_the_instance_in_its_start_up_grace(tmp_path, served):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING)},
                                         ranks=[result(started='@%d' % (START - 60))])
    out = gate.run([gate_item('big', verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)], {}, None)[0]
    assert out['action'] == 'none' and 'within the start-up grace' in out['decision'], out


def test_a_dead_rank_under_a_head_that_answers_nothing_restarts_the_instance(tmp_path, served):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING),
                                                    'journalctl': (0, 'log\n', '')}, ranks=[result(False)])
    out = gate.run([gate_item('big', verdict={'state': 'unknown', 'reason': 'probe timed out'}, url=served)],
                   {}, None)[0]
    assert out['state'] == 'down' and out['action'] == 'restart', out
    assert 'rank 1 (spark-02, vllm-rank1): not running' in out['reason']


def test_a_rank_host_that_does_not_answer_is_never_restarted(tmp_path, served):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING)},
                                         ranks=[{'item': result()['item'], 'unreachable': True, 'msg': 'timed out'}])
    out = gate.run([gate_item('big', verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)], {}, None)[0]
    assert out['state'] == 'down' and out['action'] == 'none', out
    assert 'cannot say whether it is starting' in out['decision'] and 'spark-02' in out['reason']


def test_a_busy_instance_asks_no_service_manager_on_the_head_whatever_its_ranks_say(tmp_path):
    gate, runner, clock, statedir = make(tmp_path, {}, ranks=[result(False)])
    out = gate.run([gate_item('big', verdict={'state': 'busy', 'reason': 'counters moved'})], {}, None)[0]
    assert out['state'] == 'busy' and out['action'] == 'none' and runner.calls == []
    assert 'yet rank 1 (spark-02, vllm-rank1): not running' in out['reason']


def test_another_instance_of_the_host_is_not_touched_by_these_ranks(tmp_path):
    gate, runner, clock, statedir = make(tmp_path, {}, ranks=[result(False)])
    out = gate.run([gate_item('small', verdict={'state': 'idle', 'reason': 'probe answered'})], {}, None)[0]
    assert (out['state'], out['reason']) == ('idle', 'probe answered') and 'ranks' not in out['service']


GARBAGE = [None, 0, -1, 1.5, float('nan'), True, '', 'x' * 100000, '\x00\x1b[31m', [], [None], [[]], [{}],
           [{'host': 'spark-\x1b[31m'}], [{'host': 'y' * 100000, 'z' * 100000: 1}],
           [{'host': ['a']}], [{'host': {'a': 1}}], [{'host': 'spark-02', 'service': ['x']}], {'host': 'spark-02'},
           [{'host': 'spark-02', 'restart_method': None}], [{'host': 'h%d' % i} for i in range(1000)]]


@pytest.mark.parametrize('ranks', GARBAGE, ids=range(len(GARBAGE)))
@pytest.mark.parametrize('launch', [None, '', 'nnodes', 7, ['ray'], 'n' * 100000, '\x1b]0;x\x07'])
def test_no_inventory_is_a_traceback_only_sentences(ranks, launch):
    instance = dict(HEAD, ranks=ranks, launch=launch)
    found = _ranks.problems(instance, head='spark-01', inventory=['spark-01', 'spark-02'])
    assert isinstance(found, list) and all(isinstance(one, str) and len(one) < 400 for one in found)
    assert len(found) <= _ranks.MAX_PROBLEMS + 1 and not any('\x1b' in one or '\x00' in one for one in found)
    # Nothing to say only where nothing is wrong: no ranks, or one good rank (its method the head's when not given).
    assert found or ranks in (None, '', []) or ranks in ([{'host': 'spark-02'}],
                                                         [{'host': 'spark-02', 'restart_method': None}])
    assert isinstance(_ranks.ranks_of(instance), list)


@pytest.mark.parametrize('results', [None, 'x', [None, 1, 'x', {}], [{'item': None}], [{'item': 'x'}],
                                     [{'item': {}, 'running': 'yes', 'started_at': {'a': 1}, 'status': ['x'] * 10}],
                                     [{'item': {'rank': 1}, 'unreachable': True, 'msg': 'x' * 100000}]])
def test_what_a_rank_s_host_said_is_never_a_traceback(results, tmp_path):
    found = _ranks.reports(results)
    assert all(one['running'] in (True, False, None) and len(one['status']) <= 260 for one in found)
    state, reason = _ranks.instance_verdict('stuck', 'why', found)
    assert state in STATES and isinstance(reason, str)
    service = _ranks.combined_service({'running': True, 'started_at': 'garbage'}, found)
    assert service.get('running') in (True, False, None)
