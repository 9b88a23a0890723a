# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The service managers vLLM runs under: the exact commands, and what their answers mean.

Private to this collection. ``TABLE`` is the one table of the restart methods (a ``Method`` each:
its commands, the settings they need, its status parser, what names its main process), used by the
watchdog (status, logs, restart), the rollout (restart, upgrade) and the checks of both roles'
settings (``problems``); ``METHODS`` is the tuple of their names. ``restart_commands``,
``stop_start_commands``, ``logs_command``, ``status_commands`` and ``service_status`` read the
table. A new method is one more ``Method`` here (and the literal lists of names ansible-core needs in
the modules' and roles' specs, which tests/unit/plugins/module_utils/test_service_table.py keeps
equal to ``METHODS``). And pure parsers
that turn ``systemctl show`` and ``docker inspect`` output into
``{'running': True/False/None, 'started_at': ..., 'status': str}`` for the decision.
``running`` is None when it cannot be known: then a ``down`` server is never restarted. ``main_pid``
is the service's main process as the service manager names it (systemd's ``MainPID``, the container's
``.State.Pid``), for the evidence of a hang and the proof that a URL is the service.

``stop_start_commands`` is the restart as the watchdog performs it where it can: stop, then (after the
restart module waited for the memory to come back) start. ``systemctl restart`` and ``docker restart``
start the new process the moment the old one is gone, before the unified memory of a GB10 is back.

``run_commands`` runs a list of commands in order and stops at the first one that
fails: a failed ``systemctl daemon-reload`` must not be followed by a restart on the
old unit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import selectors
import signal
import subprocess
import time

# Output kept of a command: its last characters.
MAX_OUTPUT = 4000


class ServiceError(ValueError):
    """The settings of a method are incomplete (no service, no command)."""


class _Slot(object):
    """Where a setting goes in a command of the table."""

    __slots__ = ('key',)

    def __init__(self, key):
        self.key = key

    def __repr__(self):
        return '<%s>' % self.key


SERVICE = _Slot('service')
PROJECT = _Slot('compose_project_dir')
LINES = _Slot('lines')
# The operator's own argv (restart_command, status_command or logs_command), as a whole command.
COMMAND = _Slot('command')


class Need(object):
    """A setting a method's commands need: ``key`` (service, compose_project_dir, command), what a check of the
    settings says is missing (``setting``, the roles' and the filters' wording) and what the restart module says
    (``module``)."""

    __slots__ = ('key', 'setting', 'module')

    def __init__(self, key, setting, module=None):
        self.key = key
        self.setting = setting
        self.module = module or setting

    def __repr__(self):
        return 'Need(%r)' % self.key


class Method(object):
    """One restart method. Commands are lists of argv templates (an argv is a list of strings and slots, or
    ``COMMAND``, the operator's own argv).

    - ``needs``: the settings its restart needs, in the order they are asked for; ``upgrade_needs``: the further ones
      an upgrade needs (none of ``needs``).
    - ``restart``, ``upgrade``: the commands of a restart and of an upgrade (recreate with a new environment).
    - ``stop``, ``start``: the restart split in two (the watchdog waits for the memory between them), or None.
    - ``logs``: the argv whose output is the recent log; ``status``: the first argv that asks the service manager,
      ``parse(run, rc, stdout, stderr)`` what its answer means, ``cannot_ask`` why it cannot be asked without
      the settings.
    - ``main_pid``: what names the service's main process (for the evidence of a hang and the proof that it serves the
      URL), None when it has none.
    - ``target``: what a restart acts on, in words, with the settings as ``%(service)s``, ``%(compose_project_dir)s``
      and ``%(command)s`` (``target`` below).
    """

    __slots__ = ('name', 'needs', 'upgrade_needs', 'restart', 'upgrade', 'stop', 'start', 'logs', 'status', 'parse',
                 'cannot_ask', 'main_pid', 'target')

    def __init__(self, name, needs, restart, upgrade, stop, start, logs, status, parse, cannot_ask, main_pid,
                 upgrade_needs=(), target='%(service)s'):
        self.name = name
        self.needs = tuple(needs)
        self.upgrade_needs = tuple(upgrade_needs)
        self.restart = tuple(restart)
        self.upgrade = tuple(upgrade)
        self.stop = tuple(stop) if stop is not None else None
        self.start = tuple(start) if start is not None else None
        self.logs = logs
        self.status = status
        self.parse = parse
        self.cannot_ask = cannot_ask
        self.main_pid = main_pid
        self.target = target

    def __repr__(self):
        return 'Method(%r)' % self.name


def slots(argvs):
    """The keys of the settings a list of argv templates uses."""
    found = set()
    for argv in argvs:
        for part in ([argv] if argv is COMMAND else argv):
            if isinstance(part, _Slot):
                found.add(part.key)
    return found


def _fill(argv, values):
    if argv is COMMAND:
        return list(values['command'])
    return [values[part.key] if isinstance(part, _Slot) else part for part in argv]


def _values(service, compose_project_dir, command, lines=None):
    return {'service': service, 'compose_project_dir': compose_project_dir, 'command': command, 'lines': lines}


def _build(method, templates, values, needs):
    """The commands of the templates; ServiceError names the first need (in the table's order) they use and lack."""
    used = slots(templates)
    for need in needs:
        if need.key in used and not values[need.key]:
            raise ServiceError('restart method %s needs %s' % (method.name, need.module))
    return [_fill(argv, values) for argv in templates]


def _built_or_none(argv, values):
    """One argv of the table, or None when a setting it uses is not given."""
    if argv is None or not all(values[key] for key in slots([argv])):
        return None
    return _fill(argv, values)


def lookup(name):
    """The Method of a name, or None (any value: a list is no method either)."""
    return _BY_NAME.get(name) if name in METHODS else None


def problems(method, service=None, compose_project_dir=None, command=None, upgrade=False):
    """What is wrong with a method's settings, as sentences (empty: nothing): the check of the watchdog's instances
    and of the rollout's preflight. ``upgrade`` adds what an upgrade needs too."""
    if method not in METHODS:
        return ['restart_method must be one of %s, got %r' % (', '.join(METHODS), method)]
    one = _BY_NAME[method]
    values = _values(service, compose_project_dir, command)
    needs = one.needs + (one.upgrade_needs if upgrade else ())
    return ['restart_method %s needs %s' % (one.name, need.setting) for need in needs if not values[need.key]]


def restart_commands(method, service=None, compose_project_dir=None, command=None, upgrade=False):
    """The commands that restart (or, ``upgrade``, recreate with a new environment) the service, in order."""
    one = lookup(method)
    if one is None:
        raise ServiceError('unknown restart method %r (one of %s)' % (method, ', '.join(METHODS)))
    values = _values(service, compose_project_dir, command)
    if upgrade:
        return _build(one, one.upgrade, values, one.upgrade_needs + one.needs)
    return _build(one, one.restart, values, one.needs)


def stop_start_commands(method, service=None, compose_project_dir=None):
    """(stop commands, start commands) of a method that has both (systemd, docker, compose), else None."""
    one = lookup(method)
    if one is None or one.stop is None:
        return None
    values = _values(service, compose_project_dir, None)
    _build(one, one.stop + one.start, values, one.needs)
    return _build(one, one.stop, values, ()), _build(one, one.start, values, ())


def target(method, service=None, compose_project_dir=None, command=None):
    """What a restart by ``method`` acts on, in words (``the systemd unit vllm-b``)."""
    one = lookup(method)
    if one is None:
        return 'an unknown restart method %r' % (method,)
    return one.target % {'service': service or '?', 'compose_project_dir': compose_project_dir or '?',
                         'command': ' '.join(str(part) for part in command or []) or '?'}


def planned_commands(method, service=None, compose_project_dir=None, command=None, release_memory=False):
    """The commands a watchdog restart runs, in words: ``systemctl stop vllm; then, once the memory is back,
    systemctl start vllm`` (or the one restart command), or why there are none."""
    try:
        split = stop_start_commands(method, service, compose_project_dir) if release_memory else None
        if split:
            stop, start = ('; '.join(' '.join(argv) for argv in half) for half in split)
            return '%s; then, once the memory is back, %s' % (stop, start)
        return '; '.join(' '.join(str(part) for part in argv)
                         for argv in restart_commands(method, service, compose_project_dir, command))
    except ServiceError as exc:
        return 'none (%s)' % exc


def logs_command(method, service=None, compose_project_dir=None, command=None, lines=200):
    """The command whose output is the service's recent log, or None."""
    lines = str(int(lines))
    one = lookup(method)
    return _built_or_none(one and one.logs, _values(service, compose_project_dir, command, lines))


def parse_systemd_show(rc, stdout, stderr=''):
    """``systemctl show UNIT --property=ActiveState,SubState,ExecMainStartTimestamp,MainPID,LoadState
    --timestamp=unix``. A unit systemd does not know (``LoadState=not-found``; ``systemctl show`` still exits 0 and
    says ``inactive/dead``) is ``exists`` False."""
    props = {}
    for line in (stdout or '').splitlines():
        key, sep, value = line.partition('=')
        if sep:
            props[key.strip()] = value.strip()
    if rc != 0 or 'ActiveState' not in props:
        return {'running': None, 'started_at': None,
                'status': 'systemctl show failed: %s' % ((stderr or '').strip()[-200:] or 'exit %s' % rc)}
    if props.get('LoadState') == 'not-found':
        return {'running': False, 'started_at': None, 'exists': False, 'main_pid': None,
                'status': 'no such unit (systemctl show: LoadState=not-found)'}
    active, sub = props['ActiveState'], props.get('SubState', '')
    return {
        'running': active in ('active', 'activating', 'reloading'),
        # Between two automatic restarts systemd still shows the start of the process that died.
        'started_at': None if sub == 'auto-restart' else (props.get('ExecMainStartTimestamp') or None),
        'status': '%s/%s' % (active, sub),
        'main_pid': _pid(props.get('MainPID')),
    }


def _pid(value):
    """A process id as a service manager gives it (0 or garbage: none)."""
    try:
        pid = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return pid if 1 < pid < 2 ** 22 else None


def parse_docker_state(rc, stdout, stderr=''):
    """``docker inspect --format '{{json .State}}' CONTAINER``."""
    state = None
    if rc == 0:
        try:
            state = json.loads(stdout or '')
        except (ValueError, RecursionError):
            state = None
    if not isinstance(state, dict):
        out = {'running': None, 'started_at': None,
               'status': 'docker inspect failed: %s' % ((stderr or '').strip()[-200:] or 'exit %s' % rc)}
        if rc == 1 and 'no such' in (stderr or '').lower():  # "Error: No such object: NAME"
            out.update(running=False, exists=False, status='no such container: %s' % (stderr or '').strip()[-200:])
        return out
    restarting = bool(state.get('Restarting'))
    return {
        'running': bool(state.get('Running')),
        'started_at': None if restarting else (state.get('StartedAt') or None),
        'status': str(state.get('Status') or '?')[:40],
        'main_pid': _pid(state.get('Pid')) if state.get('Running') else None,
    }


def _parse_compose(run, rc, out, err):
    """``docker compose ps --all --quiet SERVICE``, then ``docker inspect`` of its first container."""
    if rc != 0:
        return {'running': None, 'started_at': None, 'status': 'docker compose ps failed: %s' % err.strip()[-200:]}
    ids = out.split()
    if not ids:
        return {'running': False, 'started_at': None, 'status': 'no container'}
    rc, out, err = run(_docker_inspect(ids[0]))
    if rc is None:
        return {'running': None, 'started_at': None, 'status': 'the service manager did not answer: %s' % err}
    return dict(parse_docker_state(rc, out, err), container=ids[0][:64])


def _parse_command(run, rc, out, err):
    """The operator's status_command: exit 0 is running."""
    return {'running': rc == 0, 'started_at': None, 'status': 'status command exited %s' % rc}


_INSPECT = ['docker', 'inspect', '--format', '{{json .State}}']
_PORTS = ['docker', 'inspect', '--format', '{{json .NetworkSettings.Ports}}']
_COMPOSE = ['docker', 'compose', '--project-directory', PROJECT]
_CONTAINER_PID = 'the container\'s process, docker inspect .State.Pid'


def _docker_inspect(container):
    return _INSPECT + [container]


TABLE = (
    Method(
        'systemd',
        needs=[Need('service', 'a service', 'a service (the unit)')],
        restart=[['systemctl', 'restart', SERVICE]],
        upgrade=[['systemctl', 'daemon-reload'], ['systemctl', 'restart', SERVICE]],
        stop=[['systemctl', 'stop', SERVICE]],
        start=[['systemctl', 'start', SERVICE]],
        logs=['journalctl', '--unit', SERVICE, '--lines', LINES, '--no-pager', '--output', 'short-iso'],
        status=['systemctl', 'show', SERVICE, '--property=ActiveState', '--property=SubState',
                '--property=ExecMainStartTimestamp', '--property=MainPID', '--property=LoadState', '--timestamp=unix'],
        parse=lambda run, rc, out, err: parse_systemd_show(rc, out, err),
        cannot_ask='no service',
        main_pid='systemd MainPID',
        target='the systemd unit %(service)s',
    ),
    Method(
        'docker',
        needs=[Need('service', 'a service', 'a service (the container)')],
        restart=[['docker', 'restart', SERVICE]],
        # A plain container keeps its image: only the operator's own command can recreate it.
        upgrade=[COMMAND],
        upgrade_needs=[Need('command', 'restart_command (your command that recreates the container)')],
        stop=[['docker', 'stop', SERVICE]],
        start=[['docker', 'start', SERVICE]],
        logs=['docker', 'logs', '--tail', LINES, SERVICE],
        status=_INSPECT + [SERVICE],
        parse=lambda run, rc, out, err: parse_docker_state(rc, out, err),
        cannot_ask='no service',
        main_pid=_CONTAINER_PID,
        target='the container %(service)s',
    ),
    Method(
        'compose',
        needs=[Need('service', 'a service', 'a service (the compose service)'),
               Need('compose_project_dir', 'compose_project_dir')],
        restart=[_COMPOSE + ['restart', SERVICE]],
        upgrade=[_COMPOSE + ['up', '-d', '--force-recreate', '--no-deps', SERVICE]],
        stop=[_COMPOSE + ['stop', SERVICE]],
        start=[_COMPOSE + ['start', SERVICE]],
        logs=_COMPOSE + ['logs', '--no-color', '--tail', LINES, SERVICE],
        status=_COMPOSE + ['ps', '--all', '--quiet', SERVICE],
        parse=_parse_compose,
        cannot_ask='no service',
        main_pid=_CONTAINER_PID,
        target='the compose service %(service)s of %(compose_project_dir)s',
    ),
    Method(
        'command',
        needs=[Need('command', 'restart_command (an argv list)', 'restart_command')],
        restart=[COMMAND],
        upgrade=[COMMAND],
        stop=None,  # one command: nothing to wait between
        start=None,
        logs=COMMAND,  # the logs_command
        status=COMMAND,  # the status_command
        parse=_parse_command,
        cannot_ask='no status_command',
        main_pid=None,
        target='the restart command %(command)s',
    ),
)
METHODS = tuple(one.name for one in TABLE)
# The methods that stop and start on their own (a restart with a memory wait between; a rank of an instance across
# hosts): your own command restarts in one go.
STOP_START_METHODS = tuple(one.name for one in TABLE if one.stop is not None and one.start is not None)


def service_args():
    """The options of a module that asks the service manager about one service of the host it runs on, for its
    argument spec (a fresh copy each call); doc fragment ``modelops.vllm.service`` documents them."""
    return dict(
        method=dict(type='str', default='systemd', choices=list(STOP_START_METHODS)),
        service=dict(type='str', required=True),
        compose_project_dir=dict(type='path'),
    )


_BY_NAME = dict((one.name, one) for one in TABLE)


def status_commands(method, service=None, compose_project_dir=None, command=None):
    """The first command that asks the service manager (None: it cannot be asked)."""
    one = lookup(method)
    return _built_or_none(one and one.status, _values(service, compose_project_dir, command))


def parse_ports(rc, stdout):
    """``docker inspect --format '{{json .NetworkSettings.Ports}}'``: the host ports a container publishes,
    [(host address, host port, container port)], or None when the answer is not that."""
    if rc != 0:
        return None
    try:
        ports = json.loads(stdout or '')
    except (ValueError, RecursionError):
        return None
    if ports is None:
        return []
    if not isinstance(ports, dict):
        return None
    out = []
    for inner, bindings in list(ports.items())[:200]:
        for binding in bindings if isinstance(bindings, list) else []:
            if not isinstance(binding, dict):
                continue
            try:
                out.append((str(binding.get('HostIp') or '0.0.0.0'), int(binding.get('HostPort')), str(inner)))
            except (TypeError, ValueError):
                continue
    return out


def published_ports(run, container):
    """The host ports ``container`` publishes (``parse_ports``), or None when Docker cannot say."""
    rc, out, dummy = run(_PORTS + [container])
    return parse_ports(rc, out)


def service_status(run, method, service=None, compose_project_dir=None, command=None):
    """What the service manager says, as {'running', 'started_at', 'status'}.

    ``run(argv)`` runs a command and returns (rc, stdout, stderr); rc None means it could not
    run (missing, timed out).
    """
    one = lookup(method)
    first = status_commands(method, service, compose_project_dir, command)
    if first is None:
        why = one.cannot_ask if one is not None else 'no service'
        return {'running': None, 'started_at': None, 'status': 'cannot be asked (%s)' % why}
    rc, out, err = run(first)
    if rc is None:
        return {'running': None, 'started_at': None, 'status': 'the service manager did not answer: %s' % err}
    return one.parse(run, rc, out, err)


def run_argv(argv, timeout=60, env=None, keep=MAX_OUTPUT):
    """Run one command: (rc, stdout, stderr), the outputs cut to their last ``keep`` bytes.
    rc is None when it could not run (not found, or still running after ``timeout`` seconds). A command still
    running then is killed with every process it started (it runs in a process group of its own), so a restart
    script that hangs in a child leaves nothing behind and never holds the run past ``timeout``.

    The outputs are read as they come and only their tails are kept while reading (``TailBuffer``): a tool that
    prints 300 MB (a stack dumper gone wrong, nvidia-smi in a loop) costs this process ``keep`` bytes, not 300 MB."""
    # Not AnsibleModule.run_command: it has no timeout, and a hung systemctl or docker must not hold the gate's lock.
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,  # pylint: disable=ansible-bad-function
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    except (OSError, ValueError) as exc:
        return None, '', '%s: %s' % (type(exc).__name__, exc)
    deadline = time.monotonic() + max(0.0, float(timeout))
    tails = {proc.stdout: TailBuffer(keep), proc.stderr: TailBuffer(keep)}
    if not _drain(tails, deadline):
        _kill_group(proc)
        return None, '', 'still running after %s s (stopped)' % timeout
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, '', 'still running after %s s (stopped)' % timeout
    for stream in tails:
        stream.close()
    return proc.returncode, tails[proc.stdout].text(), tails[proc.stderr].text()


class TailBuffer(object):
    """The last ``keep`` bytes of a stream, kept while it is read: never more than about twice ``keep`` (and one
    read's chunk) in memory, whatever the stream's length. ``seen`` counts every byte read."""

    __slots__ = ('keep', 'data', 'seen')

    def __init__(self, keep):
        self.keep = max(0, int(keep))
        self.data = bytearray()
        self.seen = 0

    def add(self, chunk):
        self.seen += len(chunk)
        self.data += chunk
        if len(self.data) > 2 * self.keep + _CHUNK:
            del self.data[:len(self.data) - self.keep]

    def tail(self):
        return bytes(self.data[len(self.data) - self.keep:]) if self.keep else b''

    def text(self):
        return self.tail().decode('utf-8', 'replace')


_CHUNK = 65536


def _drain(tails, deadline):
    """Read the pipes of ``tails`` ({stream: TailBuffer}) to their end: True, or False when ``deadline`` (the monotonic
    clock) came first."""
    selector = selectors.DefaultSelector()
    try:
        for stream in tails:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, dummy in selector.select(min(left, 1.0)):
                chunk = os.read(key.fileobj.fileno(), _CHUNK)
                if chunk:
                    tails[key.fileobj].add(chunk)
                else:
                    selector.unregister(key.fileobj)
        return True
    finally:
        selector.close()


def _kill_group(proc):
    """SIGKILL to the command's process group, then reap it (its pipes closed, not read to their end: a process
    that left the group may still hold them)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    proc.wait()


def run_commands(run, commands):
    """Run commands in order, stopping at the first that fails. Returns (records, failed record or None);
    each record is {'argv', 'rc', 'stdout', 'stderr'}."""
    records = []
    for argv in commands:
        rc, out, err = run(argv)
        record = {'argv': list(argv), 'rc': rc, 'stdout': out, 'stderr': err}
        records.append(record)
        if rc != 0:
            return records, record
    return records, None


def describe_failure(record):
    """One line: which command failed and how."""
    detail = (record.get('stderr') or record.get('stdout') or '').strip().splitlines()
    return '%s %s%s' % (' '.join(record['argv']),
                        'could not run' if record['rc'] is None else 'exited %s' % record['rc'],
                        ': %s' % detail[-1][:300] if detail else '')


def commands_failed(record):
    """The words of a restart whose command ``record`` failed: the commands after it were not run."""
    return 'the restart failed: %s; the commands after it were not run' % describe_failure(record)


def stop_then_start(run, stops, starts, after_stop, url=None, meminfo=None):
    """A restart that frees the memory first: the ``stops``, then ``after_stop()`` -> (how the process from before
    still answers or None, the memory wait's result or None), then the ``starts``.

    Returns (records, what failed in words or None, the memory wait's result or None). The start is run whatever went
    wrong after the stop began (a server left stopped is the worst outcome: a stop that failed may have stopped it
    half-way, and one that stopped something else leaves that stopped), except when the memory did not come back:
    vLLM is then not started into memory the host does not have, and stays stopped for the caller to escalate."""
    records, failed = run_commands(run, stops)
    still, memory = after_stop() if failed is None else (None, None)
    if still or failed:
        more, dummy = run_commands(run, starts)
        if still:
            why = ('the restart failed: after %s the process from before the restart still answers at %s (%s), so what '
                   'it stopped is not that server; it was started again (%s)'
                   % ('; '.join(' '.join(r['argv']) for r in records), url or 'the URL', still,
                      '; '.join(' '.join(r['argv']) for r in more)))
        else:
            why = ('the restart failed: %s; the start was run anyway, so that a server the stop left half-stopped is '
                   'not left down: %s' % (describe_failure(failed), '; '.join(
                       describe_failure(r) if r['rc'] != 0 else ' '.join(r['argv']) + ' exited 0' for r in more)))
        return records + more, why, None
    if memory is not None and not memory.get('released'):
        return records, ('the memory did not come back after vLLM stopped: %s. vLLM is NOT started (it would start '
                         'into memory the host does not have); it stays stopped (read from %s; the threshold: %s)'
                         % (memory.get('why'), meminfo or '?', memory.get('threshold'))), memory
    more, failed = run_commands(run, starts)
    return records + more, commands_failed(failed) if failed else None, memory
