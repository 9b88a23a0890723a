"""Issue 24: the watchdog restarts only the server it judged, never counts a restart that did nothing, and names
every mistake where it is made. Each case as a new user meets it: ``ansible-playbook`` with an inventory of their
own, the collection's playbooks by their FQCN, the service managers' stand-ins (tests/standins) first on PATH.

* Two servers on one host, each its own process (two simulators): each is restarted only when its own URL is
  stuck, on the first run (a unit that serves its URL is restarted as fast as before); a ``vllm_watchdog_service``
  that names the other server's unit restarts nothing, and the line names the URL, the unit and what each holds;
  check mode names the unit and the exact commands; a misspelled ``vllm_watchdog_service`` fails its host before
  any check, naming the unit that would have been restarted; a unit that does not exist is never "restarted".
* A restart that did nothing (a command that restarts nothing: the same process still answers) is a failed
  restart: recorded as failed in both histories, and once a human fixes it and removes the record, the next run
  restarts at once (never "within the start-up grace" of the restart that did nothing).
* A ``vllm_url`` that names an endpoint (``/v1``, ``/metrics``) or has no scheme: one line before any check, in the
  watchdog (that host only) and in the report-only check (red).
* ``unknown``'s line says the check's reason, and the unknown streak keeps the evidence it asks a human to read;
  ``down`` that stays down (a crash loop inside the grace) asks a human after ``vllm_watchdog_down_limit`` runs, with
  the service's log.
* One mistake is one line: a missing textfile directory on five hosts, the README's first check (no warning).
"""

import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from tests.simulator.client import run_simulator
from tests.support import ansible_run, servers
from tests.support.ports import block
from tests.support.standins import Standins

FIRST, LAST = block('mistakes')
MIDDLE = (FIRST + LAST) // 2
PORT_RANGE = '%d-%d' % (FIRST, MIDDLE)  # the module's simulator (conftest's sim)
OTHER_RANGE = '%d-%d' % (MIDDLE + 1, LAST)  # the second server's own simulator

pytestmark = pytest.mark.timeout(900)

ONELINE = {'ANSIBLE_STDOUT_CALLBACK': 'modelops.vllm.oneline', 'ANSIBLE_LOAD_CALLBACK_PLUGINS': 'true'}
FAST = {'vllm_watchdog_interval': 1, 'vllm_watchdog_probe_timeout': 5, 'vllm_watchdog_metrics_timeout': 5,
        'vllm_watchdog_ready_delay': 1, 'vllm_watchdog_ready_timeout': 30, 'vllm_watchdog_become': False,
        'vllm_watchdog_memory_timeout': 5,
        'vllm_watchdog_freeze_limit': 2}  # 2 x the interval: a stuck proven within one run's two waits

# The collection's playbook by its FQCN. What the role found and did is read from a JSON fact cache (as AWX keeps
# facts): a host that fails for a human is the only host of most runs here, and a play whose every host failed ends
# the playbook, so no later play could save it.
WATCHDOG_PLAY = """
- name: The collection's watchdog playbook
  ansible.builtin.import_playbook: modelops.vllm.watchdog
"""


@pytest.fixture(scope='module')
def other_sim():
    """A second simulator: the second server of a host is a process of its own, listening only on its own port."""
    with run_simulator(port_range=OTHER_RANGE) as client:
        yield client


def inventory(path, hosts, group_vars):
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}
    data = {'all': {'children': {'vllm': {'hosts': dict((name, dict(local, **hv)) for name, hv in hosts.items()),
                                          'vars': group_vars}}}}
    path.write_text(yaml.safe_dump(data))
    return str(path)


def watchdog(inv, standins=None, args=(), extra_env=None, workdir=None):
    environ = dict(ONELINE, **(standins.env() if standins else {}))
    environ.update(ANSIBLE_CACHE_PLUGIN='jsonfile', ANSIBLE_CACHE_PLUGIN_CONNECTION=str(workdir / 'facts'))
    environ.update(extra_env or {})
    workdir.mkdir(exist_ok=True)
    run = ansible_run.run_playbook(WATCHDOG_PLAY, inventory=inv, args=args, extra_env=environ, workdir=str(workdir),
                                   timeout=600)
    run.facts = str(workdir / 'facts')
    return run


def ansible_playbook(args, extra_env=None, cwd=None):
    return subprocess.run([ansible_run._bin('ansible-playbook')] + list(args),  # pylint: disable=protected-access
                          capture_output=True, text=True, env=ansible_run.env(dict(ONELINE, **(extra_env or {}))),
                          cwd=cwd, timeout=600, stdin=subprocess.DEVNULL, check=False)


def untag(value):
    """A value of the JSON fact cache as plain data (ansible-core 2.19 keeps each value with its tags)."""
    if isinstance(value, dict):
        if '__ansible_type' in value and 'value' in value:
            return untag(value['value'])
        return dict((key, untag(item)) for key, item in value.items())
    if isinstance(value, list):
        return [untag(item) for item in value]
    return value


def results(run, host):
    """{instance: result} of the host's vllm_watchdog_results in this run (from the fact cache)."""
    name = re.compile(r'^(s\d+_)?%s$' % re.escape(host))  # ansible-core 2.19's files are s1_<host>
    found = [path for path in glob.glob(os.path.join(run.facts, '*')) if name.match(os.path.basename(path))]
    if not found:
        return {}
    with open(found[0]) as handle:
        data = json.load(handle)
    if '__payload__' in data:
        data = json.loads(data['__payload__'])
    return dict((r['instance'], r) for r in untag(data).get('vllm_watchdog_results') or [])


def verdict_lines(state_dir, name):
    with open(os.path.join(state_dir, '%s.verdicts.jsonl' % name)) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def history(state_dir, name):
    with open(os.path.join(state_dir, '%s.json' % name)) as handle:
        return json.load(handle)


def stuck(sim, **options):
    return servers.create(sim, 'stuck', **dict({'max_num_seqs': 4, 'step_rate': 50}, **options))


def busy(sim):
    return servers.create(sim, 'busy', max_num_seqs=4, step_rate=50)


def port(url):
    return url.rsplit(':', 1)[1]


# --------------------------------------------------------------------------- two servers on one host

def two_servers(sim, other_sim, tmp_path, a_state, b_state):
    """Server a on the module's simulator (unit vllm-a), server b on its own (unit vllm-b): two processes."""
    a = servers.create(sim, a_state, max_num_seqs=4, step_rate=50)
    b = servers.create(other_sim, b_state, max_num_seqs=4, step_rate=50)
    standins = Standins(str(tmp_path), sim.base_url)
    standins.write({'vllm-a': {'server': a['id'], 'state': 'running', 'started_at': time.time() - 7200},
                    'vllm-b': {'server': b['id'], 'state': 'running', 'started_at': time.time() - 7200,
                               'control_url': other_sim.base_url}})
    return a, b, standins


def test_two_servers_on_one_host_each_restarted_only_when_its_own_url_is_stuck(sim, other_sim, tmp_path):
    a, b, standins = two_servers(sim, other_sim, tmp_path, 'stuck', 'busy')
    state_dir = str(tmp_path / 'state')
    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {}}, dict(
        FAST, vllm_watchdog_state_dir=state_dir, vllm_watchdog_restart_method='systemd',
        vllm_instances=[{'name': 'a', 'url': a['url'], 'service': 'vllm-a'},
                        {'name': 'b', 'url': b['url'], 'service': 'vllm-b'}]))
    first = watchdog(inv, standins, workdir=tmp_path / 'run1')
    assert first.rc == 0, first
    found = results(first, 'gb10-01')
    assert (found['a']['state'], found['a']['action']) == ('stuck', 'restarted'), found['a']
    assert (found['b']['state'], found['b']['action']) == ('busy', 'none'), found['b']
    # The proof, in the decision: vllm-a's process listens on a's port.
    assert re.search(r'the systemd unit vllm-a: its main process \d+ \(.*\) listens on 127\.0\.0\.1:%s'
                     % port(a['url']), found['a']['decision']), found['a']
    assert standins.stops() == [['systemctl', 'stop', 'vllm-a']] and \
        standins.restarts() == [['systemctl', 'start', 'vllm-a']], standins.calls()
    # The outcome is in both histories.
    assert history(state_dir, 'a')['last_step']['outcome'] == found['a']['after']
    assert [line['action'] for line in verdict_lines(state_dir, 'a')] == ['restart', 'restarted']

    # Now b is the stuck one (a, restarted, is idle): b only.
    servers.stuck(other_sim, b['id'])
    second = watchdog(inv, standins, workdir=tmp_path / 'run2')
    assert second.rc == 0, second
    found = results(second, 'gb10-01')
    assert (found['b']['state'], found['b']['action']) == ('stuck', 'restarted'), found['b']
    assert found['a']['action'] == 'none', found['a']
    assert standins.stops() == [['systemctl', 'stop', 'vllm-a'], ['systemctl', 'stop', 'vllm-b']], standins.calls()


def test_checked_from_the_controller_each_host_s_instance_is_judged_and_restarted_on_its_own(sim, other_sim, tmp_path):
    """vllm_watchdog_check_on_controller: one check of every instance of the play on the controller (the servers named
    <host>/<instance>), each verdict handed back to its own host's gate: the stuck one restarted, the busy one not."""
    a, b, standins = two_servers(sim, other_sim, tmp_path, 'stuck', 'busy')
    hosts = {'gb10-01': {'vllm_watchdog_state_dir': str(tmp_path / 'state-1'),
                         'vllm_instances': [{'name': 'chat', 'url': a['url'], 'service': 'vllm-a'}]},
             'gb10-02': {'vllm_watchdog_state_dir': str(tmp_path / 'state-2'),
                         'vllm_instances': [{'name': 'chat', 'url': b['url'], 'service': 'vllm-b'}]}}
    group_vars = dict(FAST, vllm_watchdog_check_on_controller=True, vllm_watchdog_controller_state_dir=str(tmp_path / 'ctl'))
    inv = inventory(tmp_path / 'inventory.yml', hosts, group_vars)
    run = watchdog(inv, standins, workdir=tmp_path / 'run')
    assert run.rc == 0, run
    one, two = results(run, 'gb10-01')['chat'], results(run, 'gb10-02')['chat']
    assert (one['state'], one['action']) == ('stuck', 'restarted'), one
    assert (two['state'], two['action']) == ('busy', 'none'), two
    assert standins.stops() == [['systemctl', 'stop', 'vllm-a']] and \
        standins.restarts() == [['systemctl', 'start', 'vllm-a']], standins.calls()
    # No check ran on the hosts: no background check's file in their state dirs.
    assert not glob.glob(str(tmp_path / 'state-*' / 'checks' / '*')), glob.glob(str(tmp_path / 'state-*' / '*'))


def test_a_service_that_names_the_other_server_s_unit_restarts_nothing_and_says_why(sim, other_sim, tmp_path):
    """vllm_url at the stuck server, vllm_watchdog_service naming the idle server's unit: before, the idle server was
    stopped and started and the stuck one left stuck."""
    a, b, standins = two_servers(sim, other_sim, tmp_path, 'stuck', 'idle')
    state_dir = str(tmp_path / 'state')
    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {'vllm_url': a['url'], 'vllm_watchdog_service': 'vllm-b'}},
                    dict(FAST, vllm_watchdog_state_dir=state_dir))

    check = watchdog(inv, standins, args=['--check'], workdir=tmp_path / 'check')
    assert 'gb10-01/vllm: stuck - watchdog: NEEDS A HUMAN' in check.stdout, check

    run = watchdog(inv, standins, workdir=tmp_path / 'run')
    assert run.rc == 2, run
    result = results(run, 'gb10-01')['vllm']
    assert (result['state'], result['action'], result['restarted']) == ('stuck', 'fail', False), result
    line = result['line']
    # The URL, the unit and what each holds.
    assert 'nothing shows that the systemd unit vllm-b serves %s' % a['url'] in line, line
    # (b's simulator listens on its control port and its servers' ports: the first three are named)
    assert re.search(r'the systemd unit vllm-b: its main process \d+ \(.*sim.py.*\) listens on 127\.0\.0\.1:\d+.*, '
                     r'not on 127\.0\.0\.1:%s; 127\.0\.0\.1:%s is held by process \d+ \(.*sim\.py'
                     % (port(a['url']), port(a['url'])), line), line
    assert [call for call in standins.calls() if call[1] != 'show'] == [], standins.calls()  # nothing stopped
    assert other_sim.get(b['id'])['restarts'] == 0 and sim.get(a['id'])['restarts'] == 0
    assert history(state_dir, 'vllm')['restarts'] == []

    # With the unit that serves the URL: check mode names it and the exact commands.
    right = inventory(tmp_path / 'right.yml', {'gb10-01': {'vllm_url': a['url'], 'vllm_watchdog_service': 'vllm-a'}},
                      dict(FAST, vllm_watchdog_state_dir=state_dir))
    check = watchdog(right, standins, args=['--check'], workdir=tmp_path / 'check-right')
    assert check.rc == 0, check
    result = results(check, 'gb10-01')['vllm']
    assert result['action'] == 'would restart (check mode)', result
    assert 'the systemd unit vllm-a: its main process' in result['line']
    assert result['line'].endswith('check mode: it would run systemctl stop vllm-a; then, once the memory is back, '
                                   'systemctl start vllm-a)'), result['line']


def test_a_misspelled_service_variable_fails_its_host_before_any_check(sim, other_sim, tmp_path):
    """vllm_watchdog_servce: the default unit (vllm, here the other server) would have been acted on."""
    a, b, standins = two_servers(sim, other_sim, tmp_path, 'stuck', 'idle')
    data = standins.data()
    data['services']['vllm'] = data['services'].pop('vllm-b')  # the default unit is the idle server's
    standins.write(data['services'])
    state_dir = str(tmp_path / 'state')
    sim.reset_counts(a['id'])
    inv = inventory(tmp_path / 'inventory.yml', {
        'gb10-01': {'vllm_url': a['url'], 'vllm_watchdog_servce': 'vllm-a'},
        'gb10-02': {'vllm_url': b['url'], 'vllm_watchdog_service': 'vllm'}},
        dict(FAST, vllm_watchdog_state_dir=state_dir + '/{{ inventory_hostname }}'))
    run = watchdog(inv, standins, workdir=tmp_path / 'run')
    assert run.rc == 2, run
    failed = [line for line in run.stdout.splitlines() if ': FAILED: ' in line]
    assert failed == [
        'gb10-01: FAILED: vllm_watchdog_servce = "vllm-a" (set on gb10-01) is not a variable of modelops.vllm: did you '
        'mean vllm_watchdog_service? That one says what a restart acts on: the run would act on what '
        'vllm_watchdog_service says now (its default "vllm"), on a host with two servers the other one, so nothing is '
        'checked or restarted on this host until it is spelled vllm_watchdog_service'], run.stdout
    assert 'vllm_watchdog_servce' not in run.stderr  # an error, not a warning first
    assert sim.request_counts(a['id']).get('/metrics', 0) == 0  # gb10-01 was not checked
    assert [call for call in standins.calls() if call[1] != 'show'] == [], standins.calls()
    assert 'gb10-02/vllm: idle - watchdog: no action' in run.stdout  # the other host goes on


def test_a_unit_that_does_not_exist_is_never_restarted(sim, tmp_path):
    """systemctl show answers an unknown unit with LoadState=not-found (exit 0); stop would exit 5."""
    a = stuck(sim)
    standins = Standins(str(tmp_path), sim.base_url)
    standins.write({'vllm-a': {'server': a['id'], 'state': 'running', 'started_at': time.time() - 7200}})
    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {'vllm_url': a['url'], 'vllm_watchdog_service': 'vllm-aa'}},
                    dict(FAST, vllm_watchdog_state_dir=str(tmp_path / 'state')))
    run = watchdog(inv, standins, workdir=tmp_path / 'run')
    assert run.rc == 2, run
    result = results(run, 'gb10-01')['vllm']
    assert result['action'] == 'fail' and not result['restarted'], result
    assert 'the systemd unit vllm-aa does not exist (no such unit (systemctl show: LoadState=not-found)); ' \
           '127.0.0.1:%s is held by process' % port(a['url']) in result['line'], result['line']
    assert [call[:2] for call in standins.calls()] == [['systemctl', 'show']], standins.calls()
    assert history(str(tmp_path / 'state'), 'vllm')['restarts'] == []


# --------------------------------------------------------------------------- a restart that did nothing

def test_a_restart_that_did_nothing_is_a_failed_restart_and_gives_no_grace(sim, tmp_path):
    a = stuck(sim)
    state_dir = str(tmp_path / 'state')
    standins = Standins(str(tmp_path), sim.base_url)
    standins.write({'vllm-a': {'server': a['id'], 'state': 'running', 'started_at': time.time() - 7200}})
    settings = dict(FAST, vllm_watchdog_state_dir=state_dir, vllm_watchdog_restart_method='command',
                    vllm_watchdog_assume_url_is_service=True, vllm_watchdog_ready_timeout=4)
    noop = inventory(tmp_path / 'noop.yml', {'gb10-01': {'vllm_url': a['url'],
                                                         'vllm_watchdog_restart_command': ['true']}}, settings)
    first = watchdog(noop, standins, workdir=tmp_path / 'run1')
    assert first.rc == 2, first
    result = results(first, 'gb10-01')['vllm']
    assert result['action'] == 'restart failed' and not result['restarted'], result
    assert 'the process that answers is the one from before the restart' in result['line'], result['line']
    assert 'Restart |' not in first.stdout  # no task's name in a message
    hist = history(state_dir, 'vllm')
    assert hist['failed_restarts'] == hist['restarts'] and hist['last_step']['outcome'] == 'failed', hist
    assert verdict_lines(state_dir, 'vllm')[-1]['action'] == 'restart failed'

    # The human fixes the command and removes the record, as the line says: the next run restarts at once.
    os.unlink(os.path.join(state_dir, 'vllm.restart-failed'))
    fixed = inventory(tmp_path / 'fixed.yml', {'gb10-01': {'vllm_url': a['url'],
                                                           'vllm_watchdog_restart_command': ['vllm-restart', 'vllm-a']}},
                      dict(settings, vllm_watchdog_ready_timeout=30))
    second = watchdog(fixed, standins, workdir=tmp_path / 'run2')
    assert second.rc == 0, second
    result = results(second, 'gb10-01')['vllm']
    assert result['action'] == 'restarted', result
    assert 'within the start-up grace' not in result['line']
    assert 'restart 2 of at most 3 in 24h00m, a failed one counted too' in result['line'], result['line']
    assert standins.restarts() == [['vllm-restart', 'vllm-a']]


# --------------------------------------------------------------------------- a URL that is not the server's

@pytest.mark.parametrize('mistake, words', [
    ('/v1', "names the endpoint /v1, not the server: give the server's own URL"),
    ('/metrics', 'names the endpoint /metrics, not the server'),
    ('no scheme', 'url must start with http:// or https://'),
])
def test_a_url_that_is_not_the_server_s_is_one_line_before_any_check(sim, tmp_path, mistake, words):
    good, target = servers.create(sim, 'idle'), servers.create(sim, 'idle')
    wrong = target['url'][len('http://'):] if mistake == 'no scheme' else target['url'] + mistake
    sim.reset_counts(target['id'])
    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {'vllm_url': good['url']}, 'gb10-02': {'vllm_url': wrong}},
                    dict(FAST, vllm_watchdog_state_dir=str(tmp_path / 'state') + '/{{ inventory_hostname }}'))
    run = watchdog(inv, workdir=tmp_path / 'watchdog')
    assert run.rc == 2, run
    failed = [line for line in run.stdout.splitlines() if ': FAILED: ' in line]
    assert len(failed) == 1 and failed[0].startswith('gb10-02: FAILED: vllm_url: url ') and words in failed[0], failed
    assert 'gb10-01/vllm: idle - watchdog: no action' in run.stdout  # the other host goes on

    check = ansible_playbook(['-i', inv, 'modelops.vllm.check'], cwd=str(tmp_path))
    assert check.returncode == 2, check  # the report-only check is red
    failed = [line for line in check.stdout.splitlines() if 'FAILED' in line]
    assert len(failed) == 1 and words in failed[0] and '(on gb10-02)' in failed[0], check.stdout
    assert sim.request_counts(target['id']).get('/metrics', 0) == 0  # no check ran against it


# --------------------------------------------------------------------------- unknown and down ask with what to read

def test_unknown_says_the_check_s_reason_and_the_streak_keeps_the_evidence(sim, tmp_path):
    guarded = servers.create(sim, 'idle', api_key='sk-the-servers-key')
    state_dir = str(tmp_path / 'state')
    standins = Standins(str(tmp_path), sim.base_url)
    standins.write({'vllm': {'server': guarded['id'], 'state': 'running', 'started_at': time.time() - 7200,
                             'logs': ['INFO api_server.py: Uvicorn running on port %s' % port(guarded['url'])]}})
    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {'vllm_url': guarded['url']}},
                    dict(FAST, vllm_watchdog_state_dir=state_dir, vllm_watchdog_unknown_limit=2))
    first = watchdog(inv, standins, workdir=tmp_path / 'run1')
    assert first.rc == 0, first
    assert 'gb10-01/vllm: unknown (the probe was rejected with HTTP 401 (check api_key)) - watchdog: no action' \
        in first.stdout, first.stdout
    second = watchdog(inv, standins, workdir=tmp_path / 'run2')
    assert second.rc == 2, second
    result = results(second, 'gb10-01')['vllm']
    assert result['action'] == 'fail' and 'look at the evidence' in result['decision'], result
    assert result['evidence_file'] and result['evidence_file'] in result['line']
    with open(result['evidence_file']) as handle:
        evidence = json.load(handle)
    assert [v['state'] for v in evidence['recent_verdicts']] == ['unknown', 'unknown']
    assert any('Uvicorn running' in line for line in evidence['logs']), evidence['logs']


def test_a_check_that_cannot_start_on_the_host_is_unknown_with_the_check_s_own_words(sim, tmp_path):
    # The background check's directory cannot be made (a file is in its way): the gate still runs, and each instance
    # is unknown with the check's own message, not "the check gave no verdict". Nothing is restarted.
    server = busy(sim)
    state_dir = tmp_path / 'state'
    state_dir.mkdir()
    (state_dir / 'checks').write_text('a file where the directory of the checks goes\n')
    standins = Standins(str(tmp_path), sim.base_url)
    standins.write({'vllm': {'server': server['id'], 'state': 'running', 'started_at': time.time() - 7200}})
    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {'vllm_url': server['url']}},
                    dict(FAST, vllm_watchdog_state_dir=str(state_dir)))
    run = watchdog(inv, standins, workdir=tmp_path / 'run')
    assert run.rc == 0, run
    line = [one for one in run.stdout.splitlines() if one.startswith('gb10-01/vllm: ')]
    assert len(line) == 1 and line[0].startswith('gb10-01/vllm: unknown (the background check could not start: '), run
    assert 'watchdog: no action' in line[0], line
    assert standins.restarts() == [], standins.calls()
    assert [v['state'] for v in verdict_lines(str(state_dir), 'vllm')] == ['unknown']


def test_down_that_stays_down_asks_a_human_with_the_service_s_log(sim, tmp_path):
    """A crash loop: systemd starts it again every few seconds, so every run sees a start inside the grace."""
    dead = servers.create(sim, 'down')
    state_dir = str(tmp_path / 'state')
    standins = Standins(str(tmp_path), sim.base_url)
    oom = 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB'

    def crash_again():
        standins.write({'vllm': {'server': dead['id'], 'state': 'activating', 'started_at': time.time() - 5,
                                 'logs': ['INFO Loading safetensors checkpoint shards', oom]}})

    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {'vllm_url': dead['url']}},
                    dict(FAST, vllm_watchdog_state_dir=state_dir, vllm_watchdog_down_limit=2))
    crash_again()
    first = watchdog(inv, standins, workdir=tmp_path / 'run1')
    assert first.rc == 0 and 'within the start-up grace' in results(first, 'gb10-01')['vllm']['line'], first
    crash_again()
    second = watchdog(inv, standins, workdir=tmp_path / 'run2')
    assert second.rc == 2, second
    result = results(second, 'gb10-01')['vllm']
    assert result['action'] == 'fail' and result['decision'].startswith('down 2 runs in a row and not restarted')
    assert re.search(r'\[evidence .*/evidence/vllm-\d+T\d+Z\.json: .*, \d+ line\(s\) of its log, the last: ',
                     result['line']), result['line']
    with open(result['evidence_file']) as handle:
        assert any(oom in line for line in json.load(handle)['logs'])
    assert standins.restarts() == [] and standins.stops() == []


# --------------------------------------------------------------------------- one mistake, one line

def test_a_missing_textfile_directory_on_five_hosts_is_one_line(sim, tmp_path):
    idle = servers.create(sim, 'idle')
    hosts = dict(('gb10-%02d' % n, {'vllm_url': idle['url']}) for n in range(1, 6))
    inv = inventory(tmp_path / 'inventory.yml', hosts, dict(
        FAST, vllm_watchdog_state_dir=str(tmp_path / 'state') + '/{{ inventory_hostname }}',
        vllm_watchdog_textfile=str(tmp_path / 'no-such-dir' / 'vllm_watchdog.prom')))
    run = watchdog(inv, workdir=tmp_path / 'run')
    assert run.rc == 2, run
    said = [line for line in (run.stdout + run.stderr).splitlines() if 'no-such-dir' in line]
    assert said == ['gb10-01, gb10-02, gb10-03, gb10-04, gb10-05: FAILED: the textfile %s could not be written (its '
                    'directory %s does not exist): Prometheus gets no vllm_watchdog_* metric from this host, so no '
                    'alert can fire on it. Create the directory of vllm_watchdog_textfile (node_exporter\'s '
                    '--collector.textfile.directory), or set vllm_watchdog_textfile_required: false to only say it.'
                    % (tmp_path / 'no-such-dir' / 'vllm_watchdog.prom', tmp_path / 'no-such-dir')], said
    assert '[WARNING]' not in run.stderr, run.stderr
    assert 'textfile not written: gb10-01, gb10-02, gb10-03, gb10-04, gb10-05' in run.stdout


def test_the_readme_s_first_check_prints_only_what_the_readme_shows(sim, tmp_path):
    server = busy(sim)
    inv = inventory(tmp_path / 'inventory.yml', {'gb10-01': {'vllm_url': server['url']}}, {})
    proc = ansible_playbook(['-i', inv, 'modelops.vllm.check'], cwd=str(tmp_path))
    assert proc.returncode == 0, proc
    assert proc.stderr.strip() == '', proc.stderr  # no "Could not match supplied host pattern, ignoring: vllm_proxies"
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith('gb10-01: busy - ') and \
        lines[1] == 'vLLM fleet check (host): 1 server(s): 1 busy' and \
        lines[2] == '1 host(s): 1 ok, 0 changed, 0 failed, 0 unreachable', lines
    assert glob.glob(str(tmp_path / '*.retry')) == []
