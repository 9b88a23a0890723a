"""The hostile-input tier (issue 26, the restart side): what the watchdog remembers and collects cannot stop a server,
reboot a host, or swell past its bounds.

The modules run as processes, exactly as Ansible runs them on the host (an args file, ``PYTHONPATH`` = the
collections root; their peak RSS from ``os.wait4``), with stand-ins of ``systemctl``, ``py-spy`` and ``nvidia-smi``
first on ``PATH`` (small scripts written here: each logs its argv, ``systemctl show`` prints what the case says).

* class 22, a restart that stops and then fails: ``modelops.vllm.restart`` with ``release_memory`` after a stop
  meets a memory baseline that is garbage (deep nesting, binary, NaN, a 1 MB file, a link, a FIFO, a directory), a
  meminfo that is garbage, a stop that fails or hangs. Invariant: no traceback; every stop is followed by a start,
  or the task fails with one line that says vLLM is not started and names the file it read;
* class 23, a memory baseline written on a bigger host, on another host or in another boot: not trusted, vLLM is
  started, and the result says so; the look-alike, a baseline of this host and boot, still holds vLLM stopped when
  its memory did not come back;
* class 24, evidence that swells the gate: ``modelops.vllm.watchdog_gate`` deciding a restart while py-spy and
  nvidia-smi print 300 MB each. Invariant: the gate's peak RSS stays under 150 MB (it was about 600 MB), the
  output's tail is kept, the gate ends in bounded time;
* class 25, a kernel line from the future: an Xid stamped 2099 (and its neighbours) with reboots on: never a reboot,
  and the decision says the line was ignored; the look-alike, an Xid a minute old, is the GPU's trouble;
* class 26, evidence aimed at the wrong process: the unit names no main process (0, empty, garbage, 1) while a
  Python process listens on the URL's port: py-spy is never run, and the evidence says why.

And the role, through ``ansible-playbook`` (``playbooks/watchdog.yml``'s play, test_ladder.py's site: simulated
servers, the stand-ins of ``tests/standins/``, a simulated meminfo): a stuck server whose baseline says 480 GiB on a
128 GiB host, or is nested past the recursion limit, is stopped, started again and serves; the baseline is then
written anew, of this host and boot.

Ports: the simulator in 127.0.0.1:29400-29479, the listeners that stand for the server at the URL in 29480-29499.
"""

import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from tests.integration.test_ladder import Site
from tests.support import hostile as h
from tests.support import servers
from tests.support.paths import COLLECTIONS
from tests.support.ports import block

GiB = 1024 * 1024  # kB
TOTAL = 125 * GiB
FIRST, LAST_PORT = block('hostile-restart')
PORT_RANGE = '%d-%d' % (FIRST, FIRST + 79)
FIRST_PORT = FIRST + 80  # the listeners
MAX_GATE_RSS = 150 * 1000 * 1000

SYSTEMCTL = r'''#!%(python)s
import json, os, sys, time
config = json.load(open(os.environ['STANDIN26_CONFIG']))
with open(config['calls'], 'a') as log:
    log.write(json.dumps(sys.argv[1:]) + '\n')
verb = sys.argv[1] if len(sys.argv) > 1 else ''
if verb == 'show':
    sys.stdout.write('ActiveState=active\nSubState=running\nExecMainStartTimestamp=@%%d\nMainPID=%%s\n'
                     'LoadState=loaded\n' %% (config['started_at'], config['main_pid']))
    sys.exit(0)
if verb in ('stop', 'start'):
    if config.get(verb + '_hangs'):
        time.sleep(3600)
    if verb == 'stop' and config.get('meminfo_after_stop') is not None:
        with open(config['meminfo'], 'w') as handle:
            handle.write(config['meminfo_after_stop'])
    sys.exit(config.get(verb + '_rc', 0))
sys.exit(0)
'''

# A tool that prints ``MB`` megabytes (stdout) and a last line, in constant memory of its own.
PRINTER = r'''#!%(python)s
import json, os, sys
with open(os.environ['STANDIN26_CALLS_%(name)s'], 'a') as log:
    log.write(json.dumps(sys.argv[1:]) + '\n')
line = b'x' * 1048575 + b'\n'
for i in range(%(mb)d):
    sys.stdout.buffer.write(line)
sys.stdout.buffer.write(b'THE END OF %(name)s\n')
'''


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)


def _script(path, text):
    path.write_text(text % {'python': sys.executable} if '%(python)s' in text else text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


class Host(object):
    """A directory of stand-ins, a meminfo file and a state directory: one simulated host."""

    def __init__(self, tmp_path, mb=300):
        self.tmp = tmp_path
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.bin = tmp_path / 'bin'
        self.bin.mkdir()
        self.state = tmp_path / 'state'
        self.state.mkdir(mode=0o750)
        self.meminfo = tmp_path / 'meminfo'
        self.meminfo.write_text('MemTotal: %d kB\nMemAvailable: %d kB\n' % (TOTAL, 100 * GiB))
        self.calls = tmp_path / 'systemctl.calls'
        self.config = tmp_path / 'standin.json'
        self.write()
        _script(self.bin / 'systemctl', SYSTEMCTL)
        for name, tool in (('PYSPY', 'py-spy'), ('SMI', 'nvidia-smi')):
            _script(self.bin / tool, PRINTER.replace('%(name)s', name).replace('%(mb)d', str(mb)))

    def write(self, **config):
        data = dict({'calls': str(self.calls), 'started_at': int(time.time() - 7200), 'main_pid': 0,
                     'meminfo': str(self.meminfo)}, **config)
        self.config.write_text(json.dumps(data))

    def env(self):
        env = dict(os.environ, PYTHONPATH=COLLECTIONS, PATH='%s:%s' % (self.bin, os.environ.get('PATH', '')),
                   STANDIN26_CONFIG=str(self.config), STANDIN26_CALLS_PYSPY=str(self.tmp / 'py-spy.calls'),
                   STANDIN26_CALLS_SMI=str(self.tmp / 'nvidia-smi.calls'))
        for name in ('HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy'):
            env.pop(name, None)
        return env

    def systemctl(self):
        if not self.calls.exists():
            return []
        calls = [json.loads(line) for line in self.calls.read_text().splitlines() if line.strip()]
        return [argv[0] for argv in calls if argv[:1] != ['show']]

    def tool_calls(self, name):
        path = self.tmp / ('%s.calls' % name)
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def this_boot():
    with open('/proc/sys/kernel/random/boot_id') as handle:
        return handle.read().strip()


def baseline(**over):
    return json.dumps(dict({'available_kb': 100 * GiB, 'total_kb': TOTAL, 'boot_id': this_boot(),
                            'host': os.uname()[1], 'at': time.time() - 3600}, **over))


# --------------------------------------------------------------------------- classes 22, 23: the restart module

def _garbage(path, kind):
    """Make ``path`` a baseline that cannot be read as one."""
    if kind == 'link':
        os.symlink(str(path) + '.target', str(path))
        with open(str(path) + '.target', 'w') as handle:
            handle.write(baseline())
    elif kind == 'fifo':
        os.mkfifo(str(path))
    elif kind == 'directory':
        os.mkdir(str(path))
    else:
        with open(str(path), 'wb') as handle:
            handle.write(kind)


RESTART_CASES = [
    # (class, name, how the baseline file is made (bytes or a kind), systemctl config, meminfo after the stop,
    #  whether vLLM may stay stopped, the words the line or the memory's words must hold)
    # Nested past Python's recursion limit within the 4 KB a baseline may have (the traceback of issue 26).
    (22, 'a baseline of 2,040 nested lists', b'[' * 2040 + b']' * 2040, {}, None, False, 'not JSON'),
    (22, 'a baseline of 1,150 nested lists and objects', b'[{"":' * 575 + b'1' + b'}]' * 575, {}, None, False,
     'not JSON'),
    (22, 'a baseline cut inside its nesting', b'[' * 4000, {}, None, False, 'not JSON'),
    (22, 'a baseline of binary', b'\x00\xff\xfe\x80' * 500, {}, None, False, 'not JSON'),
    (22, 'a baseline of NaN', b'{"available_kb": NaN, "at": 1}', {}, None, False, 'not a positive number'),
    (22, 'a baseline that is a list', b'[{"available_kb": 104857600}]', {}, None, False, 'not a JSON object'),
    (22, 'a baseline of 1 MB', b'{"available_kb": 1, "pad": "' + b'x' * (1024 * 1024) + b'"}', {}, None, False,
     'larger than'),
    (22, 'a baseline that is a symbolic link', 'link', {}, None, False, 'symbolic link'),
    (22, 'a baseline that is a FIFO', 'fifo', {}, None, False, 'not a regular file'),
    (22, 'a baseline that is a directory', 'directory', {}, None, False, 'not a regular file'),
    (22, 'a stop that fails', None, {'stop_rc': 1}, None, False, 'the start was run anyway'),
    (22, 'a stop that hangs past the command timeout', None, {'stop_hangs': True}, None, False,
     'the start was run anyway'),
    # A meminfo that cannot be read after the stop: the baseline cannot be shown to fit (started), or the operator's
    # own threshold cannot be shown to be met (stopped, said): either, never a silent stop.
    (22, 'meminfo that is garbage after the stop, a good baseline', baseline().encode(), {},
     '\x00garbage\n' * 10, None, 'no MemAvailable line'),
    (22, 'meminfo that is empty after the stop, a good baseline', baseline().encode(), {}, '', None,
     'no MemAvailable line'),
    (22, 'meminfo that is garbage after the stop, a threshold set', None, {'_args': {'memory_threshold': 1024}},
     '\x00garbage\n' * 10, True, 'MemAvailable cannot be read'),
    (23, '480 GiB on a 125 GiB host', baseline(available_kb=480 * GiB, total_kb=512 * GiB).encode(), {}, None, False,
     'more than this host has'),
    (23, 'written on a host with 512 GiB', baseline(total_kb=512 * GiB).encode(), {}, None, False,
     'written on a host with 512.0 GiB'),
    (23, 'written on another host', baseline(host='another-spark').encode(), {}, None, False, 'another host'),
    (23, 'written in another boot', baseline(boot_id='an-earlier-boot').encode(), {}, None, False, 'another boot'),
    (23, 'written by an older version (no host, no boot)', json.dumps({'available_kb': 100 * GiB, 'at': 1}).encode(),
     {}, None, False, 'does not say how much memory'),
    (23, 'written in 2099', baseline(at=4070908800.0).encode(), {}, None, False, 'in the future'),
    # The look-alike: a baseline of this host and boot, the memory pinned after the stop: vLLM stays stopped, said.
    (23, 'a baseline of this host and boot, the memory pinned', baseline().encode(), {},
     'MemTotal: %d kB\nMemAvailable: %d kB\n' % (TOTAL, 9 * GiB), True, 'MemAvailable is 9.0 GiB, below the 90.0 GiB'),
]


def _restart_problems(host, run, may_stay_stopped, words, path):
    result = run.result if isinstance(run.result, dict) else {}
    problems = []
    marker = h.traceback_in(run.stdout, run.stderr)
    if marker or h.has_exception_key(result) or not result:
        problems.append('a traceback or no result (%s): %s' % (marker, (run.stderr or run.stdout)[-400:]))
        return problems
    if run.timed_out:
        problems.append('the module did not end in time')
    calls = host.systemctl()
    if 'stop' not in calls:
        problems.append('no stop was run: %s' % calls)
        return problems
    started_after = 'start' in calls[calls.index('stop'):]
    msg = result.get('msg') or ''
    said = msg + ' ' + json.dumps(result.get('memory') or {})
    if not started_after:
        if may_stay_stopped is False:
            problems.append('vLLM was stopped and never started: %s (%s)' % (calls, msg[:300]))
        elif not (result.get('failed') and 'NOT started' in msg and '\n' not in msg):
            problems.append('vLLM stays stopped without one line that says so: %r' % msg[:300])
        elif str(host.meminfo) not in msg or (path.exists() and 'baseline' in words and str(path) not in msg):
            problems.append('the line does not name the file it read: %r' % msg[:300])
    elif may_stay_stopped is True:
        problems.append('vLLM was started though its memory did not come back: %s' % calls)
    if words not in said:
        problems.append('%r is not said: %s' % (words, said[:500]))
    if 'baseline' in said and str(path) not in said and may_stay_stopped is not True \
            and os.path.lexists(str(path)) and result.get('memory'):
        problems.append('the baseline that was not trusted is not named: %s' % said[:400])
    return problems


def test_a_stopped_server_is_always_started_again_or_named(tmp_path):
    violations = h.Violations()
    for index, (cls, name, made, config, after_stop, stays, words) in enumerate(RESTART_CASES):
        host = Host(tmp_path / ('case%d' % index), mb=0)
        path = host.state / 'vllm.memory.json'
        if made is not None:
            _garbage(path, made)
        config = dict(config)
        more = config.pop('_args', {})
        host.write(meminfo_after_stop=after_stop, **config)
        args = dict({'method': 'systemd', 'service': 'vllm', 'release_memory': True, 'wait_ready': False,
                     'meminfo': str(host.meminfo), 'memory_baseline': str(path), 'memory_timeout': 1,
                     'memory_delay': 0.2, 'command_timeout': 2}, **more)
        run = h.run_module('restart', args, str(host.tmp), env=host.env(), timeout=60)
        violations.check(cls, name, _restart_problems(host, run, stays, words, path))
    violations.assert_none()


# --------------------------------------------------------------------------- classes 24, 25, 26: the gate

class Listener(object):
    """A Python process that listens on the URL's port (the server a unit's MainPID would name, or not)."""

    def __init__(self, port):
        code = ('import socket, sys, time\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)'
                '\ns.bind(("127.0.0.1", %d))\ns.listen(8)\nprint("ready", flush=True)\ntime.sleep(600)\n' % port)
        self.proc = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE)
        assert self.proc.stdout.readline().strip() == b'ready'
        self.pid = self.proc.pid
        self.url = 'http://127.0.0.1:%d' % port

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def _port(offset):
    port = FIRST_PORT + offset
    assert port <= LAST_PORT
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(('127.0.0.1', port))
    return port


def _gate(host, listener, kernel_lines, reboot=True, assume=False):
    kernel = host.tmp / 'kern.log'
    kernel.write_text(''.join(line + '\n' for line in kernel_lines))
    args = {'state_dir': str(host.state), 'reboot': reboot, 'startup_grace': 60, 'evidence_timeout': 60,
            'instances': [{'name': 'vllm', 'restart_method': 'systemd', 'service': 'vllm', 'url': listener.url,
                           'assume_url_is_service': assume,
                           'verdict': {'state': 'stuck', 'reason': 'hostile: stuck'}}],
            'py_spy': 'py-spy', 'nvidia_smi': 'nvidia-smi', 'meminfo': str(host.meminfo), 'kernel_log': str(kernel),
            'log_lines': 5}
    return h.run_module('watchdog_gate', args, str(host.tmp), env=host.env(), timeout=120)


def _one(run):
    result = run.result if isinstance(run.result, dict) else {}
    return ((result.get('instances') or [{}]) + [{}])[0], result


def _evidence(decided):
    path = decided.get('evidence_file')
    if not path or not os.path.exists(path):
        return {}
    with open(path) as handle:
        return json.load(handle)


XID = 'spark kernel: NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=python3, Ch 00000008'


def future_lines(now):
    return [
        ('an Xid stamped 2099 (ISO)', '2099-01-01T00:00:00+0000 %s' % XID),
        ('an Xid stamped 2099 (epoch)', '4070908800.000000 %s' % XID),
        ('an Xid an hour ahead', '%.6f %s' % (now + 3600, XID)),
        ('NV_ERR_NO_MEMORY stamped 2099', '2099-06-30T12:00:00Z spark kernel: NVRM: Out of memory [NV_ERR_NO_MEMORY]'),
        ('an Xid stamped before the boot (1999)', '1999-01-01T00:00:00Z %s' % XID),
    ]


def test_evidence_that_prints_300_mb_and_a_kernel_line_from_the_future_neither_swell_the_gate_nor_reboot(tmp_path):
    violations = h.Violations()
    host = Host(tmp_path / 'swell', mb=300)
    listener = Listener(_port(0))
    try:
        host.write(main_pid=listener.pid)
        now = time.time()
        for index, (name, line) in enumerate(future_lines(now)):
            if index:
                host = Host(tmp_path / ('future%d' % index), mb=1)
                host.write(main_pid=listener.pid)
            run = _gate(host, listener, [line])
            decided, result = _one(run)
            problems = []
            marker = h.traceback_in(run.stdout, run.stderr)
            if marker or not decided:
                problems.append('a traceback or no result (%s): %s' % (marker, (run.stderr or run.stdout)[-400:]))
            elif decided.get('action') != 'restart':
                problems.append('not the restart a stuck server gets: %s: %s'
                                % (decided.get('action'), decided.get('decision')))
            elif 'ignored: their time cannot be true' not in decided.get('decision', ''):
                problems.append('the decision does not say the line was ignored: %s' % decided.get('decision'))
            evidence = _evidence(decided).get('hang') or {}
            if not (evidence.get('kernel') or {}).get('ignored'):
                problems.append('the evidence does not keep the ignored line apart: %s' % evidence.get('kernel'))
            if index == 0:
                # Class 24: 300 MB from py-spy and from nvidia-smi (twice), read by the gate.
                stacks = (evidence.get('stacks') or {}).get('processes') or [{}]
                if not stacks[0].get('dump', '').endswith('THE END OF PYSPY\n'):
                    problems.append('the stack dump\'s tail is not kept: %r' % str(stacks[0])[-200:])
                if run.max_rss_bytes >= MAX_GATE_RSS:
                    problems.append('the gate peaked at %.0f MB reading 900 MB of evidence (limit %.0f MB)'
                                    % (run.max_rss_bytes / 1e6, MAX_GATE_RSS / 1e6))
                violations.check(24, 'py-spy and nvidia-smi printing 300 MB each', [
                    p for p in problems if 'tail' in p or 'peaked' in p or 'traceback' in p])
                print('gate peak RSS with 300 MB from each evidence tool: %.1f MB in %.1f s'
                      % (run.max_rss_bytes / 1e6, run.seconds))
            violations.check(25, name, [p for p in problems if 'peaked' not in p and 'tail' not in p])
        # The look-alike: an Xid a minute old is the GPU's trouble: the next rung, not a vLLM restart.
        host = Host(tmp_path / 'true-xid', mb=1)
        host.write(main_pid=listener.pid)
        run = _gate(host, listener, ['%.6f %s' % (time.time() - 60, XID)])
        decided, dummy = _one(run)
        assert decided.get('action') == 'reboot' and 'the GPU is not healthy' in decided.get('decision', ''), run
    finally:
        listener.stop()
    violations.assert_none()


@pytest.mark.parametrize('main_pid', ['0', '', 'garbage', '1'])
def test_a_unit_without_a_main_process_gets_no_stack_dump_of_what_listens_on_its_port(tmp_path, main_pid):
    listener = Listener(_port(1 + ['0', '', 'garbage', '1'].index(main_pid)))
    try:
        host = Host(tmp_path, mb=1)
        host.write(main_pid=main_pid)
        run = _gate(host, listener, [], reboot=False, assume=True)
        decided, dummy = _one(run)
    finally:
        listener.stop()
    problems = []
    if h.traceback_in(run.stdout, run.stderr) or not decided:
        problems.append('a traceback or no result: %s' % (run.stderr or run.stdout)[-400:])
    elif decided.get('action') != 'restart':
        problems.append('the case needs a decided restart (the inventory\'s word): %s' % decided.get('decision'))
    else:
        stacks = (_evidence(decided).get('hang') or {}).get('stacks') or {}
        if host.tool_calls('py-spy'):
            problems.append('py-spy was run on %s' % host.tool_calls('py-spy'))
        if not str(stacks.get('error', '')).startswith('no stack dump: the service manager names no main process'):
            problems.append('the evidence does not say why there is no stack dump: %s' % stacks)
    h.Violations().check(26, 'MainPID=%r while a Python process listens on the URL\'s port' % main_pid, problems)
    assert not problems, problems


# --------------------------------------------------------------------------- classes 22, 23: the role

def test_the_role_starts_a_stopped_server_again_whatever_its_baseline_holds(sim, tmp_path):
    site = Site(sim, tmp_path)
    cases = {
        'gb10-bigger': baseline(available_kb=480 * GiB, total_kb=512 * GiB),  # written on a bigger host
        'gb10-nested': '[' * 2040 + ']' * 2040,  # nested past the recursion limit, within 4 KB
        'gb10-boot': baseline(available_kb=127 * GiB, total_kb=128 * GiB, boot_id='an-earlier-boot'),
    }
    made = {}
    for name, text in cases.items():
        made[name] = servers.create(sim, 'stuck', max_num_seqs=4, step_rate=50)
        site.host(name, made[name])
        state = site.hostvars[name]['vllm_watchdog_state_dir']
        os.makedirs(state, mode=0o750)
        with open(os.path.join(state, 'vllm.memory.json'), 'w') as handle:
            handle.write(text)
    site.write()  # 110 GiB of 128 GiB back after the stop
    run = site.run()
    violations = h.Violations()
    for name in cases:
        problems = []
        marker = h.traceback_in(run.stdout, run.stderr)
        if marker:
            problems.append('a traceback: %s' % marker)
        result = (run.outputs.get(name + '.json') or [{}])[0]
        if result.get('action') != 'restarted' or result.get('after') != 'idle':
            problems.append('not restarted and serving: %s: %s' % (result.get('action'), result.get('decision')))
        if site.actions(name) != [['systemctl', 'stop'], ['systemctl', 'start']]:
            problems.append('stopped and not started again: %s' % site.calls(name))
        if sim.get(made[name]['id'])['restarts'] != 1:
            problems.append('the server was not restarted once: %s' % sim.get(made[name]['id']))
        with open(os.path.join(site.hostvars[name]['vllm_watchdog_state_dir'], 'vllm.memory.json')) as handle:
            text = handle.read()
        try:
            written = json.loads(text)
        except ValueError:
            written = {}
        if written.get('boot_id') != this_boot() or written.get('total_kb') != 128 * GiB:
            problems.append('the baseline was not written anew, of this host and boot: %s' % text[:300])
        violations.check(23 if name != 'gb10-nested' else 22, 'the role, a baseline %s' % name[5:], problems)
    assert run.rc == 0, run
    violations.assert_none()
