"""modelops.vllm.watchdog_gate as a process: the lock, the history on disk, the pause files."""

import fcntl
import json
import os
import subprocess
import sys
import time

import pytest

from tests.support.paths import COLLECTIONS, REPO

MODULE = os.path.join(REPO, 'plugins', 'modules', 'watchdog_gate.py')
RUNNING_LONG = {'running': True, 'started_at': time.time() - 7200, 'status': 'active/running'}


def start_gate(state_dir, check_mode=False, raw=None, **args):
    params = raw or dict({'name': 'vllm', 'state_dir': str(state_dir), 'state': 'stuck', 'service': RUNNING_LONG}, **args)
    if check_mode:
        params['_ansible_check_mode'] = True
    path = os.path.join(os.path.dirname(str(state_dir)), 'args-%d.json' % time.monotonic_ns())
    with open(path, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': params}, handle)
    environ = dict(os.environ, PYTHONPATH=COLLECTIONS)
    return subprocess.Popen([sys.executable, MODULE, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environ, text=True)


def gate(state_dir, **args):
    proc = start_gate(state_dir, **args)
    out, err = proc.communicate(timeout=60)
    return json.loads(out or err)


def gate_raw(state_dir, params):
    proc = start_gate(state_dir, raw=params)
    out, err = proc.communicate(timeout=60)
    return json.loads(out or err)


def test_first_run_restarts_and_records_then_the_next_does_not(tmp_path):
    state = tmp_path / 'state'
    first = gate(state)
    assert first['action'] == 'restart', first
    history = json.loads((state / 'vllm.json').read_text())
    assert len(history['restarts']) == 1 and history['last_state'] == 'stuck'
    second = gate(state)
    assert second['action'] == 'none' and 'within the start-up grace' in second['reason']


def test_check_mode_records_nothing(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    result = gate(state, check_mode=True)
    assert result['action'] == 'restart'
    assert not (state / 'vllm.json').exists()


def wait_holding_open(pid, path, timeout=60.0):
    """Wait until process ``pid`` has ``path`` open: the gate opens its lock file right before it tries to take the
    lock, and then polls it until it gets it (the event, not a guess of how long Python takes to start)."""
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        try:
            fds = os.listdir('/proc/%d/fd' % pid)
        except OSError:
            fds = []
        for fd in fds:
            try:
                if os.readlink('/proc/%d/fd/%s' % (pid, fd)) == str(path):
                    return
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError('process %d did not open %s within %s s' % (pid, path, timeout))


def test_pause_file_written_while_waiting_for_the_lock_is_honoured(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    with open(state / 'vllm.lock', 'a') as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        proc = start_gate(state)
        wait_holding_open(proc.pid, state / 'vllm.lock')  # the gate is waiting for the lock now
        time.sleep(0.5)
        (state / 'paused').write_text('rollout in progress on this host\n')
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    out, err = proc.communicate(timeout=60)
    result = json.loads(out or err)
    assert result['action'] == 'none', result
    assert result['paused'] is True
    assert 'rollout in progress on this host' in result['reason']
    assert result['waited_for_lock'] >= 0.5


def test_instance_pause_file(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    (state / 'vllm.paused').write_text('')
    result = gate(state)
    assert result['action'] == 'none' and result['paused'] is True


def test_two_gates_at_once_restart_once(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    procs = [start_gate(state) for dummy in range(4)]
    actions = [json.loads(p.communicate(timeout=60)[0])['action'] for p in procs]
    assert sorted(actions) == ['none', 'none', 'none', 'restart']


# -- it fails closed ---------------------------------------------------------------

@pytest.mark.parametrize('setting, value', [
    ('restart_window', 0), ('restart_window', -5), ('restart_window', float('nan')), ('cooldown', -1),
    ('cooldown', float('inf')), ('startup_grace', float('nan')), ('max_restarts', -1), ('unknown_limit', 0),
    ('lock_timeout', float('nan')),
])
def test_settings_that_are_not_finite_numbers_in_range_fail_the_task(tmp_path, setting, value):
    result = gate(tmp_path / 'state', **{setting: value})
    assert result.get('failed') and 'invalid settings' in result['msg'] and setting in result['msg']
    assert not (tmp_path / 'state' / 'vllm.json').exists()


@pytest.mark.parametrize('text, why', [
    ('', 'empty'), ('{"restarts": [Infinity]}', 'finite'), ('{"restarts": [NaN]}', 'finite'),
    ('not json', 'not JSON'), ('[]', 'object'), ('{"restarts": ["yesterday"]}', 'finite'),
    ('{"restarts": [], "unknown_streak": -1}', 'count'),
])
def test_a_history_that_cannot_be_trusted_needs_a_human_never_a_fresh_budget(tmp_path, text, why):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    (state / 'vllm.json').write_text(text)
    result = gate(state)
    assert result['action'] == 'fail', result
    assert why in result['reason'] and 'a human must look' in result['reason']
    assert (state / 'vllm.json').read_text() == text  # kept as it was, for the human


def test_restart_times_in_the_future_are_ignored_and_said(tmp_path):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    (state / 'vllm.json').write_text(json.dumps({'restarts': [time.time() + 30 * 86400]}))
    result = gate(state)
    assert result['action'] == 'restart', result
    assert 'in the future were ignored' in result['reason']


@pytest.mark.parametrize('started_at', ['2026-13-45T99:99:99Z', '1e999', '@inf', 'NaN', '9999-12-31T23:59:59Z'])
def test_an_impossible_service_start_time_never_crashes(tmp_path, started_at):
    service = {'running': True, 'started_at': started_at, 'status': 'active/running'}
    result = gate(tmp_path / 'state', service=service)
    assert result['action'] in ('restart', 'none'), result
    assert 'Traceback' not in json.dumps(result)


def test_vllm_s_own_start_time_feeds_the_grace(tmp_path):
    # No service manager to ask, but vLLM itself says it started 5 s ago.
    result = gate(tmp_path / 'state', service={}, process_start_time=time.time() - 5)
    assert result['action'] == 'none', result
    assert 'within the start-up grace' in result['reason'] and 'vLLM' in result['reason']


@pytest.mark.parametrize('name', ['vllm.json', 'paused', 'vllm.lock'])
def test_a_fifo_in_the_state_dir_never_hangs_the_gate(tmp_path, name):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    os.mkfifo(str(state / name))
    proc = start_gate(state)
    out, err = proc.communicate(timeout=30)
    result = json.loads(out or err)
    assert result.get('action') in ('fail', 'none', None), result
    if name == 'paused':
        assert result['paused'] is True and result['action'] == 'none'
    else:
        assert result.get('action') == 'fail' or result.get('failed'), result


def test_a_planted_lock_link_is_never_followed(tmp_path):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    target = tmp_path / 'created-by-the-gate'
    os.symlink(str(target), str(state / 'vllm.lock'))
    result = gate(state)
    assert not target.exists()
    assert result.get('action') == 'fail' and 'symbolic link' in result['reason'], result


@pytest.mark.parametrize('mode', [0o770, 0o777, 0o1777])
def test_a_state_dir_others_can_write_is_refused(tmp_path, mode):
    state = tmp_path / 'state'
    state.mkdir()
    os.chmod(str(state), mode)
    result = gate(state)
    assert result.get('failed') and 'writable by' in result['msg'], result
    assert list(state.iterdir()) == []


def test_a_failed_restart_keeps_failing_until_healthy_or_cleared(tmp_path):
    state = tmp_path / 'state'
    first = gate(state)
    assert first['action'] == 'restart'
    recorded = gate_raw(state, {'state_dir': str(state), 'record_failure': {'name': 'vllm', 'error': 'exit 1: boom'}})
    assert recorded['action'] == 'fail' and (state / 'vllm.restart-failed').exists()
    later = gate(state, service=dict(RUNNING_LONG, started_at=time.time() - 7200))
    assert later['action'] == 'fail', later
    assert 'exit 1: boom' in later['reason'] and str(state / 'vllm.restart-failed') in later['reason']
    healthy = gate(state, state='idle')
    assert healthy['action'] == 'none' and 'cleared' in healthy['reason']
    assert not (state / 'vllm.restart-failed').exists()


# -- a host's instances in one run ----------------------------------------------------

def test_every_instance_of_a_host_is_decided_in_one_run_with_a_verdict_line_each(tmp_path):
    state = tmp_path / 'state'
    instances = [
        {'name': 'chat', 'verdict': {'state': 'busy', 'reason': 'moving', 'running': 3}},
        {'name': 'embed', 'verdict': {'state': 'unknown', 'reason': 'slow /metrics'}},
        {'name': 'lb', 'kind': 'proxy', 'verdict': {'state': 'up', 'reason': 'models'}},
        {'name': 'bad', 'verdict': {'state': 'unknown', 'reason': 'x', 'error': 'api_key cannot be sent'}},
    ]
    result = gate_raw(state, {'state_dir': str(state), 'instances': instances})
    actions = dict((i['name'], i['action']) for i in result['instances'])
    assert actions == {'chat': 'none', 'embed': 'none', 'lb': 'none', 'bad': 'fail'}
    for name in ('chat', 'embed', 'lb', 'bad'):
        line = json.loads((state / ('%s.verdicts.jsonl' % name)).read_text().splitlines()[-1])
        assert line["action"] == actions[name]
    assert json.loads((state / 'chat.verdicts.jsonl').read_text())['running'] == 3


def test_the_verdicts_come_from_the_background_check_s_file_which_is_removed(tmp_path):
    state = tmp_path / 'state'
    results = tmp_path / 'j123.456'
    results.write_text(json.dumps({'changed': False, 'servers': [
        {'name': 'vllm', 'state': 'stuck', 'reason': 'frozen', 'line': 'vllm: stuck - frozen'}]}))
    result = gate_raw(state, {'state_dir': str(state), 'results_file': str(results),
                              'instances': [{'name': 'vllm', 'restart_method': 'command'}]})
    assert result['instances'][0]['state'] == 'stuck'
    assert not results.exists()


def test_a_background_check_that_failed_gives_unknown_not_a_crash(tmp_path):
    state = tmp_path / 'state'
    results = tmp_path / 'j1.2'
    results.write_text(json.dumps({'failed': True, 'msg': 'Timeout exceeded'}))
    result = gate_raw(state, {'state_dir': str(state), 'results_file': str(results),
                              'instances': [{'name': 'vllm'}]})
    assert result['instances'][0]['state'] == 'unknown'
    assert 'Timeout exceeded' in result['instances'][0]['reason']


def test_the_verdicts_come_from_the_controller_s_check_by_host_and_instance(tmp_path):
    """check_results: one check of the whole play; this host's instances take the verdicts named <host>/<instance>,
    never another host's of the same instance name, and an instance without one is unknown."""
    state = tmp_path / 'state'
    servers = [{'name': 'gb10-02/chat', 'state': 'stuck', 'reason': 'frozen (the other host)'},
               {'name': 'gb10-01/chat', 'state': 'busy', 'reason': 'moving'},
               {'name': 'gb10-01', 'state': 'stuck', 'reason': 'a server named after the host alone'},
               {'state': 'stuck', 'reason': 'no name'}]
    result = gate_raw(state, {'state_dir': str(state), 'host': 'gb10-01', 'check_results': servers,
                              'instances': [{'name': 'chat', 'restart_method': 'command'},
                                            {'name': 'embed', 'restart_method': 'command'}]})
    got = dict((i['name'], (i['state'], i['action'], i['reason'])) for i in result['instances'])
    assert got['chat'][:2] == ('busy', 'none'), result
    assert got['embed'][:2] == ('unknown', 'none') and 'no verdict' in got['embed'][2], result


def test_a_check_that_could_not_start_makes_every_instance_unknown_with_its_reason(tmp_path):
    state = tmp_path / 'state'
    result = gate_raw(state, {'state_dir': str(state), 'check_error': 'the background check could not start: disk full',
                              'instances': [{'name': 'chat'}, {'name': 'embed'}]})
    assert [(i['state'], i['action']) for i in result['instances']] == [('unknown', 'none')] * 2, result
    assert all('disk full' in i['reason'] for i in result['instances']), result


@pytest.mark.parametrize('params', [
    {'check_results': [], 'check_error': 'x'},
    {'check_results': [], 'results_file': '/nonexistent'},
    {'check_error': 'x', 'results_file': '/nonexistent'},
    {'check_results': []},  # no host: nothing to tell this host's verdicts by
], ids=['results-and-error', 'results-and-file', 'error-and-file', 'results-without-host'])
def test_one_source_of_verdicts_at_a_time(tmp_path, params):
    state = tmp_path / 'state'
    result = gate_raw(state, dict({'state_dir': str(state), 'instances': [{'name': 'chat'}]}, **params))
    assert result.get('failed') is True, result
    assert not state.exists(), 'a gate refused for its arguments decided nothing'


def test_the_verdict_history_rotates_at_its_size_bound(tmp_path):
    state = tmp_path / 'state'
    for dummy in range(30):
        gate(state, state='busy', reason='x' * 400, history_max_bytes=4096)
    sizes = [os.path.getsize(str(path)) for path in state.glob('vllm.verdicts.jsonl*')]
    assert len(sizes) == 3 and max(sizes) <= 4096


def test_the_textfile_holds_the_verdicts_as_metrics_node_exporter_can_read(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families
    state = tmp_path / 'state'
    textfile = tmp_path / 'textfile' / 'vllm_watchdog.prom'
    textfile.parent.mkdir()
    instances = [{'name': 'chat', 'verdict': {'state': 'busy', 'reason': 'moving'}},
                 {'name': 'em"bed', 'verdict': {'state': 'unknown', 'reason': 'slow'}}]
    gate_raw(state, {'state_dir': str(state), 'instances': instances, 'textfile': str(textfile)})
    samples = dict(((s.name, tuple(sorted(s.labels.items()))), s.value)
                   for family in text_string_to_metric_families(textfile.read_text()) for s in family.samples)
    assert samples[('vllm_watchdog_verdict', (('state', 'busy'), ('vllm_instance', 'chat')))] == 1
    assert samples[('vllm_watchdog_verdict', (('state', 'idle'), ('vllm_instance', 'chat')))] == 0
    assert samples[('vllm_watchdog_verdict', (('state', 'unknown'), ('vllm_instance', 'em"bed')))] == 1
    assert samples[('vllm_watchdog_needs_human', (('vllm_instance', 'chat'),))] == 0
    assert samples[('vllm_watchdog_restarts_total', (('vllm_instance', 'chat'),))] == 0
    assert abs(samples[('vllm_watchdog_last_run_timestamp_seconds', (('vllm_instance', 'chat'),))] - time.time()) < 60
    assert oct(os.stat(str(textfile)).st_mode & 0o777) == '0o644'
    assert [p.name for p in textfile.parent.iterdir()] == ['vllm_watchdog.prom']  # no temporary file left


def test_restarts_total_only_grows(tmp_path):
    state = tmp_path / 'state'
    textfile = tmp_path / 'vllm_watchdog.prom'
    stuck = [{'name': 'vllm', 'verdict': {'state': 'stuck', 'reason': 'frozen'}, 'restart_method': 'command',
              'assume_url_is_service': True}]
    # rehang_window 0: a hang right after a restart is restarted again (by default the ladder asks a human instead).
    first = gate_raw(state, {'state_dir': str(state), 'instances': stuck, 'textfile': str(textfile),
                             'startup_grace': 0, 'cooldown': 0, 'rehang_window': 0})
    assert first['instances'][0]['action'] == 'restart'
    gate_raw(state, {'state_dir': str(state), 'instances': stuck, 'textfile': str(textfile), 'startup_grace': 0,
                     'cooldown': 0, 'rehang_window': 0})
    assert 'vllm_watchdog_restarts_total{vllm_instance="vllm"} 2' in textfile.read_text()


def test_a_cut_verdict_line_loses_nothing_and_the_evidence_names_it(tmp_path):
    state = tmp_path / 'state'
    state.mkdir(mode=0o700)
    verdicts = state / 'vllm.verdicts.jsonl'
    verdicts.write_text('{"action": "none", "state": "busy", "time": "2026-12-01T11:42:15Z"}\n{"action": "no')
    result = gate(state)
    assert result['action'] == 'restart', result
    lines = verdicts.read_text().splitlines()
    assert lines[1] == '{"action": "no'  # the cut line stays as it was, on its own line
    record = json.loads(lines[2])  # the restart's own record is whole and readable
    assert (record['state'], record['action']) == ('stuck', 'restart')
    evidence = json.loads(open(result['instances'][0]['evidence_file']).read())
    assert [(v['state'], v['action']) for v in evidence['recent_verdicts']] == [('busy', 'none'), ('stuck', 'restart')]
    assert evidence['damaged_verdict_lines'] == ['%s line 2 is not a JSON object: %r' % (verdicts, '{"action": "no')]


@pytest.mark.parametrize('host', [None, 'gb10-01'])
def test_a_textfile_that_cannot_be_written_is_said_in_the_result_a_warning_and_the_facts(tmp_path, host):
    state = tmp_path / 'state'
    textfile = tmp_path / 'missing-dir' / 'vllm_watchdog.prom'
    params = {'state_dir': str(state), 'textfile': str(textfile),
              'instances': [{'name': 'vllm', 'verdict': {'state': 'idle', 'reason': 'ok'}}]}
    if host:
        params['host'] = host
    result = gate_raw(state, params)
    assert not result.get('failed'), result
    # The same words on every host: the directory that is missing, never the name of a temporary file.
    assert result['textfile_error'] == (
        'the textfile %s could not be written (its directory %s does not exist): Prometheus gets no vllm_watchdog_* '
        'metric from this host, so no alert can fire on it' % (textfile, textfile.parent))
    if host:
        # The role's gate: its results carry it, and the role says it once; no warning on every host.
        assert not result.get('warnings'), result
        facts = result['ansible_facts']['vllm_watchdog_results']
        assert [f['textfile_error'] for f in facts] == [result['textfile_error']]
    else:
        assert result['textfile_error'] in json.dumps(result['warnings'])  # ansible-core 2.19's warning records
    assert not textfile.parent.exists()  # never created behind the operator's back


def test_the_key_never_reaches_the_evidence_the_history_or_the_result(tmp_path):
    """vLLM's start-up line carries the key (``'api_key': [...]``); so can a reason, a log line, a failure."""
    key = 'sk-gate-%s' % os.urandom(6).hex()
    other = 'sk-unconfigured-%s' % os.urandom(6).hex()  # not configured here, but spelled as vLLM spells a key
    log = ("INFO 12-01 11:02:03 [utils.py:233] non-default args: {'model': '/models/tiny', 'api_key': ['%s'], "
           "'port': 8000}\nINFO started with --api-key %s\nDEBUG Authorization: Bearer %s" % (key, other, other))
    state = tmp_path / 'state'
    logfile = tmp_path / 'vllm.log'  # the service's log, as journalctl or docker logs would print it
    logfile.write_text(log + '\n')
    instance = {'name': 'vllm', 'restart_method': 'command', 'api_key': key, 'logs_command': ['cat', str(logfile)],
                'assume_url_is_service': True,
                'verdict': {'state': 'stuck', 'reason': 'frozen (key %s)' % key,
                            'evidence': {'notes': ['probe sent with Authorization: Bearer %s' % key]}}}
    result = gate_raw(state, {'state_dir': str(state), 'host': 'gb10-01', 'instances': [instance]})
    assert result['instances'][0]['action'] == 'restart', result
    evidence = open(result['instances'][0]['evidence_file']).read()
    assert 'non-default args' in evidence and 'started with --api-key' in evidence  # the log is kept ...
    failed = gate_raw(state, {'state_dir': str(state), 'record_failure': {
        'name': 'vllm', 'error': 'restart: vllm serve --api-key %s exited 1' % other}})
    logfile.unlink()
    for answer in (result, failed):
        answer.pop('invocation', None)  # what the test gave it, as given (ansible-core 2.21 leaves it out)
    everything = '\n'.join([json.dumps(result), json.dumps(failed)] + [
        path.read_text() for path in state.rglob('*') if path.is_file()])  # the gate's files
    for secret in (key, other):  # ... and no key anywhere
        assert secret not in everything
        assert secret[3:] not in everything
