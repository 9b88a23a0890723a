# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The service managers vLLM runs under: the exact commands, and what their answers mean.

Private to this collection. The one table of commands per restart method, used by the
watchdog (status, logs, restart) and the rollout (restart, upgrade); and pure parsers
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
import signal
import subprocess

METHODS = ('systemd', 'docker', 'compose', 'command')
# Output kept of a command: its last characters.
MAX_OUTPUT = 4000


class ServiceError(ValueError):
    """The settings of a method are incomplete (no service, no command)."""


def _need(value, what, method):
    if not value:
        raise ServiceError('restart method %s needs %s' % (method, what))
    return value


def _compose(project_dir, *rest):
    return ['docker', 'compose', '--project-directory', _need(project_dir, 'compose_project_dir', 'compose')] + list(rest)


def restart_commands(method, service=None, compose_project_dir=None, command=None, upgrade=False):
    """The commands that restart (or, ``upgrade``, recreate with a new environment) the service, in order."""
    if method == 'systemd':
        unit = _need(service, 'a service (the unit)', method)
        if upgrade:
            return [['systemctl', 'daemon-reload'], ['systemctl', 'restart', unit]]
        return [['systemctl', 'restart', unit]]
    if method == 'docker':
        if upgrade:
            # A plain container keeps its image: only the operator's own command can recreate it.
            return [list(_need(command, 'restart_command (your command that recreates the container)', method))]
        return [['docker', 'restart', _need(service, 'a service (the container)', method)]]
    if method == 'compose':
        name = _need(service, 'a service (the compose service)', method)
        if upgrade:
            return [_compose(compose_project_dir, 'up', '-d', '--force-recreate', '--no-deps', name)]
        return [_compose(compose_project_dir, 'restart', name)]
    if method == 'command':
        return [list(_need(command, 'restart_command', method))]
    raise ServiceError('unknown restart method %r (one of %s)' % (method, ', '.join(METHODS)))


def stop_start_commands(method, service=None, compose_project_dir=None):
    """(stop commands, start commands) of a method that has both (systemd, docker, compose), else None."""
    if method == 'systemd':
        unit = _need(service, 'a service (the unit)', method)
        return [['systemctl', 'stop', unit]], [['systemctl', 'start', unit]]
    if method == 'docker':
        name = _need(service, 'a service (the container)', method)
        return [['docker', 'stop', name]], [['docker', 'start', name]]
    if method == 'compose':
        name = _need(service, 'a service (the compose service)', method)
        return [_compose(compose_project_dir, 'stop', name)], [_compose(compose_project_dir, 'start', name)]
    return None


def logs_command(method, service=None, compose_project_dir=None, command=None, lines=200):
    """The command whose output is the service's recent log, or None."""
    lines = str(int(lines))
    if method == 'systemd' and service:
        return ['journalctl', '--unit', service, '--lines', lines, '--no-pager', '--output', 'short-iso']
    if method == 'docker' and service:
        return ['docker', 'logs', '--tail', lines, service]
    if method == 'compose' and service and compose_project_dir:
        return _compose(compose_project_dir, 'logs', '--no-color', '--tail', lines, service)
    if method == 'command' and command:
        return list(command)
    return None


def parse_systemd_show(rc, stdout, stderr=''):
    """``systemctl show UNIT --property=ActiveState,SubState,ExecMainStartTimestamp --timestamp=unix``."""
    props = {}
    for line in (stdout or '').splitlines():
        key, sep, value = line.partition('=')
        if sep:
            props[key.strip()] = value.strip()
    if rc != 0 or 'ActiveState' not in props:
        return {'running': None, 'started_at': None,
                'status': 'systemctl show failed: %s' % ((stderr or '').strip()[-200:] or 'exit %s' % rc)}
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
        return {'running': None, 'started_at': None,
                'status': 'docker inspect failed: %s' % ((stderr or '').strip()[-200:] or 'exit %s' % rc)}
    restarting = bool(state.get('Restarting'))
    return {
        'running': bool(state.get('Running')),
        'started_at': None if restarting else (state.get('StartedAt') or None),
        'status': str(state.get('Status') or '?')[:40],
        'main_pid': _pid(state.get('Pid')) if state.get('Running') else None,
    }


def status_commands(method, service=None, compose_project_dir=None, command=None):
    """The first command that asks the service manager (None: it cannot be asked)."""
    if method == 'systemd' and service:
        return ['systemctl', 'show', service, '--property=ActiveState', '--property=SubState',
                '--property=ExecMainStartTimestamp', '--property=MainPID', '--timestamp=unix']
    if method == 'docker' and service:
        return _docker_inspect(service)
    if method == 'compose' and service and compose_project_dir:
        return _compose(compose_project_dir, 'ps', '--all', '--quiet', service)
    if method == 'command' and command:
        return list(command)
    return None


def _docker_inspect(container):
    return ['docker', 'inspect', '--format', '{{json .State}}', container]


def service_status(run, method, service=None, compose_project_dir=None, command=None):
    """What the service manager says, as {'running', 'started_at', 'status'}.

    ``run(argv)`` runs a command and returns (rc, stdout, stderr); rc None means it could not
    run (missing, timed out).
    """
    first = status_commands(method, service, compose_project_dir, command)
    if first is None:
        why = 'no status_command' if method == 'command' else 'no service'
        return {'running': None, 'started_at': None, 'status': 'cannot be asked (%s)' % why}
    rc, out, err = run(first)
    if rc is None:
        return {'running': None, 'started_at': None, 'status': 'the service manager did not answer: %s' % err}
    if method == 'systemd':
        return parse_systemd_show(rc, out, err)
    if method == 'docker':
        return parse_docker_state(rc, out, err)
    if method == 'compose':
        if rc != 0:
            return {'running': None, 'started_at': None, 'status': 'docker compose ps failed: %s' % err.strip()[-200:]}
        ids = out.split()
        if not ids:
            return {'running': False, 'started_at': None, 'status': 'no container'}
        rc, out, err = run(_docker_inspect(ids[0]))
        if rc is None:
            return {'running': None, 'started_at': None, 'status': 'the service manager did not answer: %s' % err}
        return parse_docker_state(rc, out, err)
    return {'running': rc == 0, 'started_at': None, 'status': 'status command exited %s' % rc}


def run_argv(argv, timeout=60, env=None, keep=MAX_OUTPUT):
    """Run one command: (rc, stdout, stderr), the outputs cut to their last ``keep`` characters.
    rc is None when it could not run (not found, or still running after ``timeout`` seconds). A command still
    running then is killed with every process it started (it runs in a process group of its own), so a restart
    script that hangs in a child leaves nothing behind and never holds the run past ``timeout``."""
    # Not AnsibleModule.run_command: it has no timeout, and a hung systemctl or docker must not hold the gate's lock.
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,  # pylint: disable=ansible-bad-function
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    except (OSError, ValueError) as exc:
        return None, '', '%s: %s' % (type(exc).__name__, exc)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, '', 'still running after %s s (stopped)' % timeout
    out = stdout[-keep:].decode('utf-8', 'replace')
    err = stderr[-keep:].decode('utf-8', 'replace')
    return proc.returncode, out, err


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
