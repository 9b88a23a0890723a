"""modelops.vllm.evidence as Ansible runs it (its arguments on stdin), against the stand-in systemctl and journalctl:
the file it keeps of a service's processes, what it says in check mode, and what it refuses."""

import json
import os
import subprocess
import sys
import time

from urllib.parse import quote

import pytest

from tests.support.paths import COLLECTIONS, REPO
from tests.support.standins import standins_path


def run_module(args, tmp_path, check_mode=False, services=None):
    config = tmp_path / 'standins.json'
    config.write_text(json.dumps({'control_url': 'http://127.0.0.1:1', 'services': services or {}}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS, PATH=standins_path(), MODELOPS_STANDIN_CONFIG=str(config),
               MODELOPS_STANDIN_LOG=str(tmp_path / 'argv.log'))
    stdin = {'ANSIBLE_MODULE_ARGS': dict(args, _ansible_check_mode=check_mode)}
    proc = subprocess.run([sys.executable, os.path.join(REPO, 'plugins', 'modules', 'evidence.py')],
                          input=json.dumps(stdin), capture_output=True, text=True, timeout=120, check=False, env=env)
    return json.loads(proc.stdout)


@pytest.fixture
def rank(tmp_path):
    """A process of the rank's service (the unit's main process, as systemd would name it)."""
    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])
    yield {'vllm-rank1': {'state': 'running', 'started_at': time.time() - 60, 'main_pid': proc.pid,
                          'logs': ['INFO rank 1 waits in the collective']}}
    proc.kill()
    proc.wait()


def args_for(tmp_path, **over):
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text('MemTotal:  128000000 kB\nMemAvailable:  4000000 kB\n')
    return dict(dict(name='big-rank1', state_dir=str(tmp_path / 'state'), service='vllm-rank1', py_spy='',
                     nvidia_smi='', kernel_log='', meminfo=str(meminfo), log_lines=5), **over)


def test_the_evidence_of_the_service_s_processes_is_kept_in_the_state_dir(tmp_path, rank):
    (tmp_path / 'state').mkdir(mode=0o750)
    result = run_module(args_for(tmp_path), tmp_path, services=rank)
    assert not result.get('failed'), result
    assert result['changed'] and os.path.dirname(result['file']) == str(tmp_path / 'state' / 'evidence')
    assert os.path.basename(result['file']).startswith('big-rank1-') and result['file'].endswith('.json')
    kept = json.loads(open(result['file']).read())
    assert kept['service']['running'] is True and kept['service']['main_pid'] == rank['vllm-rank1']['main_pid']
    assert kept['hang']['meminfo']['available'] == '3.8 GiB', kept['hang']['meminfo']
    assert 'INFO rank 1 waits in the collective' in ' '.join(kept['logs'])
    assert result['summary'].startswith('no stacks (') and 'MemAvailable 3.8 GiB' in result['summary'], result
    calls = [json.loads(line)['argv'][:2] for line in (tmp_path / 'argv.log').read_text().splitlines()]
    assert ['systemctl', 'show'] in calls and ['journalctl', '--unit'] in calls  # asked, nothing stopped
    assert not any(argv[1:2] in (['stop'], ['start'], ['restart']) for argv in calls)


def test_check_mode_reads_and_writes_nothing(tmp_path, rank):
    result = run_module(args_for(tmp_path), tmp_path, check_mode=True, services=rank)
    assert not result.get('failed') and not result['changed'] and result['file'] is None, result
    assert not (tmp_path / 'state').exists() and not (tmp_path / 'argv.log').exists()


def test_no_key_reaches_the_file_or_the_result(tmp_path):
    """A rank started with the head's command line copied: the key in its log (vLLM's start-up line, the flag, the
    environment) and in its process's arguments, which the file keeps; the configured key in any spelling masked, and
    vLLM's spellings of another key too."""
    key, other = 'sk-rank\'"/key', 'sk-other-key'
    proc = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '--api-key', key])
    try:
        services = {'vllm-rank1': {'state': 'running', 'started_at': time.time() - 60, 'main_pid': proc.pid, 'logs': [
            "INFO non-default args: {'api_key': ['%s'], 'headless': True}" % key,
            'vllm serve tiny --headless --api-key %s' % other, 'env VLLM_API_KEY=%s' % other,
            'a key as JSON %s and quoted %s' % (json.dumps(key), quote(key, safe=''))]}}
        (tmp_path / 'state').mkdir(mode=0o750)
        result = run_module(args_for(tmp_path, api_key=key), tmp_path, services=services)
    finally:
        proc.kill()
        proc.wait()
    assert not result.get('failed') and result['file'], result
    kept = open(result['file']).read()
    for text in (kept, json.dumps(result)):
        for spelling in (key, json.dumps(key)[1:-1], quote(key, safe=''), 'sk-rank', other):
            assert spelling not in text, (spelling, text[:3000])
    assert '********' in kept and 'non-default args' in kept


@pytest.mark.parametrize('over, words', [
    ({'name': '../x'}, "name must be a plain file name, got '../x'"),
    ({'evidence_timeout': -1}, 'evidence_timeout must be a number from 0'),
    ({'method': 'compose'}, 'restart_method compose needs compose_project_dir'),
])
def test_what_it_refuses_is_one_sentence(tmp_path, over, words):
    result = run_module(args_for(tmp_path, **over), tmp_path)
    assert result.get('failed') and words in result['msg'], result
