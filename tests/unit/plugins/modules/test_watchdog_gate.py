"""modelops.vllm.watchdog_gate as a process: the lock, the history on disk, the pause files."""

import fcntl
import json
import os
import subprocess
import sys
import time

from modelops_paths import COLLECTIONS, REPO

MODULE = os.path.join(REPO, 'plugins', 'modules', 'watchdog_gate.py')
RUNNING_LONG = {'running': True, 'started_at': time.time() - 7200, 'status': 'active/running'}


def start_gate(state_dir, check_mode=False, **args):
    params = dict({'name': 'vllm', 'state_dir': str(state_dir), 'state': 'stuck', 'service': RUNNING_LONG}, **args)
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


def test_pause_file_written_while_waiting_for_the_lock_is_honoured(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    with open(state / 'vllm.lock', 'a') as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        proc = start_gate(state)
        time.sleep(1.0)  # the gate is now waiting for the lock
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
