"""The watchdog's proof that a URL is the service (issue 15) and its ladder on a GB10 (issue 17), end to end.

``playbooks/watchdog.yml`` through ``ansible-playbook``, against simulated vLLM servers, with the stand-ins of
``tests/standins/`` for ``systemctl``, a host reboot and a simulated ``/proc/meminfo`` (the stand-ins' ``meminfo``:
a stop sets ``MemAvailable`` to what the test says, a start and a reboot give it back), a kernel log in a file, and
the stand-ins' MainPID: the simulator process itself, which holds every simulated server's listening socket.

* ``down`` needs proof: a misspelt ``vllm_ulr`` on a busy host restarts nothing and names the problem (the URL is
  the role's default fallback; the service's process listens elsewhere); the healthy look-alikes are restarted: a
  server whose engine is dead while its process still listens on the URL's port, and a server whose port is closed
  and whose URL was seen serving before;
* memory that does not come back after vLLM stopped: vLLM is not started, and the next rung runs (a human with the
  reboot off; a host reboot with it on); the threshold learned from the last start that came up healthy;
* an NVIDIA Xid line in the kernel log since vLLM was last seen healthy: no vLLM restart (its look-alike, the same
  line during vLLM's start-up, vllm#56824: restarted as usual);
* a hang that comes back right after a restart: one reboot (when on), then a human; with the reboot off (the
  default), straight to a human;
* a host that does not come back from the reboot: the unreachable command, then a human;
* every step in the history, the summary (and ``set_stats``) and the textfile metrics;
* docs/gb10.md's inventory for one DGX Spark, as written: memory pinned after the stop, the host rebooted.

Nothing here can reboot this machine: the host's connection is ``standin_local`` (Ansible's ``local`` under
another name, which refuses every command that could reboot, power off or halt; ``ansible.builtin.reboot`` refuses
``local`` itself), the reboot's command is the ``host-reboot`` stand-in, and its boot id is a file.
Ports: the simulator in 127.0.0.1:28600-28799.
"""

import glob
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from tests.support import servers
from tests.support.ansible_run import run_playbook, watchdog_role_play
from tests.support.ports import bindable, span
from tests.support.standins import HOST_REBOOT, Standins

PORT_RANGE = span('ladder')
GiB = 1024 * 1024  # kB

WATCHDOG_PLAY = watchdog_role_play()

FAST = {
    'vllm_watchdog_interval': 1,
    'vllm_watchdog_freeze_limit': 2,  # proof within a run's two waits (the default limit is test_long_step.py's)
    'vllm_watchdog_probe_timeout': 4,
    'vllm_watchdog_metrics_timeout': 5,
    'vllm_watchdog_ready_delay': 1,
    'vllm_watchdog_ready_timeout': 60,
    'vllm_watchdog_memory_timeout': 4,
}


class Site(object):
    """Simulated hosts (one inventory host per server), their stand-ins, state dirs, kernel logs and textfiles."""

    def __init__(self, sim, tmp_path):
        self.sim = sim
        self.tmp = tmp_path
        self.standins = Standins(str(tmp_path), sim.base_url)
        self.services = {}
        self.hostvars = {}
        self.extra = {}
        self.runs = []
        self.boot_id = tmp_path / 'boot_id'
        self.boot_id.write_text('standin-boot-0\n')
        self.meminfo = tmp_path / 'meminfo'

    def host(self, name, server, hostvars=None, **service):
        self.services['vllm-' + name] = dict({'server': server['id'], 'state': 'running',
                                              'started_at': time.time() - 7200, 'load_seconds': 1}, **service)
        (self.tmp / ('kern-%s.log' % name)).write_text('')
        self.hostvars[name] = dict({
            'ansible_connection': 'standin_local', 'ansible_python_interpreter': sys.executable,
            'vllm_url': server['url'], 'vllm_watchdog_service': 'vllm-' + name,
            'vllm_watchdog_state_dir': str(self.tmp / 'state' / name),
            'vllm_watchdog_textfile': str(self.tmp / ('%s.prom' % name)),
            'vllm_watchdog_kernel_log': str(self.tmp / ('kern-%s.log' % name)),
            'vllm_watchdog_meminfo': str(self.meminfo),
        }, **(hostvars or {}))
        return self

    def write(self, **extra):
        self.extra.update(extra)
        memory = dict({'path': str(self.meminfo), 'total_kb': 128 * GiB, 'running_kb': 20 * GiB,
                       'stopped_kb': 110 * GiB, 'boot_kb': 118 * GiB}, **self.extra.pop('memory', {}))
        self.extra['memory'] = memory
        data = dict((k, v) for k, v in self.extra.items() if k != 'memory')
        self.standins.write(self.services, meminfo=memory, boot_id_file=str(self.boot_id), **data)
        if not self.meminfo.exists():
            self.meminfo.write_text('MemTotal: %d kB\nMemAvailable: %d kB\n' % (128 * GiB, memory['running_kb']))

    def run(self, group_vars=None, args=(), name=None):
        inventory = self.tmp / 'inventory.yml'
        with open(str(inventory), 'w') as handle:
            yaml.safe_dump({'all': {'children': {'vllm': {'hosts': self.hostvars,
                                                          'vars': dict(FAST, **(group_vars or {}))}}}}, handle)
        workdir = self.tmp / (name or 'run%d' % len(self.runs))
        workdir.mkdir()
        run = run_playbook(WATCHDOG_PLAY, inventory=str(inventory), workdir=str(workdir), timeout=600, args=args,
                           extra_env=self.standins.env())
        self.runs.append(run)
        return run

    def result(self, run, host):
        result = (run.outputs.get(host + '.json') or [None])[0]
        assert result is not None, run.stdout[-6000:] + run.stderr[-3000:]
        return result

    def history(self, host, name='vllm'):
        with open(os.path.join(self.hostvars[host]['vllm_watchdog_state_dir'], '%s.json' % name)) as handle:
            return json.load(handle)

    def verdicts(self, host, name='vllm'):
        with open(os.path.join(self.hostvars[host]['vllm_watchdog_state_dir'], '%s.verdicts.jsonl' % name)) as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def textfile(self, host):
        return (self.tmp / ('%s.prom' % host)).read_text()

    def evidence(self, host):
        paths = sorted(glob.glob(os.path.join(self.hostvars[host]['vllm_watchdog_state_dir'], 'evidence', '*.json')))
        out = []
        for path in paths:
            with open(path) as handle:
                out.append(json.load(handle))
        return out

    def calls(self, host):
        unit = 'vllm-' + host
        return [argv for argv in self.standins.calls() if unit in argv or argv[0] == 'host-reboot']

    def actions(self, host):
        """What was done to the host's service: stops, starts, restarts, reboots."""
        return [argv[:2] for argv in self.calls(host)
                if argv[0] == 'host-reboot' or argv[1:2] in (['stop'], ['start'], ['restart'])]


def metric(text, name, **labels):
    wanted = ','.join('%s="%s"' % item for item in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith('%s{' % name):
            head, value = line.rsplit(' ', 1)
            got = ','.join(sorted(head[len(name) + 1:-1].split(',')))
            if got == wanted:
                return float(value)
    return None


def stats(run):
    """The set_stats data the role gave (from the summary debug lines: the headline)."""
    return [line for line in run.stdout.splitlines() if 'vLLM watchdog:' in line]


@pytest.fixture
def site(sim, tmp_path):
    return Site(sim, tmp_path)


# --------------------------------------------------------------------------- issue 15: down needs proof

def test_a_misspelt_url_on_a_busy_host_restarts_nothing_and_the_look_alikes_are_restarted(site, sim, tmp_path):
    assert bindable(8000), ('something listens on 127.0.0.1:8000, the role\'s default URL: this test needs it free '
                            'to show what a misspelt vllm_url does')
    busy = servers.create(sim, 'busy', max_num_seqs=4, step_rate=20)
    dead = servers.create(sim, 'busy', max_num_seqs=4, step_rate=20)
    sim.set_state(dead['id'], 'dead')  # the engine died; the API server still listens on the port: /health 503
    seen = servers.create(sim, 'busy', max_num_seqs=4, step_rate=20)
    # gb10-busy: `vllm_ulr` instead of `vllm_url`: the role falls back to http://127.0.0.1:8000, where nothing is.
    site.host('gb10-busy', busy, {'vllm_ulr': busy['url']})
    del site.hostvars['gb10-busy']['vllm_url']
    site.host('gb10-dead', dead)
    site.host('gb10-seen', seen)
    site.write()

    first = site.run()
    assert first.rc == 2, first  # gb10-busy needs a human
    typo = site.result(first, 'gb10-busy')
    assert typo['state'] == 'down' and typo['action'] == 'fail' and not typo['restarted'], typo
    assert 'The URL may be wrong' in typo['decision'], typo
    assert 'http://127.0.0.1:8000 is only the role\'s default fallback: no vllm_url' in typo['decision'], typo
    assert 'not on 127.0.0.1:8000' in typo['decision'], typo  # the service's process listens on its real port
    assert 'NEEDS A HUMAN' in typo['line'] and 'The URL may be wrong' in typo['line']
    assert site.actions('gb10-busy') == [], site.calls('gb10-busy')
    assert sim.get(busy['id'])['restarts'] == 0 and sim.stats(busy['id'])['totals']['running'] > 0
    # The look-alike: the service's process listens on the URL's port and does not answer: restarted.
    lookalike = site.result(first, 'gb10-dead')
    assert lookalike['state'] == 'down' and lookalike['action'] == 'restarted', lookalike
    assert 'listens on 127.0.0.1:%d' % dead['port'] in lookalike['decision'], lookalike
    assert site.actions('gb10-dead') == [['systemctl', 'stop'], ['systemctl', 'start']], site.calls('gb10-dead')
    assert sim.get(dead['id'])['restarts'] == 1
    assert site.result(first, 'gb10-seen')['state'] == 'busy'

    # The same in check mode: not "would restart".
    checked = site.run(args=['--check'], name='check')
    assert site.result(checked, 'gb10-busy')['action'] == 'fail', site.result(checked, 'gb10-busy')

    # gb10-seen goes down (its port closes) while its service still runs, and its main process now listens nowhere:
    # it was seen serving at this URL on the first run: restarted.
    sim.set_state(seen['id'], 'stop')
    sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
    try:
        site.services['vllm-gb10-seen']['main_pid'] = sleeper.pid
        site.write()
        second = site.run()
    finally:
        sleeper.kill()
        sleeper.wait()
    again = site.result(second, 'gb10-seen')
    assert again['state'] == 'down' and again['action'] == 'restarted', again
    assert 'it was seen serving at this URL' in again['decision'], again
    assert site.actions('gb10-seen') == [['systemctl', 'stop'], ['systemctl', 'start']], site.calls('gb10-seen')
    assert site.result(second, 'gb10-busy')['action'] == 'fail'
    assert site.actions('gb10-busy') == [], site.calls('gb10-busy')  # never, in three runs
    assert sim.get(busy['id'])['restarts'] == 0


# --------------------------------------------------------------------------- issue 17: memory, Xid, ladder

def test_memory_that_does_not_come_back_is_not_started_into_and_a_human_is_asked(site, sim):
    """The first restart learns what the host had available before the start that came up healthy; the second finds
    the memory pinned after vLLM stopped (vllm#45179): vLLM is not started, and with the reboot off a human is next."""
    stuck = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50)
    site.host('gb10-mem', stuck, {'vllm_watchdog_startup_grace': 2, 'vllm_watchdog_cooldown': 0,
                                  'vllm_watchdog_rehang_window': 0})
    site.write(memory={'stopped_kb': 110 * GiB})
    first = site.run()
    assert first.rc == 0, first
    done = site.result(first, 'gb10-mem')
    assert done['action'] == 'restarted', done
    baseline = json.loads(open(os.path.join(site.hostvars['gb10-mem']['vllm_watchdog_state_dir'],
                                            'vllm.memory.json')).read())
    assert baseline['available_kb'] == 110 * GiB  # what the host had just before the start that came up healthy

    servers.stuck(sim, stuck['id'])
    site.write(memory={'stopped_kb': 9 * GiB})  # pinned: far below 90 % of the 110 GiB
    time.sleep(2)
    second = site.run()
    assert second.rc == 2, second
    result = site.result(second, 'gb10-mem')
    assert result['action'] == 'restart stopped' and result['failed'] and not result['restarted'], result
    assert 'the memory did not come back after vLLM stopped' in result['decision'], result
    assert 'MemAvailable is 9.0 GiB, below the 99.0 GiB' in result['decision'], result
    assert 'a host reboot, is off (vllm_watchdog_reboot)' in result['decision'], result
    assert site.actions('gb10-mem')[-2:] == [['systemctl', 'start'], ['systemctl', 'stop']], site.calls('gb10-mem')
    assert sim.get(stuck['id'])['status'] == 'stopped'  # not started into the wedge
    history = site.history('gb10-mem')
    assert history['last_action'] == 'fail' and history['restarts_total'] == 2
    assert os.path.exists(os.path.join(site.hostvars['gb10-mem']['vllm_watchdog_state_dir'], 'vllm.restart-failed'))
    assert [v['action'] for v in site.verdicts('gb10-mem')][-2:] == ['restart', 'fail']
    textfile = site.textfile('gb10-mem')
    assert metric(textfile, 'vllm_watchdog_needs_human', vllm_instance='vllm') == 1
    assert metric(textfile, 'vllm_watchdog_action', vllm_instance='vllm', action='fail') == 1
    assert 'needs a human: gb10-mem/vllm' in stats(second)[-1]


def test_memory_that_does_not_come_back_reboots_the_host_when_the_reboot_is_on(site, sim):
    stuck = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50)
    site.host('gb10-memreboot', stuck)
    site.write(memory={'stopped_kb': 9 * GiB})
    run = site.run({'vllm_watchdog_memory_threshold': 100 * 1024, 'vllm_watchdog_reboot': True,
                    'vllm_watchdog_reboot_command': HOST_REBOOT, 'vllm_watchdog_reboot_timeout': 60,
                    'vllm_watchdog_boot_time_command': 'cat %s' % site.boot_id})
    assert run.rc == 0, run
    result = site.result(run, 'gb10-memreboot')
    assert result['action'] == 'rebooted' and result['rebooted'] and result['after'] == 'idle', result
    assert 'the memory did not come back after vLLM stopped' in result['decision'], result
    assert 'reboot the host' in result['decision'], result
    assert site.actions('gb10-memreboot') == [['systemctl', 'stop'], ['host-reboot']], site.calls('gb10-memreboot')
    assert site.standins.data()['reboots'] == 1 and site.boot_id.read_text().startswith('standin-boot-1-')
    history = site.history('gb10-memreboot')
    assert history['last_step']['step'] == 'reboot' and len(history['reboots']) == 1 and len(history['restarts']) == 2
    assert [v['action'] for v in site.verdicts('gb10-memreboot')] == ['restart', 'reboot']
    textfile = site.textfile('gb10-memreboot')
    assert metric(textfile, 'vllm_watchdog_reboots_total', vllm_instance='vllm') == 1
    assert metric(textfile, 'vllm_watchdog_action', vllm_instance='vllm', action='reboot') == 1
    assert 'rebooted: gb10-memreboot/vllm' in stats(run)[-1]


def test_an_xid_since_vllm_was_healthy_is_no_reason_to_restart_vllm_but_one_of_its_start_up_is(site, sim):
    """The GPU is not healthy: a vLLM restart would start into it. The look-alike: NV_ERR_NO_MEMORY during vLLM's
    start-up also appears on healthy starts of a DGX Spark (vllm#56824) and is no reason."""
    xid = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50)
    startup = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50)
    site.host('gb10-xid', xid)
    site.host('gb10-startup', startup)
    site.write()
    now = time.time()
    (site.tmp / 'kern-gb10-xid.log').write_text(
        '%.6f spark kernel: NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. MMU '
        'Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1e_2c000000\n' % (now - 120))
    (site.tmp / 'kern-gb10-startup.log').write_text(
        '%.6f spark kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) '
        'returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359\n' % (now - 7100))
    run = site.run()
    assert run.rc == 2, run
    result = site.result(run, 'gb10-xid')
    assert result['state'] == 'stuck' and result['action'] == 'fail', result
    assert 'the GPU is not healthy' in result['decision'] and 'NVRM: Xid' in result['decision'], result
    assert site.actions('gb10-xid') == [], site.calls('gb10-xid')
    evidence = site.evidence('gb10-xid')
    assert len(evidence) == 1
    assert [line['kind'] for line in evidence[0]['hang']['kernel']['lines']] == ['xid']
    assert site.result(run, 'gb10-startup')['action'] == 'restarted', site.result(run, 'gb10-startup')
    assert site.actions('gb10-startup') == [['systemctl', 'stop'], ['systemctl', 'start']]


def test_a_vllm_that_does_not_serve_its_model_after_the_reboot_is_a_failed_reboot_and_stays_red(site, sim):
    """The reboot's wait until ready is the proof the reboot worked: a server that does not list the model it must
    serve (here: another model) is no success, and the host stays failed on the next run, with no second reboot."""
    stuck = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50)
    site.host('gb10-wrongmodel', stuck, {'vllm_model': 'not-the-served-model'})
    site.write(memory={'stopped_kb': 9 * GiB})
    ladder = {'vllm_watchdog_memory_threshold': 100 * 1024, 'vllm_watchdog_reboot': True,
              'vllm_watchdog_reboot_command': HOST_REBOOT, 'vllm_watchdog_reboot_timeout': 60,
              'vllm_watchdog_boot_time_command': 'cat %s' % site.boot_id, 'vllm_watchdog_ready_timeout': 8}
    run = site.run(ladder)
    assert run.rc == 2, run
    result = site.result(run, 'gb10-wrongmodel')
    assert result['action'] == 'reboot failed' and result['failed'] and not result['rebooted'], result
    assert 'not ready after the host reboot' in result['decision'] and 'not-the-served-model' in result['decision']
    state_dir = site.hostvars['gb10-wrongmodel']['vllm_watchdog_state_dir']
    assert os.path.exists(os.path.join(state_dir, 'vllm.restart-failed'))
    again = site.run(ladder)
    assert again.rc == 2 and site.result(again, 'gb10-wrongmodel')['action'] == 'fail', again
    assert [argv for argv in site.standins.calls() if argv[0] == 'host-reboot'] == [['host-reboot']]


def test_a_hang_that_comes_back_right_after_a_restart_gets_one_reboot_then_a_human(site, sim):
    hung = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50, hang_after_restart=True)
    site.host('gb10-rehang', hung, {'vllm_watchdog_startup_grace': 3})
    site.write()
    ladder = {'vllm_watchdog_reboot': True, 'vllm_watchdog_reboot_command': HOST_REBOOT,
              'vllm_watchdog_reboot_timeout': 60, 'vllm_watchdog_boot_time_command': 'cat %s' % site.boot_id}
    first = site.run(ladder)
    assert site.result(first, 'gb10-rehang')['action'] == 'restarted', first
    time.sleep(3)
    second = site.run(ladder)
    rebooted = site.result(second, 'gb10-rehang')
    assert rebooted['action'] == 'rebooted', rebooted
    assert 'stuck again' in rebooted['decision'] and 'after a vLLM restart' in rebooted['decision'], rebooted
    time.sleep(3)
    third = site.run(ladder)
    assert third.rc == 2, third
    human = site.result(third, 'gb10-rehang')
    assert human['action'] == 'fail' and 'neither a restart nor a reboot cleared this hang' in human['decision'], human
    # One restart, one reboot, then nothing more.
    assert site.actions('gb10-rehang') == [['systemctl', 'stop'], ['systemctl', 'start'], ['host-reboot']], \
        site.calls('gb10-rehang')
    history = site.history('gb10-rehang')
    assert history['restarts_total'] == 1 and history['reboots_total'] == 1 and len(history['restarts']) == 2
    assert [v['action'] for v in site.verdicts('gb10-rehang') if not v.get('step')] == ['restart', 'reboot', 'fail']
    # The restart's outcome is a line of its own: it worked (a new process answered, hung again at once).
    assert [v['action'] for v in site.verdicts('gb10-rehang') if v.get('step')][:1] == ['restarted']
    textfile = site.textfile('gb10-rehang')
    assert metric(textfile, 'vllm_watchdog_restarts_total', vllm_instance='vllm') == 1
    assert metric(textfile, 'vllm_watchdog_reboots_total', vllm_instance='vllm') == 1
    assert metric(textfile, 'vllm_watchdog_needs_human', vllm_instance='vllm') == 1
    assert 'restarted: gb10-rehang/vllm' in stats(first)[-1]
    assert 'rebooted: gb10-rehang/vllm' in stats(second)[-1]
    assert 'needs a human: gb10-rehang/vllm' in stats(third)[-1]
    # Evidence before each step: the stack dump of the service's process (the simulator) is in it.
    evidence = site.evidence('gb10-rehang')
    assert len(evidence) == 2
    for kept in evidence:
        stacks = kept['hang']['stacks']
        assert any(p.get('dump') for p in stacks['processes']), stacks


def test_with_the_reboot_off_a_hang_that_comes_back_goes_straight_to_a_human(site, sim):
    hung = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50, hang_after_restart=True)
    site.host('gb10-noreboot', hung, {'vllm_watchdog_startup_grace': 3})
    site.write()
    first = site.run()
    assert site.result(first, 'gb10-noreboot')['action'] == 'restarted', first
    time.sleep(3)
    second = site.run()
    assert second.rc == 2, second
    human = site.result(second, 'gb10-noreboot')
    assert human['action'] == 'fail', human
    assert 'the next step, a host reboot, is off (vllm_watchdog_reboot)' in human['decision'], human
    assert site.actions('gb10-noreboot') == [['systemctl', 'stop'], ['systemctl', 'start']]
    assert 'reboots' not in site.standins.data()


def test_a_host_that_does_not_come_back_gets_the_unreachable_command_then_a_human(site, sim, tmp_path):
    hung = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50, hang_after_restart=True)
    site.host('gb10-gone', hung, {'vllm_watchdog_startup_grace': 3})
    site.write(reboot_comes_back=False)
    ladder = {'vllm_watchdog_reboot': True, 'vllm_watchdog_reboot_command': HOST_REBOOT,
              'vllm_watchdog_reboot_timeout': 5, 'vllm_watchdog_boot_time_command': 'cat %s' % site.boot_id,
              'vllm_watchdog_controller_state_dir': str(tmp_path / 'controller'),
              'vllm_watchdog_unreachable_command': [HOST_REBOOT, '--power-cycle', '{{ inventory_hostname }}']}
    site.run(ladder)
    time.sleep(3)
    run = site.run(ladder)
    assert run.rc == 2, run
    result = site.result(run, 'gb10-gone')
    assert result['action'] == 'reboot failed' and result['failed'] and result['unreachable'], result
    assert 'the host did not come back' in result['decision'], result
    assert 'unreachable command %s --power-cycle gb10-gone exited 0' % HOST_REBOOT in result['line'], result
    power = [argv for argv in site.standins.calls() if argv[0] == 'host-reboot']
    assert power == [['host-reboot'], ['host-reboot', '--power-cycle', 'gb10-gone']], power
    assert 'unreachable hosts: gb10-gone' in stats(run)[-1]


# --------------------------------------------------------------------------- docs/gb10.md's inventory, as written

def test_the_gb10_example_inventory_reboots_a_spark_whose_memory_stays_pinned(site, sim, tmp_path):
    """docs/gb10.md's inventory for one DGX Spark (``<!-- example: gb10-inventory -->``), verbatim but for what
    points it at this machine's stand-ins: the connection, the URL, the paths, the reboot's and the power command's
    stand-in. Its memory threshold (100000 MiB) holds a stuck server's start when the memory stays pinned after
    ``docker stop``, and its ``vllm_watchdog_reboot: true`` reboots the (stand-in) host instead; no name it uses is
    unknown to the collection."""
    from tests.integration.test_docs_examples import examples  # pylint: disable=import-outside-toplevel
    inventory = yaml.safe_load(examples('gb10.md')['gb10-inventory'])
    group = inventory['all']['children']['vllm']
    (host, hostvars), = group['hosts'].items()
    assert group['vars']['vllm_watchdog_reboot'] is True and group['vars']['vllm_watchdog_memory_threshold'] == 100000
    stuck = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50, model=hostvars['vllm_model'])
    site.host(host, stuck)
    mine = site.hostvars[host]
    del mine['vllm_watchdog_service']  # the example's: vllm
    site.services = {'vllm': site.services.pop('vllm-' + host)}
    hostvars.update(mine)
    site.hostvars[host] = hostvars
    site.write(memory={'stopped_kb': 9 * GiB})  # pinned after the stop: below the example's 100000 MiB
    settings = dict(group['vars'], vllm_watchdog_reboot_command=HOST_REBOOT, vllm_watchdog_reboot_timeout=60,
                    vllm_watchdog_boot_time_command='cat %s' % site.boot_id,
                    vllm_watchdog_unreachable_command=[HOST_REBOOT, '--power-cycle', '{{ bmc_host }}'],
                    vllm_watchdog_controller_state_dir=str(tmp_path / 'controller'))
    del settings['vllm_watchdog_textfile']  # the host's own, in tmp_path
    run = site.run(settings)
    assert run.rc == 0, run
    assert 'is not a variable of modelops.vllm' not in run.stdout + run.stderr, run
    result = site.result(run, host)
    assert result['action'] == 'rebooted' and result['after'] == 'idle', result
    assert 'MemAvailable is 9.0 GiB, below the 97.7 GiB' in result['decision'], result
    acted = [argv[:2] for argv in site.standins.calls()
             if argv[0] == 'host-reboot' or argv[1:2] in (['stop'], ['start'], ['restart'])]
    assert acted == [['docker', 'stop'], ['host-reboot']], site.standins.calls()
