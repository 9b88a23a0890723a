"""The fleet rollout (the role ``modelops.vllm.rollout`` through the playbook ``modelops.vllm.rollout``)
end to end, through ``ansible-playbook``.

One inventory host per simulated vLLM server (``tests/simulator``), each with its own watchdog
state directory and its own stand-in config; how a host is reached is decided in one place,
``Fleet.inventory`` (today ``ansible_connection: local``). The service managers are the shared
stand-ins of ``tests/standins/`` (first on PATH), which log, for every call, its argv and time,
the files the test watches (the pause file, the drop-in, the env file) as they were at that
moment, and, for a restart, what the server had in flight just before it. Order, batching,
"paused while worked on" and "not cut off" are all proven from that log and the simulator's
counters.

Ports: the simulator (control and servers) on 127.0.0.1:24000-24999.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time

import pytest
import yaml

from tests.support.ansible_run import _bin
from tests.support.ansible_run import env as ansible_env
from tests.support.ansible_run import health, run_playbook
from tests.support.paths import REPO
from tests.support.ports import span


STANDINS = os.path.join(REPO, 'tests', 'standins')
DOC = os.path.join(REPO, 'docs', 'rollout.md')
ROLE = os.path.join(REPO, 'roles', 'rollout')
PORT_RANGE = span('rollout')
BIN = os.path.dirname(sys.executable)
MARKER = 'paused_by: modelops.vllm rollout'
DROPIN_HEADER = '# Written by the modelops.vllm.rollout role.\n[Service]\n'
LOAD_SECONDS = 2.0  # a simulated restart keeps the port closed this long (weights loading)

ROLLOUT_PLAY = """
- name: The collection's rollout playbook, as users run it
  ansible.builtin.import_playbook: modelops.vllm.rollout
"""

# Short waits for tests; the defaults are minutes.
FAST = {
    'vllm_rollout_interval': 1,
    'vllm_rollout_probe_timeout': 5,
    'vllm_rollout_metrics_timeout': 5,
    'vllm_rollout_idle_delay': 1,
    'vllm_rollout_ready_delay': 1,
    'vllm_rollout_ready_timeout': 30,
}


class Fleet(object):
    """Simulated servers, one inventory host each, with their state dirs, stand-in configs and one argv log."""

    def __init__(self, sim, directory, names, step_rate=200):
        self.sim = sim
        self.dir = str(directory)
        self.names = list(names)
        self.log = os.path.join(self.dir, 'argv.log')
        self.servers = {}
        for name in self.names:
            self.servers[name] = sim.create(step_rate=step_rate, max_num_seqs=8)
            os.makedirs(self.state_dir(name))

    def state_dir(self, name):
        return os.path.join(self.dir, name, 'state')

    def pause_file(self, name):
        return os.path.join(self.state_dir(name), 'paused')

    def config_path(self, name):
        return os.path.join(self.dir, name, 'standins.json')

    def write_config(self, name, services, watch=(), log_env=(), **settings):
        """The stand-ins' config of one host: its services on its simulated server (``settings``: top-level
        keys such as ``daemon_reload_rc``)."""
        for svc in services.values():
            svc.setdefault('server', self.servers[name]['id'])
            svc.setdefault('load_seconds', LOAD_SECONDS)
            svc.setdefault('state', 'auto')
        config = dict(settings, control_url=self.sim.base_url, host=name, services=services,
                      watch=[self.pause_file(name)] + list(watch), log_env=list(log_env))
        with open(self.config_path(name), 'w') as handle:
            json.dump(config, handle)

    def inventory(self, hosts, group_vars, path=None):
        """The inventory of ``hosts`` ({name: its own variables}) in the group ``vllm``, and the one place that says
        how a host is reached here: local connection, its simulated server, its state dir and stand-in config."""
        path = path or os.path.join(self.dir, 'inventory.yml')
        reached = {}
        for name, own in hosts.items():
            hv = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                  'vllm_url': self.servers[name]['url'], 'vllm_watchdog_state_dir': self.state_dir(name),
                  'vllm_rollout_environment': {'MODELOPS_STANDIN_CONFIG': self.config_path(name)}}
            hv.update(own)
            reached[name] = hv
        with open(path, 'w') as handle:
            yaml.safe_dump({'all': {'children': {'vllm': {'hosts': reached, 'vars': group_vars}}}}, handle,
                           sort_keys=False)
        return path

    def env(self):
        return {'PATH': os.pathsep.join([STANDINS, BIN, os.environ.get('PATH', '')]), 'MODELOPS_STANDIN_LOG': self.log}

    def calls(self, host=None):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as handle:
            entries = [json.loads(line) for line in handle if line.strip()]
        return [e for e in entries if host is None or e.get('host') == host]

    def restarts(self, host=None):
        """The calls that restarted (or recreated) a server."""
        return [e for e in self.calls(host) if 'servers' in e]

    def restart_time(self, host):
        found = self.restarts(host)
        assert len(found) == 1, (host, self.calls())
        return found[0]['time']


def rollout(fleet, inventory, args=(), timeout=600):
    return run_playbook(ROLLOUT_PLAY, args=list(args), inventory=inventory, extra_env=fleet.env(),
                        workdir=os.path.join(fleet.dir, 'run-%d' % time.monotonic_ns()), timeout=timeout)


def report_lines(run):
    """The play's one line per host (the 'Report | this host' task)."""
    lines = [json.loads(m) for m in re.findall(r'^\s*"msg": ("(?:[^"\\]|\\.)*")$', run.stdout, re.M)]
    return [line for line in lines if re.match(r'\S+: (.* done in |FAILED |would )', line)]


def assert_serving(fleet, names):
    """Every host serves after the rollout: one check of all of them, as users would run it."""
    result, run = health({'servers': [{'name': n, 'url': fleet.servers[n]['url']} for n in names], 'interval': 1})
    assert result.get('states') and set(result['states'].values()) <= {'idle', 'busy'}, (result.get('states'), run)
    for item in result['servers']:
        assert item['state'] == 'busy' or item['probe']['ok'], item


def assert_paused_at_restart(fleet, host):
    """The watchdog's pause file was there, the rollout's, in progress, when the host was restarted."""
    for entry in fleet.restarts(host):
        content = entry['watch'][fleet.pause_file(host)]
        assert content is not None and MARKER in content and 'state: in progress' in content, entry


# --------------------------------------------------------------------------- the documented example

def doc_example():
    """The inventory and the command of docs/rollout.md's example, as they are written there."""
    with open(DOC) as handle:
        text = handle.read()
    blocks = {}
    for label, body in re.findall(r'<!-- rollout-example: (\S+)[^>]*-->\s*```\w*\n(.*?)```', text, re.S):
        blocks[label] = body
    assert set(blocks) == {'inventory.yml', 'command'}, sorted(blocks)
    return blocks['inventory.yml'], blocks['command']


def test_documented_example_upgrades_a_batch_at_a_time(sim, tmp_path):
    """docs/rollout.md's example, verbatim: four hosts, an upgrade through a systemd drop-in, two hosts at a time."""
    inventory_text, command_text = doc_example()
    inventory = yaml.safe_load(inventory_text)
    group = inventory['all']['children']['vllm']
    names = list(group['hosts'])
    argv = shlex.split(command_text.replace('\\\n', ' '))
    assert argv[0] == 'ansible-playbook' and argv[argv.index('-i') + 1] == 'inventory.yml', argv
    image = dict(a.split('=', 1) for a in argv if a.startswith('vllm_rollout_image='))['vllm_rollout_image']

    fleet = Fleet(sim, tmp_path, names)
    dropins = {n: os.path.join(fleet.dir, n, 'vllm.service.d') for n in names}
    for name in names:
        fleet.write_config(name, {'vllm': {}}, watch=[os.path.join(dropins[name], 'rollout.conf')])
    workdir = tmp_path / 'example'
    workdir.mkdir()
    (workdir / 'inventory.yml').write_text(inventory_text)
    # How to reach the hosts here; nothing of the example is replaced.
    overrides = fleet.inventory(
        {n: dict(ansible_become=False, ansible_user='root', vllm_rollout_systemd_dropin_dir=dropins[n])
         for n in names}, dict(FAST), path=str(workdir / 'here.yml'))
    cmd = [_bin('ansible-playbook')] + argv[1:] + ['-i', overrides]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=str(workdir), env=ansible_env(fleet.env()), capture_output=True, text=True,
                          timeout=600, check=False, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - started
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, out

    # Per host: the pull while it served, then daemon-reload and restart; nothing else.
    for name in names:
        assert [c['argv'] for c in fleet.calls(name)] == [
            ['docker', 'pull', image], ['systemctl', 'daemon-reload'], ['systemctl', 'restart', 'vllm']], fleet.calls(name)
        restart = fleet.restarts(name)[0]
        assert restart['watch'][os.path.join(dropins[name], 'rollout.conf')] == (
            DROPIN_HEADER + 'Environment="VLLM_IMAGE=%s"\n' % image)
        assert_paused_at_restart(fleet, name)
        assert restart['servers'][fleet.servers[name]['id']]['running'] == 0
        assert sim.get(fleet.servers[name]['id'])['restarts'] == 1
        assert not os.path.exists(fleet.pause_file(name)), name

    # Two at a time, in inventory order: both of a batch restarted before either came back
    # (a restart keeps the port closed LOAD_SECONDS), the next batch only after both came back.
    t = [fleet.restart_time(n) for n in names]
    assert abs(t[0] - t[1]) < LOAD_SECONDS and abs(t[2] - t[3]) < LOAD_SECONDS, t
    assert min(t[2], t[3]) > max(t[0], t[1]) + LOAD_SECONDS, t

    lines = report_lines(proc)
    assert len(lines) == 4 and all('now idle' in line for line in lines), lines
    assert_serving(fleet, names)
    print('documented example: %.1f s for 4 hosts, serial 2' % seconds)


# --------------------------------------------------------------------------- every method, one at a time

def test_every_method_one_host_at_a_time(sim, tmp_path):
    """A systemd upgrade of the environment alone, a docker restart, a compose upgrade and a command upgrade,
    serial 1 (the default), in inventory order.

    A human's pause file on one host (an empty file) is left exactly as it was.
    """
    names = ['m-systemd', 'm-docker', 'm-compose', 'm-command']
    fleet = Fleet(sim, tmp_path, names)
    project = os.path.join(fleet.dir, 'm-compose', 'project')
    os.makedirs(project)
    with open(os.path.join(project, '.env'), 'w') as handle:
        handle.write('# the operator\'s own settings\nHF_HOME=/models\nVLLM_IMAGE=vllm/vllm-openai:v0.10.2\n')
    dropin = os.path.join(fleet.dir, 'm-systemd', 'vllm.service.d')
    fleet.write_config('m-systemd', {'vllm': {}}, watch=[os.path.join(dropin, 'rollout.conf')])
    fleet.write_config('m-docker', {'vllm-chat': {}})
    fleet.write_config('m-compose', {'vllm': {'project_dir': project}}, watch=[os.path.join(project, '.env')])
    fleet.write_config('m-command', {'vllm': {}}, log_env=['VLLM_IMAGE', 'VLLM_EXTRA'])
    with open(fleet.pause_file('m-docker'), 'w'):
        pass  # a human's `touch paused`

    new = 'vllm/vllm-openai:v0.11.0'
    inventory = fleet.inventory({
        'm-systemd': dict(vllm_watchdog_restart_method='systemd', vllm_rollout_systemd_dropin_dir=dropin,
                          vllm_rollout_service_env={'VLLM_ARGS': 'say "hi" to 100% of C:\\'}),
        'm-docker': dict(vllm_watchdog_restart_method='docker', vllm_watchdog_service='vllm-chat'),
        'm-compose': dict(vllm_watchdog_restart_method='compose', vllm_watchdog_compose_project_dir=project,
                          vllm_rollout_image=new, vllm_rollout_service_env={'VLLM_LOGGING_LEVEL': 'DEBUG'}),
        'm-command': dict(vllm_rollout_method='command', vllm_rollout_command=['vllm-restart', 'vllm'],
                          vllm_rollout_image=new, vllm_rollout_service_env={'VLLM_EXTRA': 'a "quoted" 100%'}),
    }, dict(FAST))
    run = rollout(fleet, inventory)
    assert run.rc == 0, run

    assert [c['argv'] for c in fleet.calls('m-systemd')] == [['systemctl', 'daemon-reload'], ['systemctl', 'restart', 'vllm']]
    # systemd's quoting: quotes and backslashes escaped, % doubled (a specifier otherwise).
    assert fleet.restarts('m-systemd')[0]['watch'][os.path.join(dropin, 'rollout.conf')] == (
        DROPIN_HEADER + 'Environment="VLLM_ARGS=say \\"hi\\" to 100%% of C:\\\\"\n')
    assert [c['argv'] for c in fleet.calls('m-docker')] == [['docker', 'restart', 'vllm-chat']]
    assert [c['argv'] for c in fleet.calls('m-compose')] == [
        ['docker', 'pull', new],
        ['docker', 'compose', '--project-directory', project, 'up', '-d', '--force-recreate', '--no-deps', 'vllm']]
    assert [c['argv'] for c in fleet.calls('m-command')] == [['vllm-restart', 'vllm']]
    assert fleet.restarts('m-command')[0]['env'] == {'VLLM_IMAGE': new, 'VLLM_EXTRA': 'a "quoted" 100%'}
    env_at_recreate = fleet.restarts('m-compose')[0]['watch'][os.path.join(project, '.env')]
    assert env_at_recreate == ('# the operator\'s own settings\nHF_HOME=/models\nVLLM_IMAGE=%s\n'
                               'VLLM_LOGGING_LEVEL=DEBUG\n' % new), env_at_recreate

    # One at a time, in inventory order: each restart after the previous host came back.
    t = [fleet.restart_time(n) for n in names]
    assert all(later > earlier + LOAD_SECONDS for earlier, later in zip(t, t[1:])), t

    for name in ['m-systemd', 'm-compose', 'm-command']:
        assert_paused_at_restart(fleet, name)
        assert not os.path.exists(fleet.pause_file(name)), name
    # The human's pause: there at the restart, and still there, untouched.
    assert fleet.restarts('m-docker')[0]['watch'][fleet.pause_file('m-docker')] == ''
    with open(fleet.pause_file('m-docker')) as handle:
        assert handle.read() == ''
    assert 'already paused here' in run.stdout
    assert_serving(fleet, names)
    print('every method: %.1f s for 4 hosts, serial 1' % run.seconds)


# --------------------------------------------------------------------------- a host that does not come back

def test_rollout_stops_at_the_first_host_that_does_not_come_back(sim, tmp_path):
    """Two at a time; f-02's restart never finishes. Its batch-mate f-01 finishes its own rollout (cutting it
    off mid-restart would leave it worse), f-02 keeps the watchdog paused with the reason, and the next batch
    is never started."""
    names = ['f-01', 'f-02', 'f-03', 'f-04']
    fleet = Fleet(sim, tmp_path, names)
    for name in names:
        # f-02's restart never finishes loading (its port stays closed for ten minutes).
        fleet.write_config(name, {'vllm': {'load_seconds': 600 if name == 'f-02' else LOAD_SECONDS}})
    inventory = fleet.inventory({n: {} for n in names}, dict(FAST, vllm_rollout_ready_timeout=4))
    try:
        run = rollout(fleet, inventory, args=['-e', 'vllm_rollout_serial=2'])
        assert run.rc != 0, run

        assert [c['argv'] for c in fleet.calls('f-01')] == [['systemctl', 'restart', 'vllm']]
        assert [c['argv'] for c in fleet.calls('f-02')] == [['systemctl', 'restart', 'vllm']]
        assert_paused_at_restart(fleet, 'f-02')
        # Later hosts untouched: no command at all, no pause file, no restart of their servers.
        for name in ['f-03', 'f-04']:
            assert fleet.calls(name) == [], name
            assert not os.path.exists(fleet.pause_file(name)), name
            assert sim.get(fleet.servers[name]['id'])['restarts'] == 0, name
        # The batch-mate came back and got its watchdog back.
        assert not os.path.exists(fleet.pause_file('f-01'))
        lines = dict(line.split(': ', 1) for line in report_lines(run))
        assert sorted(lines) == ['f-01', 'f-02'], lines
        assert lines['f-01'].startswith('restart done in') and 'now idle' in lines['f-01'], lines
        # f-02 keeps the watchdog paused, with the reason inside, for a human.
        with open(fleet.pause_file('f-02')) as handle:
            kept = yaml.safe_load(handle)
        assert kept['paused_by'] == 'modelops.vllm rollout' and kept['state'] == 'failed', kept
        # modelops.vllm.restart's own words, then what ran.
        assert re.match(r'not ready within 4(\.0)? s of the restart: /health answered ', kept['reason']), kept
        assert '; commands run: systemctl restart vllm;' in kept['reason'], kept
        assert lines['f-02'].startswith('FAILED (restart)'), lines
        assert 'not touched: f-03, f-04' in run.stdout, run
        assert 'the watchdog stays paused on it' in run.stdout, run
        print('a host that does not come back: %.1f s' % run.seconds)
    finally:
        sim.delete(fleet.servers['f-02']['id'])


@pytest.mark.parametrize('case', ['restart fails', 'restart does nothing',
                                  'restart does nothing, checked from the controller'])
def test_a_restart_that_fails_or_does_nothing_keeps_the_watchdog_paused(sim, tmp_path, case):
    """The restart command exits 1; or it exits 0 and restarts nothing (the old process keeps answering /health
    and /v1/models): either way the host did not come back, and it is left paused for a human."""
    fleet = Fleet(sim, tmp_path, ['x-01'])
    fleet.write_config('x-01', {'vllm': {'restart_rc': 1} if case == 'restart fails' else {}})
    host = {}
    if case != 'restart fails':
        host.update(vllm_rollout_method='command', vllm_rollout_command=['true'], vllm_rollout_ready_timeout=5,
                    vllm_rollout_check_on_controller=case.endswith('controller'))
    run = rollout(fleet, fleet.inventory({'x-01': host}, dict(FAST)))
    assert run.rc != 0, run
    with open(fleet.pause_file('x-01')) as handle:
        kept = yaml.safe_load(handle)
    assert kept['state'] == 'failed', kept
    if case == 'restart fails':
        assert [c['argv'] for c in fleet.calls()] == [['systemctl', 'restart', 'vllm']]
        assert kept['reason'].startswith(
            'the restart failed: systemctl restart vllm exited 1: standin: restart of vllm fails (restart_rc 1)'), kept
    else:
        # Whether the wait until ready runs on the host (modelops.vllm.restart read the start time before its
        # commands) or on the controller (given the start time the check before the restart saw): ready needs
        # another process, so the old one that still answers is caught there.
        assert [c['argv'] for c in fleet.calls()] == [], fleet.calls()  # `true` is not a stand-in: nothing restarted
        assert sim.get(fleet.servers['x-01']['id'])['restarts'] == 0
        assert re.match(r'not ready within 5(\.0)? s of the restart: the process that answers is the one from before '
                        r'the restart \(same process_start_time_seconds\): it was not restarted', kept['reason']), kept
    print('%s: %.1f s' % (case, run.seconds))


def test_a_failed_daemon_reload_is_not_followed_by_a_restart(sim, tmp_path):
    """An upgrade by systemd whose ``systemctl daemon-reload`` fails: the unit on disk and the one systemd runs now
    differ, so ``systemctl restart`` would start the old unit. The commands stop at the first failure: no restart,
    the host fails naming daemon-reload, and it keeps the watchdog paused (its drop-in was written) for a human."""
    fleet = Fleet(sim, tmp_path, ['dr-01', 'dr-02'])
    dropin = os.path.join(fleet.dir, 'dr-01', 'vllm.service.d')
    fleet.write_config('dr-01', {'vllm': {}}, watch=[os.path.join(dropin, 'rollout.conf')], daemon_reload_rc=1)
    fleet.write_config('dr-02', {'vllm': {}})
    image = 'vllm/vllm-openai:v0.11.0'
    inventory = fleet.inventory({'dr-01': dict(vllm_rollout_systemd_dropin_dir=dropin),
                                 'dr-02': dict(vllm_rollout_systemd_dropin_dir=os.path.join(fleet.dir, 'dr-02', 'd'))},
                                dict(FAST, vllm_rollout_image=image))
    run = rollout(fleet, inventory)
    assert run.rc != 0, run

    # daemon-reload ran, failed, and nothing after it: no restart of the unit, the server never restarted.
    assert [c['argv'] for c in fleet.calls('dr-01')] == [['systemctl', 'daemon-reload']], fleet.calls('dr-01')
    assert fleet.restarts() == [], fleet.calls()
    assert sim.get(fleet.servers['dr-01']['id'])['restarts'] == 0
    # The drop-in was written before it (the upgrade's new environment), so the host counts as touched.
    assert fleet.calls('dr-01')[0]['watch'][os.path.join(dropin, 'rollout.conf')] == (
        DROPIN_HEADER + 'Environment="VLLM_IMAGE=%s"\n' % image)
    failed = 'the restart failed: systemctl daemon-reload exited 1: Failed to reload daemon: Access denied'
    lines = dict(line.split(': ', 1) for line in report_lines(run))
    assert sorted(lines) == ['dr-01'], lines
    assert lines['dr-01'].startswith('FAILED (upgrade {"VLLM_IMAGE": "%s"}) after ' % image), lines
    assert failed in lines['dr-01'] and 'the commands after it were not run' in lines['dr-01'], lines
    with open(fleet.pause_file('dr-01')) as handle:
        kept = yaml.safe_load(handle)
    assert kept['state'] == 'failed' and kept['reason'].startswith(failed), kept
    assert '; commands run: systemctl daemon-reload;' in kept['reason'], kept
    assert 'the watchdog stays paused on it' in run.stdout, run
    # The rollout stopped there: the next host was not touched.
    assert fleet.calls('dr-02') == [] and not os.path.exists(fleet.pause_file('dr-02'))
    assert 'not touched: dr-02' in run.stdout, run
    print('a failed daemon-reload: %.1f s' % run.seconds)


# --------------------------------------------------------------------------- a busy host

def test_a_busy_host_is_waited_for_not_cut_off(sim, tmp_path):
    """Requests in flight that end after a few seconds: the restart comes only after they all ended."""
    fleet = Fleet(sim, tmp_path, ['busy-01'], step_rate=10)
    fleet.write_config('busy-01', {'vllm': {}})
    srv = fleet.servers['busy-01']
    inventory = fleet.inventory({'busy-01': {}}, dict(FAST, vllm_rollout_idle_timeout=120))
    # Two requests of 300 tokens at 10 steps/s: about 30 s in flight, well past the rollout's first check even on a
    # loaded machine (the check must see them busy at least once).
    started = time.time()
    sim.start_load(srv['id'], concurrency=2, max_tokens=300)
    sim.wait_for(srv['id'], lambda s: s['totals']['running'] == 2)
    run = rollout(fleet, inventory)
    assert run.rc == 0, run

    restart = fleet.restarts('busy-01')
    assert len(restart) == 1, fleet.calls()
    before = restart[0]['servers'][srv['id']]
    # Just before the restart: nothing in flight, both requests completed, none failed.
    assert before['running'] == 0 and before['waiting'] == 0, before
    assert [(b['completed'], b['failed'], b['active']) for b in before['load']] == [(2, 0, 0)], before
    assert restart[0]['time'] - started > 29, (restart[0]['time'] - started)
    assert re.search(r'FAILED - RETRYING: \[busy-01\]: Idle \| wait until the server has nothing in flight', run.stdout)
    assert_paused_at_restart(fleet, 'busy-01')
    assert not os.path.exists(fleet.pause_file('busy-01'))
    stats = sim.stats(srv['id'])
    assert [(b['completed'], b['failed']) for b in stats['load']] == [(2, 0)], stats['load']
    assert stats.get('responses', {}).get('500', 0) == 0, stats['responses']
    print('a busy host: %.1f s' % run.seconds)


@pytest.mark.parametrize('when_busy', ['stop', 'proceed'])
def test_a_host_still_busy_at_the_idle_timeout(sim, tmp_path, when_busy):
    """stop (the default): the host is left serving, untouched, its watchdog resumed, and the rollout stops.
    proceed: it is restarted anyway, and its requests in flight fail (what the setting says)."""
    fleet = Fleet(sim, tmp_path, ['long-01', 'long-02'], step_rate=20)
    for name in fleet.names:
        fleet.write_config(name, {'vllm': {}})
    srv = fleet.servers['long-01']
    sim.start_load(srv['id'], concurrency=2, max_tokens=10_000_000)
    sim.wait_for(srv['id'], lambda s: s['totals']['running'] == 2)
    group_vars = dict(FAST, vllm_rollout_idle_timeout=3)
    if when_busy == 'proceed':
        group_vars['vllm_rollout_when_busy'] = 'proceed'
    inventory = fleet.inventory({n: {} for n in fleet.names}, group_vars)
    try:
        run = rollout(fleet, inventory)
        load = sim.stats(srv['id'])['load']
        if when_busy == 'stop':
            assert run.rc != 0, run
            assert fleet.calls() == [], fleet.calls()
            assert [(b['active'], b['failed']) for b in load] == [(2, 0)], load
            assert not os.path.exists(fleet.pause_file('long-01'))  # untouched: the watchdog watches it again
            assert 'It was not touched; its watchdog runs again' in run.stdout, run
            assert 'not touched: long-02' in run.stdout, run
        else:
            assert run.rc == 0, run
            assert [len(fleet.restarts(n)) for n in fleet.names] == [1, 1], fleet.calls()
            assert fleet.restarts('long-01')[0]['servers'][srv['id']]['running'] == 2
            assert load[0]['failed'] >= 2, load
            assert 'restarting it anyway' in run.stdout, run
        print('still busy, %s: %.1f s' % (when_busy, run.seconds))
    finally:
        sim.stop_load(srv['id'])


# --------------------------------------------------------------------------- check mode

def test_check_mode_restarts_and_pauses_nothing(sim, tmp_path):
    fleet = Fleet(sim, tmp_path, ['chk-01'])
    fleet.write_config('chk-01', {'vllm': {}})
    inventory = fleet.inventory({'chk-01': {}}, dict(FAST))
    run = rollout(fleet, inventory, args=['--check', '-e', 'vllm_rollout_image=vllm/vllm-openai:v0.11.0'])
    assert run.rc == 0, run
    assert fleet.calls() == [], fleet.calls()
    assert not os.path.exists(fleet.pause_file('chk-01'))
    assert sim.get(fleet.servers['chk-01']['id'])['restarts'] == 0
    # modelops.vllm.restart in check mode: the commands it would run, none run.
    assert report_lines(run) == ['chk-01: would upgrade {"VLLM_IMAGE": "vllm/vllm-openai:v0.11.0"} (check mode; now idle): '
                                 'systemctl daemon-reload; systemctl restart vllm'], run


# --------------------------------------------------------------------------- settings

def test_a_misconfigured_host_stops_the_rollout_before_any_host_is_touched(sim, tmp_path):
    """The last hosts' settings are wrong (compose without a project directory; an instance across hosts whose rank is
    no host of the inventory): found before the first restart."""
    fleet = Fleet(sim, tmp_path, ['cfg-01', 'cfg-02', 'cfg-03'])
    for name in fleet.names:
        fleet.write_config(name, {'vllm': {}})
    inventory = fleet.inventory({'cfg-01': {},
                                 'cfg-02': dict(vllm_watchdog_restart_method='compose'),
                                 'cfg-03': dict(vllm_ranks=[{'host': 'cfg-09', 'service': 'vllm-rank1'}],
                                                vllm_launch='nnodes')}, dict(FAST))
    run = rollout(fleet, inventory)
    assert run.rc != 0, run
    assert fleet.calls() == [], fleet.calls()
    assert not any(os.path.exists(fleet.pause_file(n)) for n in fleet.names)
    assert 'cfg-02: invalid rollout settings (method compose' in run.stdout, run
    assert 'restart_method compose needs compose_project_dir' in run.stdout, run  # the one table's sentence
    assert 'cfg-03: invalid rollout settings' in run.stdout, run
    assert 'vllm_rollout_ranks: rank 1: host cfg-09 is not a host of the inventory' in run.stdout, run


def test_a_number_out_of_its_range_is_named_before_any_host_is_touched(sim, tmp_path):
    """The range is the catalogue's, the one the modules check (a rollout would otherwise fail on the host it had
    just paused). Set in the inventory, the playbook's first preflight says it with the hosts; set where only the role
    sees it (a play's vars), the role's own preflight says it: the variable and the value either way."""
    fleet = Fleet(sim, tmp_path, ['rng-01', 'rng-02'])
    for name in fleet.names:
        fleet.write_config(name, {'vllm': {}})
    inventory = fleet.inventory({'rng-01': {}, 'rng-02': dict(vllm_rollout_metrics_timeout=601)}, dict(FAST))
    run = rollout(fleet, inventory)
    assert run.rc != 0, run
    assert 'vllm_rollout_metrics_timeout must be a number greater than 0 and at most 600, got 601 (on rng-02)' in run.stdout, run
    play = ('- hosts: vllm\n  gather_facts: false\n  vars: {vllm_rollout_metrics_timeout: 601}\n  tasks:\n'
            '    - ansible.builtin.include_role: {name: modelops.vllm.rollout, tasks_from: preflight}\n')
    own = run_playbook(play, inventory=fleet.inventory({'rng-01': {}, 'rng-02': {}}, dict(FAST)), extra_env=fleet.env(),
                       workdir=os.path.join(fleet.dir, 'own'))
    assert own.rc != 0, own
    for name in fleet.names:
        assert ('%s: invalid rollout settings (method systemd' % name in own.stdout
                and 'vllm_rollout_metrics_timeout must be a number greater than 0 and at most 600, got 601' in own.stdout), own
    assert fleet.calls() == [], fleet.calls()
    assert not any(os.path.exists(fleet.pause_file(n)) for n in fleet.names)


# --------------------------------------------------------------------------- the role's interface
# (what can be read from the role's files alone is tested in tests/unit/roles/test_rollout_role.py)

def _role_yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_ansible_doc_lists_every_variable():
    """`ansible-doc -t role modelops.vllm.rollout` reads the argument specs and lists every variable."""
    proc = subprocess.run([_bin('ansible-doc'), '-t', 'role', '--json', 'modelops.vllm.rollout'], env=ansible_env(),
                          capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)['modelops.vllm.rollout']
    listed = doc['entry_points']['main']['options']
    assert sorted(listed) == sorted(_role_yaml('defaults', 'main.yml')), sorted(listed)
    assert all(opt.get('description') for opt in listed.values()), listed
    assert doc['entry_points']['preflight']['options'].keys() == listed.keys()
