"""modelops.vllm.health_results as Ansible runs it (its arguments on stdin): the verdicts of a background check,
collected from a real job of _jobs.start_background, its file removed; a failed check, a file that is not a check's
result and a bad timeout each fail in one sentence, never a traceback."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._jobs import start_background

from tests.support.paths import COLLECTIONS, REPO

SERVERS = [{'name': 'chat', 'state': 'busy', 'line': 'chat: busy', 'config_warnings': ['freeze_limit is low']},
           {'name': 'embed', 'state': 'idle', 'line': 'embed: idle'}]


def run(args, check_mode=False):
    payload = {'ANSIBLE_MODULE_ARGS': dict(args, _ansible_check_mode=check_mode)}
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'plugins', 'modules', 'health_results.py')],
                          input=json.dumps(payload), capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    assert 'Traceback' not in proc.stdout + proc.stderr, proc
    return json.loads(proc.stdout)


@pytest.mark.parametrize('check_mode', [False, True])
def test_the_verdicts_of_a_background_job_are_returned_as_if_checked_and_its_file_removed(tmp_path, check_mode):
    path = start_background(lambda: {'changed': False, 'servers': SERVERS, 'states': {}}, str(tmp_path / 'checks'), 30)
    result = run({'results_file': path, 'results_timeout': 20}, check_mode)
    assert not result.get('failed'), result
    assert [s['name'] for s in result['servers']] == ['chat', 'embed']
    assert result['states'] == {'chat': 'busy', 'embed': 'idle'}
    assert sorted(result['ansible_facts']['vllm_health_servers']) == ['chat', 'embed']
    # the check's own advice, said once (ansible-core 2.19 returns a warning as an event, older ones as its text)
    assert [w['event']['msg'] if isinstance(w, dict) else w for w in result['warnings']] == ['chat: freeze_limit is low']
    assert not os.path.exists(path)


def test_a_check_that_found_servers_configured_wrong_fails_with_their_verdicts(tmp_path):
    path = start_background(lambda: {'failed': True, 'msg': 'the check cannot run as configured for chat (x)',
                                     'servers': SERVERS}, str(tmp_path / 'checks'), 30)
    result = run({'results_file': path})
    assert result['failed'] and result['msg'].startswith('the check cannot run as configured'), result
    assert result['states'] == {'chat': 'busy', 'embed': 'idle'} and 'ansible_facts' not in result


@pytest.mark.parametrize('content, words', [
    ('{"msg": "boom"}', 'the background check failed: boom'),
    ('{"servers": "garbage"}', 'the background check failed: no verdicts'),
    ('[1, 2]', 'the check did not finish within 0.5 s'),  # not a result: read again until the timeout
])
def test_a_file_that_is_not_a_check_s_result_fails_in_one_sentence(tmp_path, content, words):
    path = tmp_path / 'check-x.json'
    path.write_text(content)
    result = run({'results_file': str(path), 'results_timeout': 0.5})
    assert result['failed'] and result['msg'] == words, result


def test_items_that_are_not_servers_are_left_out_of_the_states_and_facts(tmp_path):
    path = tmp_path / 'check-y.json'
    path.write_text(json.dumps({'servers': [SERVERS[1], 'garbage', 7]}))
    result = run({'results_file': str(path)})
    assert result['states'] == {'embed': 'idle'} and list(result['ansible_facts']['vllm_health_servers']) == ['embed']


@pytest.mark.parametrize('timeout', [-1, 'nan', 2e9])
def test_a_timeout_out_of_range_is_refused_before_anything_is_read(tmp_path, timeout):
    path = tmp_path / 'check-z.json'
    path.write_text(json.dumps({'servers': SERVERS}))
    result = run({'results_file': str(path), 'results_timeout': timeout})
    assert result['failed'] and result['msg'].startswith('results_timeout must be '), result
    assert path.exists()  # nothing collected


def test_a_missing_file_is_named(tmp_path):
    result = run({'results_file': str(tmp_path / 'nothing.json'), 'results_timeout': 1})
    assert result['failed'] and 'does not exist' in result['msg'], result
