"""The gate's run on one host with a fake clock and a fake command runner: the lock, the history, the records."""

import fcntl
import json
import os
import socket
import time

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _gate
from ansible_collections.modelops.vllm.plugins.module_utils._decide import DEFAULTS
from ansible_collections.modelops.vllm.plugins.module_utils._service import MAX_OUTPUT

from tests.unit.plugins.module_utils.fakes import Clock

START = 1796004614.0
STAMP = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(START))


class Runner(object):
    """A command runner (``_service.run_argv``'s signature): scripted answers by the command's name; every call kept."""

    def __init__(self, answers=None):
        self.answers = answers or {}
        self.calls = []

    def __call__(self, argv, timeout=60, keep=MAX_OUTPUT):
        self.calls.append((list(argv), timeout, keep))
        return self.answers.get(argv[0], (None, '', 'FileNotFoundError: %s' % argv[0]))

    def names(self):
        return [argv[0] for argv, dummy, dummy in self.calls]


def systemd(started, active='active', sub='running', pid=0):
    return (0, 'ActiveState=%s\nSubState=%s\nExecMainStartTimestamp=@%d\nMainPID=%d\nLoadState=loaded\n'
            % (active, sub, started, pid), '')


@pytest.fixture
def served():
    """A URL this test's own process listens on: a unit whose MainPID is this process serves it (the gate's proof,
    read from /proc as on a real host)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        sock.listen(1)
        yield 'http://127.0.0.1:%d' % sock.getsockname()[1]


SERVING = os.getpid()  # the main process of the unit that serves ``served``


def params(state_dir, **over):
    meminfo = os.path.join(str(state_dir), '..', 'meminfo')
    with open(meminfo, 'w') as handle:
        handle.write('MemTotal:       1000 kB\nMemAvailable:    500 kB\n')
    base = dict(DEFAULTS, state_dir=str(state_dir), instances=None, paused=False, lock_timeout=5.0,
                status_timeout=30.0, log_lines=200, history_max_bytes=1024 * 1024, kernel_log='', py_spy='',
                meminfo=meminfo, nvidia_smi='', evidence_timeout=60.0, setting_prefix='vllm_watchdog_')  # as the role
    base.update(over)
    return base


def item(name='vllm', **over):
    return dict({'name': name, 'kind': 'backend', 'restart_method': 'systemd', 'service': 'vllm-%s' % name}, **over)


def make(tmp_path, answers=None, check_mode=False, **over):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750, exist_ok=True)
    runner, clock = Runner(answers), Clock(START)
    return _gate.Gate(params(state, **over), check_mode=check_mode, run=runner, clock=clock), runner, clock, state


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize('state, started_ago, action, words, asked', [
    # {pid}: SERVING, filled in by the test (a test id must be the same in every pytest-xdist worker)
    ('stuck', 7200, 'restart', 'stuck; the systemd unit vllm-vllm: its main process {pid}',
     ['systemctl', 'journalctl']),
    ('stuck', 60, 'none', 'within the start-up grace', ['systemctl']),
    # Runs, but nothing shows that the URL is the service: a human, never a restart.
    ('down', 7200, 'fail', 'nothing shows that the URL is this service', ['systemctl']),
    ('idle', 7200, 'none', '', []),  # a healthy server: the service manager is not asked
    ('unknown', 7200, 'none', '', []),
])
def test_one_instance_decided_from_the_runner_s_answer_at_the_clock_s_time(
        tmp_path, served, state, started_ago, action, words, asked):
    answers = {'systemctl': systemd(START - started_ago, pid=SERVING if state == 'stuck' else 0),
               'journalctl': (0, 'log line 1\nlog line 2\n', '')}
    gate, runner, clock, statedir = make(tmp_path, answers)
    url = served if state == 'stuck' else None
    result = gate.run([item(verdict={'state': state, 'reason': 'why'}, url=url)], {}, None)[0]
    assert result['action'] == action, result
    assert words.format(pid=SERVING) in result['decision']
    assert runner.names() == asked
    if state == 'down':
        assert result['url_proof'] == {'default_url': False, 'listens': None, 'why': 'the URL names no port',
                                       'unit': 'the systemd unit vllm-vllm', 'can_prove': True, 'assumed': False}
    if asked:
        argv, timeout, keep = runner.calls[0]
        assert argv[:3] == ['systemctl', 'show', 'vllm-vllm'] and timeout == 30.0 and keep == MAX_OUTPUT
    history = json.loads((statedir / 'vllm.json').read_text())
    assert history['last_check'] == START and history['last_action'] == action
    assert history['restarts'] == ([START] if action == 'restart' else [])
    record = lines(statedir / 'vllm.verdicts.jsonl')[-1]
    assert (record['time'], record['state'], record['action']) == (STAMP, state, action)


def test_a_restart_keeps_the_evidence_with_the_service_s_log_named_by_the_clock(tmp_path, served):
    answers = {'systemctl': systemd(START - 7200, pid=SERVING), 'journalctl': (0, 'old\n' + 'the last line\n', '')}
    gate, runner, clock, statedir = make(tmp_path, answers, log_lines=1)
    result = gate.run([item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)], {}, None)[0]
    assert result['action'] == 'restart'
    stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(START))
    assert result['evidence_file'] == str(statedir / 'evidence' / ('vllm-%s.json' % stamp))
    evidence = json.loads(open(result['evidence_file']).read())
    assert evidence['logs'] == ['the last line']
    assert evidence['instance'] == 'vllm' and evidence['restart_method'] == 'systemd'
    argv, timeout, keep = runner.calls[1]
    assert argv[0] == 'journalctl' and '--lines' in argv and timeout == 30.0 and keep == 2048
    assert [v['action'] for v in evidence['recent_verdicts']] == ['restart']


def test_each_instance_s_evidence_is_its_own_never_the_last_one_s(tmp_path):
    """No hidden "current" instance: the evidence of one is taken with that one's log command."""
    gate, runner, clock, statedir = make(tmp_path, {'cat-a': (0, 'log of a\n', ''), 'cat-b': (0, 'log of b\n', '')})
    stuck = {'state': 'stuck', 'reason': 'frozen'}
    # The command method names no process: the inventory says what it restarts (assume_url_is_service).
    items = [item('a', restart_method='command', logs_command=['cat-a'], verdict=stuck, assume_url_is_service=True),
             item('b', restart_method='command', logs_command=['cat-b'], verdict=stuck, assume_url_is_service=True)]
    results = gate.run(items, {}, None)
    assert [r['action'] for r in results] == ['restart', 'restart'], results
    for name, result in zip('ab', results):
        evidence = json.loads(open(result['evidence_file']).read())
        assert evidence['instance'] == name and evidence['logs'] == ['log of %s' % name]


@pytest.mark.parametrize('later, action, words', [
    (60, 'none', 'within the start-up grace'),  # the restart is the latest start
    (DEFAULTS['startup_grace'] + 60, 'fail', ''),  # the same hang within rehang_window, no reboot: a human
])
def test_the_next_run_is_decided_at_the_clock_s_new_time(tmp_path, served, later, action, words):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING)})
    stuck = [item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)]
    assert gate.run(stuck, {}, None)[0]['action'] == 'restart'
    clock.now += later
    result = gate.run(stuck, {}, None)[0]
    assert result['action'] == action and words in result['decision'], result
    assert json.loads((statedir / 'vllm.json').read_text())['last_check'] == START + later


def test_check_mode_asks_and_decides_and_writes_nothing(tmp_path, served):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING)}, check_mode=True,
                                         release_memory=True)
    result = gate.run([item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)], {}, None)[0]
    assert result['action'] == 'restart' and result['evidence_file'] is None
    # It names what it acts on and the exact commands.
    assert 'the systemd unit vllm-vllm' in result['decision']
    assert result['decision'].endswith('check mode: it would run systemctl stop vllm-vllm; then, once the memory is '
                                       'back, systemctl start vllm-vllm'), result['decision']
    assert runner.names() == ['systemctl']
    assert list(statedir.iterdir()) == []


def test_a_verdict_missing_from_the_results_is_unknown_with_the_reason_given(tmp_path):
    gate, runner, clock, statedir = make(tmp_path)
    results = gate.run([item('a'), item('b')], {'a': {'state': 'busy', 'reason': 'moving'}}, 'the job timed out')
    assert [(r['state'], r['reason']) for r in results] == [('busy', 'moving'), ('unknown', 'the job timed out')]


def test_a_lock_held_by_another_run_fails_that_instance_only(tmp_path):
    gate, runner, clock, statedir = make(tmp_path, lock_timeout=0.0)
    with open(str(statedir / 'a.lock'), 'a') as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        results = gate.run([item('a', verdict={'state': 'idle'}), item('b', verdict={'state': 'idle'})], {}, None)
    assert [r['action'] for r in results] == ['fail', 'none']
    assert 'another watchdog run holds %s' % (statedir / 'a.lock') in results[0]['decision']


def test_a_planted_history_link_fails_the_instance_and_is_never_followed(tmp_path):
    gate, runner, clock, statedir = make(tmp_path)
    target = tmp_path / 'elsewhere.json'
    target.write_text('{}')
    os.symlink(str(target), str(statedir / 'vllm.json'))
    result = gate.run([item(verdict={'state': 'idle'})], {}, None)[0]
    assert result['action'] == 'fail' and 'symbolic link' in result['decision']
    assert target.read_text() == '{}'


@pytest.mark.parametrize('check_mode', [False, True])
def test_record_failure_writes_the_record_at_the_clock_s_time_and_masks_the_key(tmp_path, check_mode):
    key = 'sk-record-%s' % os.urandom(4).hex()
    gate, runner, clock, statedir = make(tmp_path, check_mode=check_mode, instances=[{'name': 'vllm', 'api_key': key}])
    reason = gate.record_failure('vllm', 'restart exited 1 (--api-key %s)' % key)
    path = statedir / 'vllm.restart-failed'
    assert reason.startswith('the restart of vllm failed (') and str(path) in reason and key not in reason
    if check_mode:
        assert not path.exists()
    else:
        record = json.loads(path.read_text())
        assert record['at'] == START and key not in record['error'] and 'restart exited 1' in record['error']
    assert runner.calls == []


def test_escalate_without_reboot_asks_a_human_and_records_the_step(tmp_path):
    gate, runner, clock, statedir = make(tmp_path)
    action, reason, hist = gate.escalate('vllm', 'the memory did not come back')
    assert action == 'fail', reason
    assert hist['last_action'] == 'fail'
    assert json.loads((statedir / 'vllm.json').read_text()) == hist
    assert json.loads((statedir / 'vllm.restart-failed').read_text()) == {'at': START,
                                                                          'error': 'the memory did not come back'}
    record = lines(statedir / 'vllm.verdicts.jsonl')[-1]
    assert (record['time'], record['action'], record['step']) == (STAMP, 'fail', True)


def test_escalate_with_reboot_reboots_and_counts_it(tmp_path):
    gate, runner, clock, statedir = make(tmp_path, reboot=True)
    action, reason, hist = gate.escalate('vllm', 'the memory did not come back')
    assert action == 'reboot', reason
    assert hist['reboots_total'] == 1 and hist['restarts_total'] == 0
    assert not (statedir / 'vllm.restart-failed').exists()


def test_escalate_over_a_damaged_history_asks_a_human_and_keeps_it(tmp_path):
    gate, runner, clock, statedir = make(tmp_path, reboot=True)
    (statedir / 'vllm.json').write_text('not json')
    action, reason, hist = gate.escalate('vllm', 'why')
    assert action == 'fail' and 'cannot be trusted' in reason and hist == {}
    assert (statedir / 'vllm.json').read_text() == 'not json'


def test_results_from_histories(tmp_path):
    gate, runner, clock, statedir = make(tmp_path)
    gate.run([item('a', verdict={'state': 'busy', 'reason': 'moving'})], {}, None)
    (statedir / 'b.json').write_text('[]')  # damaged: read as no history
    out = _gate.results_from_histories(str(statedir), ['a', 'b', 'c'])
    assert [(r['name'], r['state'], r['action']) for r in out] == [
        ('a', 'busy', 'none'), ('b', 'unknown', 'none'), ('c', 'unknown', 'none')]
    assert out[0]['history']['last_check'] == START


# -- before any restart: what it acts on serves the URL (issue 24) ------------------------------------------------

@pytest.fixture
def other_server():
    """Another process listening on a port of its own (another server of the host): (its pid, its URL)."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    proc = subprocess.Popen([sys.executable, '-c', 'import socket, sys, time\ns = socket.socket()\n'
                             's.bind(("127.0.0.1", 0)); s.listen(1)\nprint(s.getsockname()[1], flush=True)\n'
                             'time.sleep(120)'], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        yield proc.pid, 'http://127.0.0.1:%d' % port
    finally:
        proc.kill()
        proc.wait()


def test_a_stuck_url_is_never_restarted_through_another_server_s_unit(tmp_path, served, other_server):
    """The URL is the stuck server (this process listens on it); the unit named is another server's: a human is asked,
    and the decision names the URL, the unit and what each holds."""
    other_pid, other_url = other_server
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=other_pid)})
    result = gate.run([item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served, service='vllm-b')], {},
                      None)[0]
    assert result['action'] == 'fail', result
    port = served.rsplit(':', 1)[1]
    assert 'nothing shows that the systemd unit vllm-b serves %s' % served in result['decision']
    assert 'its main process %d' % other_pid in result['decision']
    assert 'listens on %s, not on 127.0.0.1:%s' % (other_url[len('http://'):], port) in result['decision']
    assert '127.0.0.1:%s is held by process %d' % (port, os.getpid()) in result['decision']
    assert json.loads((statedir / 'vllm.json').read_text())['restarts'] == []
    # The same unit for its own URL: restarted.
    clock.now += 10
    own = gate.run([item('b', verdict={'state': 'stuck', 'reason': 'frozen'}, url=other_url, service='vllm-b')], {},
                   None)[0]
    assert own['action'] == 'restart', own


def test_a_unit_systemd_does_not_know_is_never_restarted(tmp_path, served):
    not_found = (0, 'ActiveState=inactive\nSubState=dead\nExecMainStartTimestamp=\nMainPID=0\nLoadState=not-found\n', '')
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': not_found})
    for state in ('stuck', 'down'):
        result = gate.run([item(verdict={'state': state, 'reason': 'x'}, url=served, service='vllm-typo')], {},
                          None)[0]
        assert result['action'] == 'fail', result
        assert 'the systemd unit vllm-typo does not exist (no such unit (systemctl show: LoadState=not-found))' \
            in result['decision']


# -- a failed restart: recorded as failed, no grace from it (issue 24) ----------------------------------------------

def test_a_failed_restart_is_recorded_and_gives_no_grace_once_a_human_clears_it(tmp_path, served):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING)})
    stuck = [item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)]
    assert gate.run(stuck, {}, None)[0]['action'] == 'restart'
    clock.now += 30
    said = gate.record_failure('vllm', 'systemctl stop vllm-vllm exited 5: Unit vllm-vllm.service not found.')
    assert 'gives no start-up grace; it counts against the restart budget' in said
    history = json.loads((statedir / 'vllm.json').read_text())
    assert history['failed_restarts'] == [START]
    assert history['last_step']['outcome'] == 'failed' and 'exited 5' in history['last_step']['why']
    record = lines(statedir / 'vllm.verdicts.jsonl')[-1]
    assert (record['action'], record['step']) == ('restart failed', True)
    assert record['outcome'].startswith('failed: systemctl stop vllm-vllm exited 5')
    clock.now += 14
    held = gate.run(stuck, {}, None)[0]
    assert held['action'] == 'fail' and 'remove %s' % (statedir / 'vllm.restart-failed') in held['decision']
    (statedir / 'vllm.restart-failed').unlink()  # the human fixed it and removed the record, as told
    again = gate.run(stuck, {}, None)[0]
    assert again['action'] == 'restart', again
    assert 'within the start-up grace' not in again['decision']
    assert 'restart 2 of at most 3' in again['decision']


def test_a_restart_that_worked_is_recorded_with_the_verdict_after_it(tmp_path, served):
    gate, runner, clock, statedir = make(tmp_path, {'systemctl': systemd(START - 7200, pid=SERVING)})
    assert gate.run([item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)], {}, None)[0]['action'] \
        == 'restart'
    clock.now += 60
    assert gate.record_outcome('vllm', 'idle', 'nothing in flight') == 'now idle (nothing in flight)'
    history = json.loads((statedir / 'vllm.json').read_text())
    assert history['last_step']['outcome'] == 'idle' and not history.get('failed_restarts')
    assert history['outcomes'] == [{'at': START, 'recorded': START + 60, 'outcome': 'idle',
                                    'why': 'nothing in flight'}]
    record = lines(statedir / 'vllm.verdicts.jsonl')[-1]
    assert (record['state'], record['action'], record['outcome']) == ('idle', 'restarted', 'now idle (nothing in flight)')
    # ... and its grace holds.
    clock.now += 60
    later = gate.run([item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served)], {}, None)[0]
    assert later['action'] == 'none' and 'within the start-up grace' in later['decision']


# -- what a human is asked to look at is there (issue 24) -------------------------------------------------------------

def test_the_unknown_streak_keeps_the_evidence_it_asks_a_human_to_look_at(tmp_path):
    answers = {'systemctl': systemd(START - 7200), 'journalctl': (0, 'vllm: first\nvllm: the last line\n', '')}
    gate, runner, clock, statedir = make(tmp_path, answers)
    unknown = [item(verdict={'state': 'unknown', 'reason': 'HTTP 401 (check api_key)'})]
    for dummy in range(2):
        assert gate.run(unknown, {}, None)[0]['evidence_file'] is None
        clock.now += 300
    result = gate.run(unknown, {}, None)[0]
    assert result['action'] == 'fail' and 'look at the evidence' in result['decision']
    evidence = json.loads(open(result['evidence_file']).read())
    assert evidence['logs'] == ['vllm: first', 'vllm: the last line']
    assert evidence['service']['status'] == 'active/running'  # asked for the human, though unknown never restarts
    assert [v['state'] for v in evidence['recent_verdicts']] == ['unknown'] * 3
    assert result['evidence'].endswith('2 line(s) of its log, the last: vllm: the last line')
