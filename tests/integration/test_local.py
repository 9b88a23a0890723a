"""One DGX Spark on its own: the watchdog installed on the box itself as a systemd timer, as its owner does it.

``ansible-playbook modelops.vllm.local_install`` (then ``local_status``, ``local_remove``) as written in
docs/local.md, with ``vllm_local_root`` a temporary directory: every file it writes, and every path in those files,
is under it; nothing of this machine's /etc, /opt or /var is touched. systemd is the stand-in of tests/standins
(first on PATH): it logs every call, answers ``show``, ``is-enabled``, ``enable``, ``start``, ``disable`` for the
units of the temporary root as systemctl does, and for units it does not know as systemctl does too
(``LoadState=not-found``, "Unit file ... does not exist"). It never runs a unit: the test runs the service's command
as systemd would (its ``User``, ``WorkingDirectory``, ``Environment`` and ``ExecStart``, read from the unit file the
install wrote), and records each run's result where the stand-in keeps them, as systemd would.

The units are checked by the real ``systemd-analyze verify`` (Debian's systemd package:
scripts/ensure-tools.sh installs it). The install makes a real venv with ansible-core and requests from the package
index (about 40 s). The user of the timer is ``daemon``, an existing user of this machine that is not root, so that the
watchdog's runs show what it can do without root; no user is created.

Ports: the simulator on 127.0.0.1:28800-28899 (tests/support/ports.py).
"""

import configparser
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import yaml

from tests.support.ansible_run import env as ansible_env
from tests.support import servers
from tests.support.ports import span
from tests.support.standins import STANDINS, Standins

PORT_RANGE = span('local')
SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
BIN = os.path.dirname(sys.executable)
HOST = 'spark-01'

pytestmark = pytest.mark.timeout(900)


class Box(object):
    """A temporary root for the install, the stand-ins' config and log, and the runs' environment."""

    def __init__(self, sim, url, server_id, user):
        # Under /tmp, not pytest's 0700 directory: the timer's user must reach the venv and its state.
        self.root = tempfile.mkdtemp(prefix='modelops-local-root-', dir='/tmp')
        self.work = tempfile.mkdtemp(prefix='modelops-local-work-', dir='/tmp')
        for path in (self.root, self.work):
            os.chmod(path, 0o755)
        self.sim, self.url, self.server_id, self.user = sim, url, server_id, user
        self.home = self.path('/opt/vllm-watchdog')
        self.state = self.path('/var/lib/vllm-watchdog')
        self.units = self.path('/etc/systemd/system')
        os.makedirs(self.path('/lib/systemd/system'))
        # polkit is installed on this "host" (a unit of the distribution's), vLLM is a unit systemd runs.
        with open(self.path('/lib/systemd/system/polkit.service'), 'w') as handle:
            handle.write('[Unit]\nDescription=Authorization Manager\n[Service]\nType=dbus\nBusName=org.freedesktop.PolicyKit1\n'
                         'ExecStart=/usr/lib/polkit-1/polkitd --no-debug\n')
        # The stand-ins, copied where the timer's user reaches them: a checkout may sit under a directory only its
        # owner can enter (`mktemp -d` makes one 0700), and then that user's PATH would find the real systemctl.
        self.bin = os.path.join(self.work, 'standins')
        shutil.copytree(STANDINS, self.bin, ignore=shutil.ignore_patterns('__pycache__', 'connection_plugins'))
        self.standins = Standins(self.work, sim.base_url)
        # run_units: `systemctl start vllm-watchdog.service` runs the service's command as systemd would.
        self.standins.write({'vllm': {'server': server_id, 'state': 'auto', 'load_seconds': 1}},
                            unit_dirs=[self.units, self.path('/lib/systemd/system')], run_units=True)
        # The watchdog's runs, as that user, call the stand-ins: their config, its lock and their log are its too.
        entry = pwd.getpwnam(user)
        for path in (self.standins.config + '.lock', self.standins.log):
            open(path, 'a').close()  # pylint: disable=consider-using-with
        for path in (self.work, self.standins.config, self.standins.config + '.lock', self.standins.log):
            os.chown(path, entry.pw_uid, entry.pw_gid)
            os.chmod(path, 0o755 if os.path.isdir(path) else 0o666)

    def path(self, absolute):
        return self.root + absolute

    def env(self):
        env = ansible_env(self.standins.env())
        env.pop('ANSIBLE_CONNECTION_PLUGINS', None)
        env['ANSIBLE_STDOUT_CALLBACK'] = 'modelops.vllm.oneline'
        env['PATH'] = self.bin + os.pathsep + BIN + os.pathsep + SYSTEM_PATH
        return env

    def playbook(self, name, *extra, timeout=600):
        """``ansible-playbook modelops.vllm.<name>``, as the owner runs it (no inventory: this host)."""
        argv = [os.path.join(BIN, 'ansible-playbook'), 'modelops.vllm.%s' % name,
                '-e', 'vllm_local_root=%s' % self.root, '-e', 'vllm_local_user=%s' % self.user,
                '-e', 'vllm_local_become=false', '-e', 'vllm_local_host=%s' % HOST] + list(extra)
        return subprocess.run(argv, cwd=self.work, env=self.env(), capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)

    def calls(self):
        return self.standins.calls()

    def unit(self, name):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str
        with open(os.path.join(self.units, name)) as handle:
            parser.read_string(handle.read())
        return parser

    def systemctl(self, *argv):
        env = dict(self.standins.env(), PATH=self.bin + os.pathsep + SYSTEM_PATH)
        env.pop('ANSIBLE_CONNECTION_PLUGINS', None)
        return subprocess.run([os.path.join(self.bin, 'systemctl')] + list(argv), env=env, capture_output=True,
                              text=True, timeout=600, check=False, stdin=subprocess.DEVNULL)

    def fire(self):
        """One run of the timer: ``systemctl start vllm-watchdog.service``, as the timer starts it; the stand-in runs
        the service's command as systemd would (its User, WorkingDirectory, Environment, ExecStart), keeps its output
        in the unit's journal and its result in what ``systemctl show`` says. Returns (the start, what the run
        printed)."""
        journal = os.path.join(self.work, 'journal', 'vllm-watchdog.service.log')
        before = os.path.getsize(journal) if os.path.exists(journal) else 0
        proc = self.systemctl('start', 'vllm-watchdog.service')
        with open(journal) as handle:
            handle.seek(before)
            return proc, handle.read()

    def files(self):
        found = []
        for top, dirs, files in os.walk(self.root):
            found += [os.path.relpath(os.path.join(top, f), self.root) for f in files + dirs]
            dirs[:] = [d for d in dirs if d not in ('venv', 'collections')]  # listed, not walked
        return sorted(found)

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.work, ignore_errors=True)


def the_user():
    """The timer's user: daemon (not root) when the tests run as root, else the user that runs them."""
    return 'daemon' if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture
def box(sim):
    srv = servers.create(sim, 'stuck')
    made = Box(sim, srv['url'], srv['id'], the_user())
    yield made
    made.cleanup()


# Short waits, and no start-up grace: a hang that comes back right after a restart is judged at once.
FAST = ['-e', 'vllm_check_interval=1', '-e', 'vllm_watchdog_ready_delay=1', '-e', 'vllm_watchdog_ready_timeout=60',
        '-e', 'vllm_watchdog_probe_timeout=5', '-e', 'vllm_watchdog_metrics_timeout=5',
        '-e', 'vllm_watchdog_startup_grace=0',
        # The timer's user (daemon here) cannot read another user's process's sockets, so it cannot show that the
        # unit serves the URL (docs/local.md): on this box the owner says so.
        '-e', 'vllm_watchdog_assume_url_is_service=true',
        # The hung server is proven within a run's two waits (the default limit, 300 s, is a real GB10's).
        '-e', 'vllm_watchdog_freeze_limit=2']


def summary_lines(out):
    lines = out.strip().splitlines()
    assert not [line for line in lines if line.startswith(('PLAY ', 'TASK ', 'ok: [', 'changed: ['))], out
    return lines


def expected_service(box):
    return '''# Ansible managed
# modelops.vllm.local_install: one run of the vLLM watchdog on this host, started by vllm-watchdog.timer.
# It runs as {user}, who may stop, start and restart vllm.service ({root}/etc/polkit-1/rules.d/50-vllm-watchdog.rules).
# Its output: journalctl -u vllm-watchdog; its verdicts and restarts: ansible-playbook modelops.vllm.local_status
[Unit]
Description=modelops.vllm watchdog: restart the vLLM server of this host when it is stuck
Wants=network-online.target
After=network-online.target vllm.service

[Service]
Type=oneshot
User={user}
WorkingDirectory={root}/opt/vllm-watchdog
Environment=HOME={root}/var/lib/vllm-watchdog
ExecStart={root}/opt/vllm-watchdog/venv/bin/ansible-playbook modelops.vllm.watchdog
TimeoutStartSec=30min
NoNewPrivileges=yes
ProtectSystem=full
ProtectHome=read-only
PrivateTmp=yes
'''.format(user=box.user, root=box.root)


EXPECTED_TIMER = '''# Ansible managed
# modelops.vllm.local_install: the vLLM watchdog of this host, *:0/5 (OnCalendar).
[Unit]
Description=Run the modelops.vllm watchdog (*:0/5)

[Timer]
OnCalendar=*:0/5
AccuracySec=10s

[Install]
WantedBy=timers.target
'''


def expected_rule(user):
    return '''// Ansible managed
// modelops.vllm.local_install: the vLLM watchdog's user {user} may stop, start and restart
// vllm.service, and nothing else: a restart is a stop, a wait for the memory, then a start.
polkit.addRule(function(action, subject) {{
    if (action.id == "org.freedesktop.systemd1.manage-units" && subject.user == "{user}") {{
        var units = ["vllm.service"];
        var verb = action.lookup("verb");
        if (units.indexOf(action.lookup("unit")) >= 0 && (verb == "start" || verb == "stop" || verb == "restart")) {{
            return polkit.Result.YES;
        }}
    }}
}});
'''.format(user=user)


def acts_on(calls):
    """The units that calls changed (enable, disable, start, stop, restart), in order."""
    return [(argv[1], argv[-1]) for argv in calls
            if argv[0] == 'systemctl' and argv[1] in ('enable', 'disable', 'start', 'stop', 'restart')]


def verify(paths):
    analyze = shutil.which('systemd-analyze', path=SYSTEM_PATH)
    assert analyze, 'systemd-analyze is missing: scripts/ensure-tools.sh installs it (Debian package systemd)'
    proc = subprocess.run([analyze, 'verify'] + paths, capture_output=True, text=True, timeout=120, check=False)
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if 'vllm-watchdog' in line]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr


def test_install_run_status_and_remove_as_the_owner_does(box):
    # ---- install: one command
    proc = box.playbook('local_install', '-e', 'vllm_url=%s' % box.url, '-e', 'vllm_watchdog_service=vllm', *FAST)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = summary_lines(proc.stdout)
    assert len(lines) == 2 and lines[0].startswith('%s: the watchdog runs *:0/5 (OnCalendar) as %s (vllm-watchdog.timer, '
                                                   'enabled and started) for %s, restarting vllm.service'
                                                   % (HOST, box.user, box.url)), lines
    assert lines[1] == '1 host(s): 0 ok, 1 changed, 0 failed, 0 unreachable', lines
    # systemd: asked whether vllm.service and polkit exist, reloaded, the timer enabled and started; vLLM untouched.
    calls = box.calls()
    assert ['systemctl', 'show', 'vllm.service', '--property=Id', '--property=LoadState'] in calls, calls
    assert ['systemctl', 'show', 'polkit.service', '--property=LoadState'] in calls, calls
    assert acts_on(calls) == [('enable', 'vllm-watchdog.timer'), ('start', 'vllm-watchdog.timer')], calls
    assert calls.index(['systemctl', 'daemon-reload']) < calls.index(['systemctl', 'enable', 'vllm-watchdog.timer'])
    # ---- what it wrote, exactly, and nothing else
    assert box.files() == sorted([
        'etc', 'etc/polkit-1', 'etc/polkit-1/rules.d', 'etc/polkit-1/rules.d/50-vllm-watchdog.rules', 'etc/systemd',
        'etc/systemd/system', 'etc/systemd/system/timers.target.wants',
        'etc/systemd/system/timers.target.wants/vllm-watchdog.timer', 'etc/systemd/system/vllm-watchdog.service',
        'etc/systemd/system/vllm-watchdog.timer', 'lib', 'lib/systemd', 'lib/systemd/system',
        'lib/systemd/system/polkit.service', 'opt', 'opt/vllm-watchdog', 'opt/vllm-watchdog/ansible.cfg',
        'opt/vllm-watchdog/collections', 'opt/vllm-watchdog/inventory', 'opt/vllm-watchdog/inventory/hosts.yml',
        'opt/vllm-watchdog/venv', 'var', 'var/lib', 'var/lib/vllm-watchdog']), box.files()
    with open(os.path.join(box.units, 'vllm-watchdog.service')) as handle:
        assert handle.read() == expected_service(box)
    with open(os.path.join(box.units, 'vllm-watchdog.timer')) as handle:
        assert handle.read() == EXPECTED_TIMER
    with open(box.path('/etc/polkit-1/rules.d/50-vllm-watchdog.rules')) as handle:
        assert handle.read() == expected_rule(box.user)
    assert os.readlink(os.path.join(box.units, 'timers.target.wants', 'vllm-watchdog.timer')) == \
        os.path.join(box.units, 'vllm-watchdog.timer')
    with open(os.path.join(box.home, 'inventory', 'hosts.yml')) as handle:
        inventory = yaml.safe_load(handle)
    assert inventory == {'all': {'children': {'vllm': {'hosts': {HOST: {
        'ansible_connection': 'local', 'ansible_python_interpreter': box.home + '/venv/bin/python',
        'vllm_url': box.url, 'vllm_watchdog_service': 'vllm', 'vllm_watchdog_state_dir': box.state,
        'vllm_watchdog_become': False, 'vllm_check_interval': 1.0, 'vllm_watchdog_ready_delay': 1.0,
        'vllm_watchdog_ready_timeout': 60.0, 'vllm_watchdog_probe_timeout': 5.0, 'vllm_watchdog_metrics_timeout': 5.0,
        'vllm_watchdog_startup_grace': 0.0, 'vllm_watchdog_assume_url_is_service': True,
        'vllm_watchdog_freeze_limit': 2.0}}}}}}
    with open(os.path.join(box.home, 'ansible.cfg')) as handle:
        cfg = configparser.ConfigParser()
        cfg.read_string(handle.read())
    assert dict(cfg['defaults']) == {'inventory': 'inventory', 'collections_path': 'collections',
                                     'local_tmp': box.state + '/.ansible/tmp', 'remote_tmp': box.state + '/.ansible/tmp',
                                     'stdout_callback': 'modelops.vllm.oneline', 'bin_ansible_callbacks': 'true'}
    user = pwd.getpwnam(box.user)
    state = os.stat(box.state)
    assert (state.st_uid, state.st_mode & 0o777) == (user.pw_uid, 0o750)  # the watchdog's gate trusts nothing else
    hosts = os.stat(os.path.join(box.home, 'inventory', 'hosts.yml'))
    owner = 0 if os.geteuid() == 0 else user.pw_uid
    assert (hosts.st_uid, hosts.st_gid, hosts.st_mode & 0o777) == (owner, user.pw_gid, 0o640)
    for name in ('vllm-watchdog.service', 'vllm-watchdog.timer'):
        st = os.stat(os.path.join(box.units, name))
        assert st.st_mode & 0o777 == 0o644 and st.st_uid == os.geteuid(), name
    verify([os.path.join(box.units, 'vllm-watchdog.service'), os.path.join(box.units, 'vllm-watchdog.timer')])
    # ---- again: nothing changes
    before = len(box.calls())
    proc = box.playbook('local_install', '-e', 'vllm_url=%s' % box.url, '-e', 'vllm_watchdog_service=vllm', *FAST)
    assert proc.returncode == 0 and summary_lines(proc.stdout)[-1] == '1 host(s): 1 ok, 0 changed, 0 failed, 0 unreachable', \
        proc.stdout[-3000:]
    assert acts_on(box.calls()[before:]) == [], box.calls()[before:]

    # ---- the timer fires: the stuck server is restarted by the watchdog's user, through systemctl
    start, out = box.fire()
    assert start.returncode == 0 and start.stdout == start.stderr == '', (start, out[-4000:])
    assert ('%s/vllm: stuck - watchdog: restarted (restart: stuck; the inventory says that the systemd unit vllm serves '
            '%s (vllm_watchdog_assume_url_is_service; ' % (HOST, box.url)) in out, out
    assert '(restart 1 of at most 3 in 24h00m, a failed one counted too)) -> now idle' in out, out
    assert [call for call in acts_on(box.calls()) if call[1] == 'vllm'] == [('stop', 'vllm'), ('start', 'vllm')]
    assert box.sim.get(box.server_id)['restarts'] == 1
    start, out = box.fire()  # the next run: the new process serves
    assert start.returncode == 0 and '%s/vllm: idle - watchdog: no action' % HOST in out, out
    # what the runs printed is where journald keeps it: journalctl -u vllm-watchdog
    journal = subprocess.run([os.path.join(box.bin, 'journalctl'), '-u', 'vllm-watchdog', '--no-pager'],
                             env=dict(box.standins.env(), PATH=box.bin + os.pathsep + SYSTEM_PATH), capture_output=True,
                             text=True, timeout=60, check=False).stdout
    assert re.search(r' vllm-watchdog\[\d+\]: %s/vllm: stuck - watchdog: restarted ' % HOST, journal), journal

    # ---- its state: the timer, its last run, the restart and why
    proc = box.playbook('local_status')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = summary_lines(proc.stdout)
    assert re.match(r'^vllm-watchdog\.timer: enabled and active; the last run \S+Z \(success\); the next \S+Z$',
                    lines[0]), lines
    restart = [line for line in lines if 'watchdog: restart (' in line]
    assert len(restart) == 1 and restart[0].startswith('%s/vllm: ' % HOST), lines
    assert ' stuck - 2 request(s) in flight and no counter or KV-cache gauge moved' in restart[0], restart
    # What came of it: the outcome the watchdog recorded when it checked again after the restart.
    assert re.search(r' -> now idle \(.*\) \[evidence %s/evidence/vllm-\d{8}T\d{6}Z\.json\]$'
                     % re.escape(box.state), restart[0]), restart
    assert lines[-2].startswith('%s/vllm: 2 run(s) since ' % HOST) and ': 1 idle, 1 stuck; 1 restart(s)' in lines[-2], lines
    assert lines[-1] == '1 host(s): 1 ok, 0 changed, 0 failed, 0 unreachable', lines

    # ---- the same history, fleet-style, from the timer's own inventory
    env = box.env()
    proc = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', os.path.join(box.home, 'inventory'),
                           'modelops.vllm.history'], cwd=box.work, env=env, capture_output=True, text=True,
                          timeout=300, check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert restart[0] in proc.stdout.splitlines(), proc.stdout
    assert 'restarts: %s/vllm (1); host reboots: none; asked a human: none; not read: none' % HOST in proc.stdout

    # ---- the same hang again right after the restart: the watchdog asks a human, and the status says why
    servers.stuck(box.sim, box.server_id)
    start, out = box.fire()
    assert start.returncode == 1 and start.stderr.startswith('Job for vllm-watchdog.service failed because the control '
                                                             'process exited with error code.'), (start, out)
    assert '%s/vllm: stuck - watchdog: NEEDS A HUMAN (stuck again ' % HOST in out, out
    proc = box.playbook('local_status')
    assert proc.returncode == 2, proc.stdout[-3000:]
    lines = summary_lines(proc.stdout)
    assert lines[0].startswith('vllm-watchdog.timer: its last run (') and 'failed (exit-code, exit status 2)' in lines[0]
    human = [line for line in lines if 'watchdog: NEEDS A HUMAN (' in line]
    assert len(human) == 1 and 'stuck again' in human[0] and 'after a vLLM restart' in human[0], lines
    assert lines[-1].endswith('1 failed, 0 unreachable; failed: localhost'), lines
    assert box.sim.get(box.server_id)['restarts'] == 1  # not restarted again

    # ---- remove: one command; the history and the evidence stay
    before = len(box.calls())
    proc = box.playbook('local_remove')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = summary_lines(proc.stdout)
    assert lines[0] == ('%s: removed %s/etc/systemd/system/vllm-watchdog.timer, %s/etc/systemd/system/vllm-watchdog.service, '
                        '%s/etc/polkit-1/rules.d/50-vllm-watchdog.rules, %s; kept %s (the verdict history and the '
                        'evidence of every restart); vllm_local_purge: true removes it'
                        % (HOST, box.root, box.root, box.root, box.home, box.state)), lines
    assert acts_on(box.calls()[before:]) == [('disable', 'vllm-watchdog.timer'), ('stop', 'vllm-watchdog.timer')]
    assert ['systemctl', 'daemon-reload'] in box.calls()[before:]
    left = box.files()
    assert [f for f in left if f.startswith(('opt/', 'etc/systemd/system/', 'etc/polkit-1/rules.d/'))] == [
        'etc/systemd/system/timers.target.wants'], left
    assert os.path.isfile(os.path.join(box.state, 'vllm.verdicts.jsonl'))
    proc = box.playbook('local_status')
    assert proc.returncode == 2 and summary_lines(proc.stdout)[0] == (
        'vllm-watchdog.timer is not installed on this host (ansible-playbook modelops.vllm.local_install installs it)'), \
        proc.stdout
    proc = box.playbook('local_remove')
    assert proc.returncode == 0 and 'nothing to remove: the timer was not installed' in proc.stdout, proc.stdout


@pytest.mark.parametrize('unknown', ['vllm-qwen', 'polkit'])
def test_an_unknown_unit_or_no_polkit_stops_the_install_before_it_writes_anything(box, unknown):
    """systemctl says what it says of a unit it does not know (LoadState=not-found): the install names it and
    writes nothing."""
    if unknown == 'polkit':
        os.unlink(box.path('/lib/systemd/system/polkit.service'))
        service = 'vllm'
    else:
        service = unknown
    proc = box.playbook('local_install', '-e', 'vllm_url=%s' % box.url, '-e', 'vllm_watchdog_service=%s' % service)
    assert proc.returncode == 2, proc.stdout[-3000:]
    lines = summary_lines(proc.stdout)
    if unknown == 'polkit':
        assert lines[0] == ('localhost: FAILED: polkit is not installed on this host (systemctl show polkit.service: '
                            'LoadState=not-found), so %s could not restart vllm.service: install it (apt install '
                            'polkitd), or run the timer as root (vllm_local_user: root)' % box.user), lines
    else:
        assert lines[0] == ('localhost: FAILED: vllm-qwen.service is not a unit of this host (systemctl show '
                            'vllm-qwen.service: LoadState=not-found): set vllm_watchdog_service to the unit that runs '
                            'vLLM (systemctl list-units \'vllm*\'), or vllm_watchdog_restart_method to how vLLM runs '
                            'here'), lines
    assert box.files() == ['lib', 'lib/systemd', 'lib/systemd/system'] + (
        [] if unknown == 'polkit' else ['lib/systemd/system/polkit.service'])
    assert acts_on(box.calls()) == []
