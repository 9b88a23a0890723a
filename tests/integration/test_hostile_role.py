"""The hostile-input tier (issue 8) through the ``modelops.vllm.watchdog`` role and the rollout
playbook, exactly as users run them (``ansible-playbook -vvv``), against raw loopback servers
(``tests/support/hostile.py``).

Restarts are observed from the outside only: the ``command`` method's restart command (or a
``systemctl`` stand-in written into the test's directory) appends a line to a file per instance,
so "restarted" means "that file grew". What must hold:

* errors stay with their server: an instance with an API key that cannot be sent, or NaN gauges, or a
  probe that is reset, is never restarted, and a genuinely stuck instance on the same host still is
  (contract 1, 2, 4, 7); no API key or URL password in the output at -vvv or in any file the role
  and the gate write (history, evidence) (contract 4, issue classes 1 and 9);
* the start-up grace counts from vLLM's own ``process_start_time_seconds`` (class 12); a damaged
  history is not a fresh budget (class 8);
* a failed restart keeps the host failed on every later run, with a message that says how to clear
  it, until the server is healthy again (class 11);
* the rollout stops at the first failed restart command (class 13);
* a restart is confirmed only by a new process: a restart command that changed nothing on a server
  without ``process_start_time_seconds`` (the simulator in multiprocess mode, as vLLM with
  ``--api-server-count 2``) keeps the host red on this run and the next, and a real restart of
  the same kind of server is confirmed by its counters (class 15);
* no key from the service's log (vLLM's start-up line, ``--api-key``, ``Authorization: Bearer``)
  in any output or file (class 16); a verdict history whose last line was cut loses nothing after
  it (class 17); a textfile that cannot be written fails the host, or warns, and the summary says
  it (class 18); a restart command that hangs is cut off at ``vllm_watchdog_command_timeout``,
  with every process it started, and the host is red (class 20).
"""

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

from tests.support.ansible_run import run_playbook
from tests.support.ports import span

from tests.support import hostile as h

PORT_RANGE = span("hostile")  # the module's simulator (the sim fixture)

FAST = {
    'vllm_watchdog_interval': 0.5,
    'vllm_watchdog_freeze_limit': 1,  # proof within a run's two waits (the default limit is test_long_step.py's)
    'vllm_watchdog_probe_timeout': 2,
    'vllm_watchdog_metrics_timeout': 2,
    'vllm_watchdog_ready_delay': 1,
    'vllm_watchdog_ready_timeout': 20,
}
HOUR = 3600.0

# The role inside a block: the host's failure is rescued so that its results are saved either way.
ROLE_PLAY = """
- name: The watchdog role, as users run it
  hosts: vllm
  gather_facts: false
  tasks:
    - name: Watch
      block:
        - name: The role
          ansible.builtin.include_role:
            name: modelops.vllm.watchdog
      rescue:
        - name: The host failed
          ansible.builtin.set_fact:
            hostile_failed: true
            hostile_msg: "{{ ansible_failed_result.msg | default('') }}"
      always:
        - name: Save
          ansible.builtin.copy:
            content: >-
              {{ {'results': ansible_facts.vllm_watchdog_results | default([]), 'failed': hostile_failed | default(false),
                  'msg': hostile_msg | default('')} | to_json }}
            dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
            mode: "0600"
"""


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)


@pytest.fixture
def servers():
    pool = h.Servers()
    yield pool
    pool.stop()


def stuck_body(age):
    """The real capture of a hung engine (running 3), its process started ``age`` seconds ago."""
    return h.with_start_time(h.STUCK, time.time() - age)


def idle_body():
    return h.with_start_time(h.IDLE, time.time() - 2 * HOUR)


class Marks(object):
    """One file per instance that its restart command appends to."""

    def __init__(self, directory):
        self.dir = str(directory)
        os.makedirs(self.dir, exist_ok=True)

    def path(self, name):
        return os.path.join(self.dir, '%s.restarts' % name)

    def command(self, name, tail='', server=None):
        """A restart command that records the attempt, then ``tail`` (e.g. 'exit 1'). With ``server`` (made by
        ``restartable``), it also restarts that server for real: a new process start time, idle."""
        if server is None:
            return ['sh', '-c', 'echo attempt >> "$0"; %s' % (tail or 'exit 0'), self.path(name)]
        poke = ('import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + "/__hostile_restart", '
                'data=b"", timeout=10)')
        return ['sh', '-c', 'echo attempt >> "$0" && "$1" -c "$2" "$3"', self.path(name), sys.executable, poke,
                server.url]

    def count(self, name):
        if not os.path.exists(self.path(name)):
            return 0
        with open(self.path(name)) as handle:
            return sum(1 for line in handle if line.strip())


def restartable(pool, name, age):
    """A vLLM-like server hung with work in flight (the real capture, started ``age`` s ago) that a POST to
    /__hostile_restart turns into a freshly started, idle one (as a real restart would)."""
    switch = h.Switch(h.respond(200, stuck_body(age)))

    def restart(conn, request):
        switch.to(h.respond(200, h.with_start_time(h.IDLE, time.time())))
        conn.respond(200, 'restarted')
    return pool.vllm(name=name, metrics=switch, extra={('POST', '/__hostile_restart'): restart})


def write_standins(directory, services, marks):
    """``systemctl`` and ``journalctl`` stand-ins: show answers from ``services`` ({unit: started_at epoch}),
    restart appends to the unit's marks file. Nothing else is ever called."""
    bin_dir = os.path.join(str(directory), 'bin')
    os.makedirs(bin_dir, exist_ok=True)
    systemctl = '''#!%(python)s
import json, sys
services = json.loads(%(services)r)
marks = %(marks)r
args = sys.argv[1:]
units = [a for a in args if not a.startswith('-') and a in services]
unit = units[0] if units else None
if 'restart' in args and unit:
    with open('%%s/%%s.restarts' %% (marks, unit), 'a') as handle:
        handle.write('attempt\\n')
    sys.exit(0)
if 'show' in args and unit:
    print('ActiveState=active')
    print('SubState=running')
    print('ExecMainStartTimestamp=@%%d' %% int(services[unit]))
    sys.exit(0)
if 'is-active' in args:
    print('active')
sys.exit(0)
''' % {'python': sys.executable, 'services': json.dumps(services), 'marks': marks.dir}
    journalctl = '#!/bin/sh\necho "2026-12-01T00:00:00+0000 host vllm[1]: INFO hostile stand-in log line"\n'
    for name, text in (('systemctl', systemctl), ('journalctl', journalctl)):
        path = os.path.join(bin_dir, name)
        with open(path, 'w') as handle:
            handle.write(text)
        os.chmod(path, 0o755)
    return bin_dir


def inventory(path, host_vars, group_vars):
    hosts = {}
    for name, hv in host_vars.items():
        hosts[name] = dict({'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}, **hv)
    with open(str(path), 'w') as handle:
        yaml.safe_dump({'all': {'children': {'vllm': {'hosts': hosts, 'vars': group_vars}}}}, handle)
    return str(path)


def role_run(tmp_path, label, host_vars, group_vars, extra_env=None):
    workdir = tmp_path / label
    workdir.mkdir()
    inv = inventory(workdir / 'inventory.yml', host_vars, dict(FAST, **group_vars))
    run = run_playbook(ROLE_PLAY, args=('-vvv',), inventory=inv, workdir=str(workdir), timeout=600,
                       extra_env=extra_env)
    return run


def host_result(run, host):
    saved = run.outputs.get('%s.json' % host)
    return saved if isinstance(saved, dict) else {'results': [], 'failed': None, 'msg': 'nothing saved: %r' % run}


def instance_result(saved, name):
    for item in saved.get('results') or []:
        if isinstance(item, dict) and item.get('instance') == name:
            return item
    return None


def traceback_problems(run, saves=True):
    """A traceback in the output, or (``saves``) a play that did not get as far as saving what the role did."""
    out = []
    marker = h.traceback_in(run.stdout, run.stderr)
    if marker:
        both = run.stdout + run.stderr
        at = both.find(marker)
        if at < 0:
            at = both.find('"msg": "%s' % h.CRASH_MSG)
        out.append('%s in the output: %s' % (marker, both[max(0, at - 200):at + 300]))
    if saves and not any(name.endswith('.json') for name in run.outputs):
        out.append('the play saved nothing (rc %s); its output ends: %s' % (
            run.rc, (run.stdout + run.stderr)[-600:].replace('\n', ' | ')))
    return out


# --------------------------------------------------------------------------- errors stay with their server

def test_bad_instances_are_never_restarted_and_a_stuck_neighbour_still_is(servers, tmp_path):
    """Classes 1, 2, 4 and 9 through the role: one host, six instances."""
    marks = Marks(tmp_path / 'marks')
    password = 'HOSTILE-ROLE-PASS-%s' % os.urandom(4).hex()
    key_stuck = 'HOSTILE-ROLE-KEY-1-%s' % os.urandom(4).hex()
    key_nl = 'HOSTILE-ROLE-KEY-2-%s\n' % os.urandom(4).hex()
    key_euro = 'HOSTILE-ROLE-KEY-3-%s\u20ac' % os.urandom(4).hex()
    stuck = restartable(servers, 'stuck', 2 * HOUR)
    stuck_key = restartable(servers, 'stuck-key', 2 * HOUR)
    nl = servers.vllm(name='key-newline', metrics=idle_body())
    euro = servers.vllm(name='key-euro', metrics=idle_body())
    nan = servers.vllm(name='nan', metrics=h.vllm_text({'0': h.engine_numbers(running='NaN')}, start=time.time() - 2 * HOUR))
    rst = servers.vllm(name='probe-rst', metrics=idle_body(), probe=h.reset)
    instances = [
        {'name': 'stuck-cred', 'url': 'http://hostile:%s@127.0.0.1:%d' % (password, stuck.port),
         'restart_method': 'command', 'restart_command': marks.command('stuck-cred', server=stuck)},
        {'name': 'stuck-key', 'url': stuck_key.url, 'api_key': key_stuck,
         'restart_method': 'command', 'restart_command': marks.command('stuck-key', server=stuck_key)},
        {'name': 'key-newline', 'url': nl.url, 'api_key': key_nl, 'restart_method': 'command',
         'restart_command': marks.command('key-newline')},
        {'name': 'key-euro', 'url': euro.url, 'api_key': key_euro, 'restart_method': 'command',
         'restart_command': marks.command('key-euro')},
        {'name': 'nan-running', 'url': nan.url, 'restart_method': 'command', 'restart_command': marks.command('nan-running')},
        {'name': 'probe-rst', 'url': rst.url, 'restart_method': 'command', 'restart_command': marks.command('probe-rst')},
    ]
    state_dir = str(tmp_path / 'state')
    async_dir = tmp_path / 'async'  # where the background check leaves its result (and must remove it)
    run = role_run(tmp_path, 'run', {'gb10-hostile': {}}, {
        'vllm_watchdog_instances': instances, 'vllm_watchdog_state_dir': state_dir,
        'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True, 'vllm_watchdog_restart_command': ['false']},
        extra_env={'ANSIBLE_ASYNC_DIR': str(async_dir)})
    files = h.dir_text(state_dir)
    saved = host_result(run, 'gb10-hostile')
    violations = h.Violations()
    common = traceback_problems(run)

    def secrets(*values):
        out = []
        for value in values:
            found = h.leaks(value, run.stdout, run.stderr, json.dumps(saved))
            if found:
                out.append('a secret (as %s) in the role\'s output at -vvv' % found)
            found = h.leaks(value, files)
            if found:
                out.append('a secret (as %s) in a file the role or the gate wrote in state_dir' % found)
        return out

    for name, cls, secret in (('stuck-cred', 9, password), ('stuck-key', 1, key_stuck)):
        # Genuinely stuck: restarted once (so its evidence is written), whatever the other instances do.
        violations.check(cls, 'role: genuinely stuck instance %s (restarted; its evidence written)' % name,
                         common + secrets(secret) + (
                             [] if marks.count(name) == 1 else
                             ['the genuinely stuck instance was restarted %d times, expected once (did the errors '
                              'of the other instances stop the role deciding it?): %s'
                              % (marks.count(name), instance_result(saved, name))]))
    for name, cls, secret in (('key-newline', 1, key_nl), ('key-euro', 1, key_euro), ('nan-running', 4, None),
                              ('probe-rst', 2, None)):
        problems = list(common)
        if marks.count(name):
            problems.append('restarted (%d) on input that is no evidence of a hang: %s' % (
                marks.count(name), instance_result(saved, name)))
        if secret:
            problems += secrets(secret)
        violations.check(cls, 'role: instance %s' % name, problems)
    left = sorted(os.listdir(str(async_dir))) if async_dir.is_dir() else []
    violations.check(4, 'role: NaN gauges and bad keys on the host leave no background-job file behind', common + (
        ['the background check left %s in the async dir' % left] if left else []))
    violations.assert_none()


# --------------------------------------------------------------------------- grace from vLLM's own start; history

def test_grace_counts_from_vllms_own_start_and_a_damaged_history_is_no_budget(servers, tmp_path):
    """Class 12 (and 8 through the role): stuck-looking servers whose own start time is recent are not
    restarted, whatever the service manager says; a damaged history fails the host instead of
    restarting. A control with an old start IS restarted."""
    marks = Marks(tmp_path / 'marks')
    young5 = servers.vllm(name='young5', metrics=stuck_body(5))
    young60 = servers.vllm(name='young60', metrics=stuck_body(60))
    young_systemd = servers.vllm(name='young-systemd', metrics=stuck_body(30))
    old = restartable(servers, 'old', 2 * HOUR)
    damaged = servers.vllm(name='damaged', metrics=stuck_body(2 * HOUR))
    bin_dir = write_standins(tmp_path, {'vllm-young-systemd': time.time() - 2 * HOUR}, marks)
    state_dir = tmp_path / 'state'
    state_dir.mkdir(mode=0o750)
    os.chmod(str(state_dir), 0o750)
    (state_dir / 'damaged-history.json').write_text('{"restarts": [17960')
    instances = [
        {'name': 'vllm-started-5s-ago', 'url': young5.url, 'restart_method': 'command',
         'restart_command': marks.command('vllm-started-5s-ago')},
        {'name': 'vllm-started-60s-ago', 'url': young60.url, 'restart_method': 'command',
         'restart_command': marks.command('vllm-started-60s-ago')},
        {'name': 'systemd-2h-vllm-30s', 'url': young_systemd.url, 'restart_method': 'systemd',
         'service': 'vllm-young-systemd'},
        {'name': 'control-started-2h-ago', 'url': old.url, 'restart_method': 'command',
         'restart_command': marks.command('control-started-2h-ago', server=old)},
        {'name': 'damaged-history', 'url': damaged.url, 'restart_method': 'command',
         'restart_command': marks.command('damaged-history')},
    ]
    run = role_run(tmp_path, 'run', {'gb10-hostile': {}}, {
        'vllm_watchdog_instances': instances, 'vllm_watchdog_state_dir': str(state_dir),
        'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True, 'vllm_watchdog_restart_command': ['false']},
        extra_env={'PATH': os.pathsep.join([bin_dir, os.path.dirname(sys.executable), os.environ.get('PATH', '')])})
    saved = host_result(run, 'gb10-hostile')
    common = traceback_problems(run)
    violations = h.Violations()
    for name, cls in (('vllm-started-5s-ago', 12), ('vllm-started-60s-ago', 12)):
        violations.check(cls, 'role: command method, no status command, %s' % name, common + (
            ['restarted inside the start-up grace counted from process_start_time_seconds: %s'
             % instance_result(saved, name)] if marks.count(name) else []))
    violations.check(12, 'role: systemd says 2 h, vLLM says 30 s', common + (
        ['restarted inside the start-up grace counted from process_start_time_seconds: %s'
         % instance_result(saved, 'systemd-2h-vllm-30s')] if marks.count('vllm-young-systemd') else []))
    problems = list(common)
    if marks.count('damaged-history'):
        problems.append('restarted with a damaged history (a fresh budget): %s' % instance_result(saved, 'damaged-history'))
    item = instance_result(saved, 'damaged-history')
    if not saved.get('failed') and not (item and item.get('failed')):
        problems.append('a damaged history did not fail the host for a human: %s' % item)
    violations.check(8, 'role: a damaged history file', problems)
    # The control (not a hostile input): an old start, stuck, is restarted once.
    if marks.count('control-started-2h-ago') != 1:
        violations.items.append('[control] a stuck server started 2 h ago was restarted %d times, expected once: %s'
                                % (marks.count('control-started-2h-ago'), instance_result(saved, 'control-started-2h-ago')))
    violations.assert_none()


def test_the_role_refuses_settings_that_would_open_the_gate(servers, tmp_path):
    """Class 8 through the role: settings the gate must refuse (a zero, negative or NaN window, a negative
    cooldown or budget, no unknown limit), one host each, all in one run: each host fails with a message
    and its stuck server is not restarted."""
    marks = Marks(tmp_path / 'marks')
    stuck = servers.vllm(name='stuck', metrics=stuck_body(2 * HOUR))
    bad = {
        'restart-window-0': {'vllm_watchdog_restart_window': 0},
        'restart-window-nan': {'vllm_watchdog_restart_window': float('nan')},
        'cooldown-negative': {'vllm_watchdog_cooldown': -1},
        'max-restarts-negative': {'vllm_watchdog_max_restarts': -1},
        'unknown-limit-0': {'vllm_watchdog_unknown_limit': 0},
        'startup-grace-minus-inf': {'vllm_watchdog_startup_grace': float('-inf')},
    }
    host_vars = {}
    for host, settings in bad.items():
        host_vars[host] = dict(settings, vllm_watchdog_url=stuck.url, vllm_watchdog_name='vllm',
                               vllm_watchdog_state_dir=str(tmp_path / host / 'state'),
                               vllm_watchdog_restart_method='command', vllm_watchdog_assume_url_is_service=True,
                               vllm_watchdog_restart_command=marks.command(host))
    run = role_run(tmp_path, 'run', host_vars, {})
    violations = h.Violations()
    for host in bad:
        saved = host_result(run, host)
        problems = traceback_problems(run)
        if marks.count(host):
            problems.append('restarted with settings the gate must refuse')
        if not saved.get('failed'):
            problems.append('the host did not fail: %s' % saved)
        elif not saved.get('msg'):
            problems.append('the host failed without a message')
        violations.check(8, 'role: %s' % host, problems)
    violations.assert_none()


# --------------------------------------------------------------------------- a failed restart stays red

def test_a_failed_restart_keeps_the_host_failed_until_the_server_is_healthy(servers, tmp_path):
    """Class 11: three stuck instances whose restart fails (exit 1, no such command, killed by a
    signal). Every later run keeps the host failed, and says how to clear it; once the servers are
    healthy again, the host is green and nothing is restarted."""
    marks = Marks(tmp_path / 'marks')
    kinds = {
        'restart-exits-1': marks.command('restart-exits-1', 'exit 1'),
        'restart-not-found': ['/nonexistent/hostile-vllm-restart-%s' % os.urandom(3).hex()],
        'restart-killed': marks.command('restart-killed', 'kill -9 $$'),
    }
    switches = {}
    instances = []
    for name, command in kinds.items():
        switch = h.Switch(h.respond(200, stuck_body(2 * HOUR)))
        switches[name] = switch
        server = servers.vllm(name=name, metrics=switch)
        instances.append({'name': name, 'url': server.url, 'restart_method': 'command', 'restart_command': command})
    state_dir = str(tmp_path / 'state')
    group = {'vllm_watchdog_instances': instances, 'vllm_watchdog_state_dir': state_dir,
             'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True, 'vllm_watchdog_restart_command': ['false']}
    violations = h.Violations()
    runs = []
    for label in ('run1', 'run2', 'run3'):
        run = role_run(tmp_path, label, {'gb10-hostile': {}}, group)
        runs.append((run, host_result(run, 'gb10-hostile')))
    for name in kinds:
        problems = []
        for index, (run, saved) in enumerate(runs[:3], 1):
            problems += ['run %d: %s' % (index, p) for p in traceback_problems(run)]
            item = instance_result(saved, name)
            failed = bool(saved.get('failed')) and (item is None or bool(item.get('failed')))
            if not failed:
                problems.append('run %d: the host is not failed after a failed restart (%s)' % (
                    index, (item or {}).get('line') or (item or {}).get('decision') or saved.get('msg')))
            elif index == 2:
                msg = str(saved.get('msg') or '')
                if name not in msg:
                    problems.append('run 2: the failure message does not name the instance: %s' % msg[:300])
                if not any(word in msg.lower() for word in ('remove', 'clear', 'delete')):
                    problems.append('run 2: the failure message does not say how to clear it: %s' % msg[:400])
        violations.check(11, 'role: %s' % name, problems)
    # Healthy again: green, and nothing restarted.
    for switch in switches.values():
        switch.to(h.respond(200, idle_body()))
    before = dict((name, marks.count(name)) for name in kinds)
    run = role_run(tmp_path, 'run4-healthy', {'gb10-hostile': {}}, group)
    saved = host_result(run, 'gb10-hostile')
    if saved.get('failed'):
        violations.items.append('[class 11] once the servers are healthy again the host is still failed: %s'
                                % str(saved.get('msg'))[:400])
    after = dict((name, marks.count(name)) for name in kinds)
    if after != before:
        violations.items.append('[class 11] healthy servers were restarted: %s -> %s' % (before, after))
    violations.assert_none()


# --------------------------------------------------------------------------- the rollout stops at the first failure

ROLLOUT_PLAY = """
- name: The collection's rollout playbook, as users run it
  ansible.builtin.import_playbook: modelops.vllm.rollout
"""

SYSTEMCTL_ROLLOUT = '''#!%(python)s
import json, os, sys
log = os.environ.get('HOSTILE_LOG')
if log:
    with open(log, 'a') as handle:
        handle.write(json.dumps(sys.argv[1:]) + '\\n')
fail = json.loads(os.environ.get('HOSTILE_FAIL') or '{}')
for word, rc in fail.items():
    if word in sys.argv[1:]:
        sys.stderr.write('Failed to %%s: hostile stand-in says no\\n' %% word)
        sys.exit(int(rc))
sys.exit(0)
'''


def test_the_rollout_stops_at_the_first_failed_command(servers, tmp_path):
    """Class 13: an upgrade whose ``systemctl daemon-reload`` fails must not go on to restart vLLM on the
    old unit; a failed pull must not go on to the restart either. Three hosts in one batch."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    for tool in ('systemctl', 'docker'):
        path = bin_dir / tool
        path.write_text(SYSTEMCTL_ROLLOUT % {'python': sys.executable})
        path.chmod(0o755)
    hosts = {}
    cases = {
        'reload-fails-rc1': {'vllm_rollout_method': 'systemd', 'fail': {'daemon-reload': 1}},
        'reload-fails-rc4': {'vllm_rollout_method': 'systemd', 'fail': {'daemon-reload': 4}},
        'pull-fails': {'vllm_rollout_method': 'docker', 'fail': {'pull': 1}},
    }
    logs = {}
    for name, spec in cases.items():
        server = servers.vllm(name=name, metrics=idle_body())
        logs[name] = str(tmp_path / ('%s.log' % name))
        state = tmp_path / name / 'state'
        state.mkdir(parents=True)
        hv = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
              'vllm_url': server.url, 'vllm_watchdog_state_dir': str(state),
              'vllm_rollout_method': spec['vllm_rollout_method'], 'vllm_rollout_service': 'vllm',
              'vllm_rollout_image': 'vllm/vllm-openai:hostile',
              'vllm_rollout_systemd_dropin_dir': str(tmp_path / name / 'dropin'),
              'vllm_rollout_environment': {'HOSTILE_LOG': logs[name], 'HOSTILE_FAIL': json.dumps(spec['fail'])}}
        if spec['vllm_rollout_method'] == 'docker':
            hv['vllm_rollout_command'] = ['docker', 'run', '--replace', 'vllm']
            hv['vllm_rollout_pull_command'] = ['docker', 'pull', 'vllm/vllm-openai:hostile']
        hosts[name] = hv
    inv = tmp_path / 'inventory.yml'
    with open(str(inv), 'w') as handle:
        yaml.safe_dump({'all': {'children': {'vllm': {'hosts': hosts, 'vars': {
            'vllm_rollout_interval': 0.5, 'vllm_rollout_probe_timeout': 2, 'vllm_rollout_metrics_timeout': 2,
            'vllm_rollout_idle_delay': 1, 'vllm_rollout_ready_delay': 1, 'vllm_rollout_ready_timeout': 5,
            'vllm_rollout_verify_retries': 1}}}}}, handle)
    run = run_playbook(ROLLOUT_PLAY, args=('-vvv', '-e', 'vllm_rollout_serial=3', '-e',
                                           'vllm_rollout_max_fail_percentage=100'),
                       inventory=str(inv), workdir=str(tmp_path / 'run'), timeout=600,
                       extra_env={'PATH': os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable),
                                                           os.environ.get('PATH', '')])})
    violations = h.Violations()
    for name in cases:
        calls = []
        if os.path.exists(logs[name]):
            with open(logs[name]) as handle:
                calls = [json.loads(line) for line in handle if line.strip()]
        problems = traceback_problems(run, saves=False)
        failing = next((i for i, argv in enumerate(calls) if any(w in argv for w in cases[name]['fail'])), None)
        if failing is None:
            problems.append('the failing command never ran (calls: %s); the case proves nothing' % calls)
        else:
            later = calls[failing + 1:]
            if any('restart' in argv or 'run' in argv for argv in later):
                problems.append('after %s failed the rollout still ran %s' % (calls[failing], later))
        if '%s: FAILED' % name not in run.stdout and 'FAILED! => ' not in run.stdout:
            problems.append('the host was not reported failed')
        violations.check(13, 'rollout: %s' % name, problems)
    violations.assert_none()


# --------------------------------------------------------------------------- issue 16

def sim_restart_command(sim, server, marks, name, restarts=True):
    """A restart command that records the attempt and (``restarts``) restarts the simulated server for real
    (a new process: counters from zero, the port closed for a second), or else does nothing at all, as a
    ``systemctl restart`` of the wrong unit would."""
    if not restarts:
        return marks.command(name, 'exit 0')
    poke = ('import json,sys,urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], '
            'data=json.dumps({"state": "restart", "load_seconds": 1}).encode(), method="POST", '
            'headers={"Content-Type": "application/json"}), timeout=10)')
    target = '%s/servers/%s/state' % (sim.base_url, server['id'])
    return ['sh', '-c', 'echo attempt >> "$0" && "$1" -c "$2" "$3"', marks.path(name), sys.executable, poke, target]


def hung_multiprocess_server(sim):
    """A simulated vLLM in multiprocess mode (no process_start_time_seconds, no *_created), that decoded for a
    while and then hung with its requests in flight."""
    server = sim.create(multiprocess=True, step_rate=50)
    sim.start_load(server['id'], concurrency=2, max_tokens=10_000_000)
    sim.wait_for(server['id'], lambda st: st['totals']['generation_tokens'] > 20, timeout=30)
    sim.set_state(server['id'], 'hang')
    return server


def test_a_restart_that_changed_nothing_without_a_start_time_is_red_and_a_real_one_is_confirmed(sim, tmp_path):
    """Class 15: two hung servers without a start time (vLLM --api-server-count 2); one's restart command does
    nothing, the other's restarts it for real. The first is red on this run and on the next (never "restarted ->
    now stuck" and green, never "within the start-up grace" and green); the second is confirmed by its counters,
    which a new process starts from zero, and is green."""
    marks = Marks(tmp_path / 'marks')
    noop = hung_multiprocess_server(sim)
    real = hung_multiprocess_server(sim)
    body = sim.metrics_text(noop['id'])
    assert 'process_start_time_seconds' not in body and '_created' not in body  # the case proves what it says
    instances = [
        {'name': 'restart-does-nothing', 'url': noop['url'], 'restart_method': 'command',
         'restart_command': sim_restart_command(sim, noop, marks, 'restart-does-nothing', restarts=False)},
        {'name': 'restart-for-real', 'url': real['url'], 'restart_method': 'command',
         'restart_command': sim_restart_command(sim, real, marks, 'restart-for-real')},
    ]
    group = {'vllm_watchdog_instances': instances, 'vllm_watchdog_state_dir': str(tmp_path / 'state'),
             'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True, 'vllm_watchdog_restart_command': ['false']}
    violations = h.Violations()
    runs = [role_run(tmp_path, label, {'gb10-hostile': {}}, group) for label in ('run1', 'run2')]
    problems = []
    for index, run in enumerate(runs, 1):
        saved = host_result(run, 'gb10-hostile')
        item = instance_result(saved, 'restart-does-nothing') or {}
        problems += ['run %d: %s' % (index, p) for p in traceback_problems(run)]
        if not (saved.get('failed') and item.get('failed')):
            problems.append('run %d: a restart that changed nothing is not red: %s' % (index, item.get('line')))
        if index == 1 and 'not confirmed' not in str(item.get('decision')):
            problems.append('run 1: the failure does not say the restart was not confirmed: %s' % item.get('line'))
    if marks.count('restart-does-nothing') != 1:
        problems.append('its restart command ran %d times, expected once (run 2 must not try again)'
                        % marks.count('restart-does-nothing'))
    violations.check(15, 'role: a restart command that does nothing, no process_start_time_seconds', problems)
    # The healthy look-alike: a real restart, without a start time, is confirmed (and green).
    first = instance_result(host_result(runs[0], 'gb10-hostile'), 'restart-for-real') or {}
    look_alike = []
    if not first.get('restarted') or first.get('failed'):
        look_alike.append('a real restart without a start time was not confirmed: %s' % first.get('line'))
    if sim.get(real['id'])['restarts'] != 1 or marks.count('restart-for-real') != 1:
        look_alike.append('restarted %d times (%d attempts), expected once'
                          % (sim.get(real['id'])['restarts'], marks.count('restart-for-real')))
    second = instance_result(host_result(runs[1], 'gb10-hostile'), 'restart-for-real') or {}
    if second.get('failed'):
        look_alike.append('run 2: the restarted server is red: %s' % second.get('line'))
    # The control is not a hostile input: it is not counted, but it must hold.
    violations.items.extend('[control] a real restart without process_start_time_seconds: %s' % p for p in look_alike)
    for server in (noop, real):
        sim.delete(server['id'])
    violations.assert_none()


VLLM_START_LINE = ("INFO 12-01 11:02:03 [api_server.py:1943] non-default args: {'model_tag': '/models/tiny', "
                   "'port': %(port)d, 'api_key': ['%(key)s'], 'model': '/models/tiny'}")


def test_no_key_from_the_services_log_a_cut_history_loses_nothing(servers, tmp_path):
    """Class 16 and 17: stuck servers restarted (so their evidence, with the service's log, is written). The log
    has vLLM's start-up line with the configured key, and the command line and a header with a key nobody
    configured here; none of it is in any output at -vvv or any file. One instance's verdict history ends in a
    cut line: the restart's record still starts on a line of its own, every whole record is readable, and the
    evidence names the damaged line."""
    marks = Marks(tmp_path / 'marks')
    key = 'HOSTILE-LOG-KEY-%s' % os.urandom(5).hex()
    unconfigured = 'HOSTILE-UNCONFIGURED-%s' % os.urandom(5).hex()
    stuck = restartable(servers, 'stuck-key-in-log', 2 * HOUR)
    cut = restartable(servers, 'stuck-cut-history', 2 * HOUR)
    log = tmp_path / 'vllm.log'  # what journalctl or docker logs would print
    log.write_text('\n'.join([VLLM_START_LINE % {'port': stuck.port, 'key': key},
                              'INFO started: /usr/bin/vllm serve /models/tiny --api-key %s' % unconfigured,
                              'DEBUG headers: {"Authorization": "Bearer %s"}' % unconfigured,
                              'ERROR key %s refused' % key]) + '\n')
    state_dir = tmp_path / 'state'
    state_dir.mkdir(mode=0o750)
    os.chmod(str(state_dir), 0o750)
    whole = [json.dumps({'time': '2026-12-01T10:0%d:00Z' % n, 'state': 'busy', 'action': 'none', 'reason': 'r'})
             for n in range(3)]
    cut_line = whole[0][:25]
    (state_dir / 'stuck-cut-history.verdicts.jsonl').write_text('\n'.join(whole) + '\n' + cut_line)
    instances = [
        {'name': 'stuck-key-in-log', 'url': stuck.url, 'api_key': key, 'restart_method': 'command',
         'restart_command': marks.command('stuck-key-in-log', server=stuck), 'logs_command': ['cat', str(log)]},
        {'name': 'stuck-cut-history', 'url': cut.url, 'restart_method': 'command',
         'restart_command': marks.command('stuck-cut-history', server=cut), 'logs_command': ['cat', str(log)]},
    ]
    run = role_run(tmp_path, 'run', {'gb10-hostile': {}}, {
        'vllm_watchdog_instances': instances, 'vllm_watchdog_state_dir': str(state_dir),
        'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True, 'vllm_watchdog_restart_command': ['false']})
    saved = host_result(run, 'gb10-hostile')
    violations = h.Violations()
    common = traceback_problems(run)
    log.unlink()  # the service's own log holds the key; everything left must not
    files = h.dir_text(str(state_dir))
    problems = list(common)
    for secret in (key, unconfigured):
        found = h.leaks(secret, run.stdout, run.stderr, json.dumps(saved))
        if found:
            problems.append('a key from the service\'s log (as %s) in the role\'s output at -vvv' % found)
        found = h.leaks(secret, files)
        if found:
            problems.append('a key from the service\'s log (as %s) in a file of the state dir' % found)
    evidence = sorted((state_dir / 'evidence').glob('stuck-key-in-log-*.json'))
    if len(evidence) != 1 or 'non-default args' not in evidence[0].read_text():
        problems.append('the evidence with the service\'s log was not written (%s): the case proves nothing'
                        % [p.name for p in evidence])
    violations.check(16, 'role: vLLM\'s start-up line, --api-key and Authorization: Bearer in the service\'s log',
                     problems)
    problems = list(common)
    lines = (state_dir / 'stuck-cut-history.verdicts.jsonl').read_text().splitlines()
    if lines[:4] != whole + [cut_line]:
        problems.append('the lines before the new record changed: %s' % lines[:4])
    records = [json.loads(line) for line in lines[4:]]
    if [(r.get('state'), r.get('action')) for r in records if not r.get('step')] != [('stuck', 'restart')]:
        problems.append('the restart\'s own record is not a whole line after the cut one: %s' % lines[3:])
    jq = subprocess.run(['jq', '-Rr', 'fromjson? | objects | select(.action == "restart") | .state',
                         str(state_dir / 'stuck-cut-history.verdicts.jsonl')], capture_output=True, text=True,
                        check=False)
    if jq.returncode != 0 or jq.stdout.split() != ['stuck']:
        problems.append('docs/schedule.md\'s jq line does not find the restart: rc %s %r %r'
                        % (jq.returncode, jq.stdout, jq.stderr))
    evidence = sorted((state_dir / 'evidence').glob('stuck-cut-history-*.json'))
    named = json.loads(evidence[0].read_text()).get('damaged_verdict_lines') if evidence else None
    if not named or 'line 4' not in named[0]:
        problems.append('the evidence does not name the damaged line: %s' % named)
    violations.check(17, 'role: a verdict history whose last line was cut', problems)
    if marks.count('stuck-key-in-log') != 1 or marks.count('stuck-cut-history') != 1:
        violations.items.append('[control] the stuck servers were restarted %d and %d times, expected once each'
                                % (marks.count('stuck-key-in-log'), marks.count('stuck-cut-history')))
    violations.assert_none()


def test_a_textfile_that_cannot_be_written_is_said_and_fails_the_host_unless_told_not_to(servers, tmp_path):
    """Class 18: two hosts whose textfile is in a directory that does not exist. By default the host fails
    with the reason; with vllm_watchdog_textfile_required false it is green, and one line of the summary says
    it (no warning besides: one mistake, one line). A host whose textfile is written says nothing of it."""
    idle = servers.vllm(name='idle', metrics=idle_body())
    missing = tmp_path / 'no-such-dir' / 'vllm_watchdog.prom'
    written = tmp_path / 'textfile' / 'vllm_watchdog.prom'
    written.parent.mkdir()
    host_vars = {}
    for host, extra in (('textfile-required', {}), ('textfile-not-required', {'vllm_watchdog_textfile_required': False}),
                        ('textfile-written', {'vllm_watchdog_textfile': str(written)})):
        host_vars[host] = dict({'vllm_watchdog_url': idle.url, 'vllm_watchdog_textfile': str(missing),
                                'vllm_watchdog_state_dir': str(tmp_path / host / 'state'),
                                'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True,
                                'vllm_watchdog_restart_command': ['false']}, **extra)
    run = role_run(tmp_path, 'run', host_vars, {})
    common = traceback_problems(run)
    violations = h.Violations()
    required = host_result(run, 'textfile-required')
    problems = list(common)
    if not required.get('failed') or str(missing) not in str(required.get('msg')):
        problems.append('the host did not fail with the reason: %s' % str(required.get('msg'))[:300])
    if 'textfile-required: watchdog: TEXTFILE' in run.stdout:
        problems.append('the summary says it too, besides the failure (one mistake, one line)')
    violations.check(18, 'role: textfile in a missing directory (the default: required)', problems)
    optional = host_result(run, 'textfile-not-required')
    problems = list(common)
    if optional.get('failed'):
        problems.append('the host failed although vllm_watchdog_textfile_required is false: %s' % optional.get('msg'))
    line = ('textfile-not-required: watchdog: TEXTFILE NOT WRITTEN - the textfile %s could not be written (its '
            'directory %s does not exist): Prometheus gets no vllm_watchdog_* metric from this host, so no alert can '
            'fire on it' % (missing, missing.parent))
    # (-vvv, Ansible's default callback: the summary's lines are printed as a JSON list)
    if '"%s"' % line not in run.stdout or '[WARNING]: the textfile' in run.stdout + run.stderr:
        problems.append('the summary does not say it in one line, or a warning says it again')
    named = re.findall(r'textfile not written: ([\w, -]+)', run.stdout)
    if not named or sorted(named[-1].replace(' ', '').split(',')) != ['textfile-not-required', 'textfile-required']:
        problems.append('the headline does not name both hosts: %s' % named)
    violations.check(18, 'role: textfile in a missing directory, vllm_watchdog_textfile_required false', problems)
    ok = host_result(run, 'textfile-written')
    if ok.get('failed') or not written.exists() or 'textfile-written/*' in run.stdout:
        violations.items.append('[control] a textfile that was written: failed %s, exists %s'
                                % (ok.get('failed'), written.exists()))
    violations.assert_none()


def test_a_restart_command_that_hangs_is_cut_off_at_the_setting_and_the_host_is_red(servers, tmp_path):
    """Class 20: stuck servers whose restart command never ends (it sleeps, in a child that holds its output
    open, or ignores SIGTERM). Each is stopped at vllm_watchdog_command_timeout with every process it started,
    the host is red, and the run is not held for the module's 600 s."""
    marks = Marks(tmp_path / 'marks')
    tag = 'hostile-hang-%s' % os.urandom(4).hex()
    sleeper = '%s -c "import time; time.sleep(3600)" %s' % (sys.executable, tag)
    kinds = {
        'restart-sleeps': marks.command('restart-sleeps', sleeper),
        'restart-child-holds-output': marks.command('restart-child-holds-output', '%s & wait' % sleeper),
        'restart-ignores-sigterm': marks.command('restart-ignores-sigterm', "trap '' TERM; %s" % sleeper),
    }
    instances = []
    for name, command in kinds.items():
        server = servers.vllm(name=name, metrics=stuck_body(2 * HOUR))
        instances.append({'name': name, 'url': server.url, 'restart_method': 'command', 'restart_command': command})
    timeout = 3
    run = role_run(tmp_path, 'run', {'gb10-hostile': {}}, {
        'vllm_watchdog_instances': instances, 'vllm_watchdog_state_dir': str(tmp_path / 'state'),
        'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True, 'vllm_watchdog_restart_command': ['false'],
        'vllm_watchdog_command_timeout': timeout})
    saved = host_result(run, 'gb10-hostile')
    left = processes_with(tag)
    violations = h.Violations()
    for name in kinds:
        item = instance_result(saved, name) or {}
        problems = traceback_problems(run)
        if marks.count(name) != 1:
            problems.append('its restart command ran %d times' % marks.count(name))
        if not (saved.get('failed') and item.get('failed')):
            problems.append('a restart command that hung did not make the host red: %s' % item.get('line'))
        elif 'still running after %s s' % float(timeout) not in str(item.get('decision')) and \
                'still running after %s s' % timeout not in str(item.get('decision')):
            problems.append('the failure does not say it was stopped at the setting: %s' % item.get('decision'))
        if left:
            problems.append('processes it started are still running: %s' % left)
        # Three commands stopped at 3 s each, plus the checks: far from 600 s.
        if run.seconds > 180:
            problems.append('the run took %.0f s' % run.seconds)
        violations.check(20, 'role: %s, vllm_watchdog_command_timeout %s' % (name, timeout), problems)
    violations.assert_none()


def processes_with(text):
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as handle:
                cmdline = handle.read().replace(b'\0', b' ').decode('utf-8', 'replace')
        except OSError:
            continue
        if text in cmdline and 'pytest' not in cmdline:
            found.append('%s %s' % (pid, cmdline[:200]))
    return found
