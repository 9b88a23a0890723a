"""modelops.vllm.watchdog_history as a process: it reads a state directory, writes nothing, and says in one line what
it cannot read; a bad window or bound fails the task in one line."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.support.paths import COLLECTIONS, REPO

MODULE = os.path.join(REPO, 'plugins', 'modules', 'watchdog_history.py')


def run(tmp_path, **params):
    path = str(tmp_path / ('args-%d.json' % time.monotonic_ns()))
    with open(path, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': params}, handle)
    proc = subprocess.run([sys.executable, MODULE, path], capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    return json.loads(proc.stdout)


def stamp(seconds_ago):
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() - seconds_ago))


def test_it_reads_every_instance_of_the_state_directory_and_writes_nothing(tmp_path):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    lines = [{'time': stamp(600), 'state': 'busy', 'action': 'none', 'reason': 'moving'},
             {'time': stamp(300), 'state': 'stuck', 'action': 'restart', 'reason': 'frozen', 'decision': 'restart: stuck'},
             {'time': stamp(0), 'state': 'idle', 'action': 'none', 'reason': 'answered'}]
    (state / 'vllm.verdicts.jsonl').write_text(''.join(json.dumps(line) + '\n' for line in lines))
    old = stamp(90000)
    (state / 'chat.verdicts.jsonl.1').write_text(json.dumps(dict(lines[0], time=old)) + '\n')
    before = sorted(os.listdir(str(state)))
    result = run(tmp_path, state_dir=str(state), host='gb10-01')
    assert result['changed'] is False and result['found'] is True
    assert [i['name'] for i in result['instances']] == ['chat', 'vllm']
    # its one run is older than the window (24h): none in it, and the last one said
    assert result['lines'][0] == 'gb10-01/chat: no run since %s; the last run %s: busy, no action' % (
        result['since'], old)
    restart = [line for line in result['lines'] if 'watchdog: restart (' in line]
    assert len(restart) == 1 and restart[0].startswith('gb10-01/vllm: %s stuck - frozen; watchdog: restart (restart: '
                                                       'stuck) -> next run %s: idle' % (lines[1]['time'], lines[2]['time']))
    assert sorted(os.listdir(str(state))) == before
    result = run(tmp_path, state_dir=str(state), host='gb10-01', since='all', names=['chat'], show='all')
    assert result['since'] is None and len(result['instances']) == 1 and result['instances'][0]['runs'] == 1


def test_a_missing_state_directory_is_a_line_not_a_failure(tmp_path):
    result = run(tmp_path, state_dir=str(tmp_path / 'nothing'), host='gb10-01')
    assert result.get('failed') is not True and result['found'] is False
    assert result['lines'] == ['gb10-01/*: no watchdog history here: %s does not exist (the watchdog never ran on this '
                               'host, or vllm_watchdog_state_dir points elsewhere)' % (tmp_path / 'nothing')]


@pytest.mark.parametrize('params, message', [
    ({'since': 'yesterday'}, 'since must be a duration (24h, 90m, 2d, 1w, 1h30m)'),
    ({'max_bytes': 10}, 'max_bytes must be from 4096 to 67108864, got 10'),
    ({'max_lines': 0}, 'max_lines must be from 1 to 10000, got 0'),
    ({'show': 'some'}, 'value of show must be one of: changes, actions, all, got: some'),
])
def test_a_bad_setting_fails_the_task_in_one_line(tmp_path, params, message):
    result = run(tmp_path, state_dir=str(tmp_path), **params)
    assert result['failed'] is True and message in result['msg'] and '\n' not in result['msg'], result


def test_names_that_are_not_plain_file_names_are_said_not_read(tmp_path):
    (tmp_path / 'state').mkdir()
    result = run(tmp_path, state_dir=str(tmp_path / 'state'), host='h', names=['../etc/passwd', 'vllm'])
    assert result['lines'][0] == 'h/../etc/passwd: not read: not a plain file name'
    assert [i['name'] for i in result['instances']] == ['vllm']
