# -*- coding: utf-8 -*-
"""Stand-ins for the commands of a rollout (``playbooks/rollout.yml``), on simulated vLLM servers.

They reuse ``tests/standins/_standin.py`` (its config file, its simulated restarts, its
``systemctl show``/``docker inspect``/... answers) and add what a rollout runs and those do not
know, each as the real tool does it:

* ``systemctl daemon-reload``                                   exit 0 (counted in the config)
* ``docker pull IMAGE``                                         exit 0 (or the config's ``pull_rc``)
* ``docker compose [--project-directory D] up [-d] [--force-recreate] [--no-deps] SERVICE...``
                                                                recreates: a restart of the simulated server
* ``vllm-restart SERVICE``                                      a site's own restart command (method ``command``)

Every call appends one JSON line to ``$MODELOPS_STANDIN_LOG`` (or the config's ``"log"``)::

    {"argv": [...], "time": epoch, "pid": n,
     "host": <the config's "host">,                  # one config per inventory host
     "env": {"VLLM_IMAGE": ...},                     # the variables named in the config's "log_env"
     "watch": {path: content or null},               # the files named in the config's "watch", now
     "servers": {id: {"status", "running", "waiting", "load": [...]}}}   # restarts only: just before it

so a test can prove, from the log alone, what existed at the moment of each restart (the
watchdog's pause file, a drop-in, an env file) and what the server had in flight then.

Standard library only.
"""

from __future__ import print_function

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'standins'))
sys.dont_write_bytecode = True  # no cache files in tests/standins/, which is not ours

import _standin  # noqa: E402  pylint: disable=wrong-import-position
from _standin import StandinError  # noqa: E402  pylint: disable=wrong-import-position


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _log(entry, config_data):
    path = os.environ.get(_standin.LOG_ENV) or (config_data or {}).get('log')
    if not path:
        return
    import fcntl
    with open(path, 'a') as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(json.dumps(entry) + '\n')
        handle.flush()
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _snapshot(config):
    """What every simulated server of this config has in flight, right now."""
    out = {}
    for svc in config.services.values():
        sid = svc.get('server')
        if not sid:
            continue
        try:
            stats = _standin._control(config, 'GET', '/servers/%s/stats' % sid)  # pylint: disable=protected-access
        except StandinError as exc:
            out[sid] = {'error': str(exc)}
            continue
        out[sid] = {'status': stats['status'], 'running': stats['totals']['running'],
                    'waiting': stats['totals']['waiting'], 'start_time': stats['start_time'],
                    'load': stats['load']}
    return out


def _is_restart(tool, argv):
    if tool == 'vllm-restart':
        return True
    if tool == 'systemctl':
        return any(a in ('restart', 'try-restart', 'reload-or-restart') for a in argv)
    if tool == 'docker':
        return bool(argv) and (argv[0] == 'restart' or (argv[0] == 'compose' and ('restart' in argv or 'up' in argv)))
    return False


def compose_up(config, argv):
    """``docker compose [globals] up [options] SERVICE...``: recreate (restart) each service."""
    project_dir, i = None, 0
    while i < len(argv) and argv[i].startswith('-'):
        key, sep, value = argv[i].partition('=')
        if key in ('--project-directory', '-f', '--file', '-p', '--project-name', '--env-file', '--profile'):
            if not sep:
                i += 1
                value = argv[i] if i < len(argv) else ''
            if key == '--project-directory':
                project_dir = value
        i += 1
    rest = argv[i + 1:]
    if project_dir is not None and not os.path.isdir(project_dir):
        raise StandinError('stat %s: no such file or directory' % project_dir, 1)
    options, services = _standin._parse_options(rest, ('-t', '--timeout', '--scale', '--pull'))  # pylint: disable=protected-access
    if not ('-d' in options or '--detach' in options):
        raise StandinError('standin docker compose up: only detached (-d) is supported')
    if not services:
        raise StandinError('standin docker compose up: name the service')
    for service in services:
        name = _standin._compose_service(config, project_dir, service)  # pylint: disable=protected-access
        if name is None:
            raise StandinError('no such service: %s' % service)
        sys.stderr.write(' Container %s-1  Recreate\n' % service)
        _standin.restart(config, name)
        sys.stderr.write(' Container %s-1  Started\n' % service)
    return 0


def run(tool, config, argv):
    if tool == 'systemctl' and argv[:1] == ['daemon-reload']:
        config.data['daemon_reloads'] = int(config.data.get('daemon_reloads', 0)) + 1
        config.dirty = True
        return 0
    if tool == 'docker' and argv[:1] == ['pull']:
        if len(argv) != 2:
            raise StandinError('"docker pull" requires exactly 1 argument')
        rc = int(config.data.get('pull_rc', 0) or 0)
        if rc:
            raise StandinError('Error response from daemon: manifest for %s not found' % argv[1], rc)
        print('%s: Pulling from standin' % argv[1])
        print('Status: Image is up to date for %s' % argv[1])
        return 0
    if tool == 'docker' and argv[:1] == ['compose']:
        globals_end = 1
        while globals_end < len(argv) and argv[globals_end].startswith('-'):
            globals_end += 1 if '=' in argv[globals_end] else 2
        if globals_end < len(argv) and argv[globals_end] == 'up':
            return compose_up(config, argv[1:])
    if tool == 'vllm-restart':
        if len(argv) != 1 or config.service(argv[0]) is None:
            raise StandinError('usage: vllm-restart SERVICE (a service of the stand-in config)')
        _standin.restart(config, argv[0])
        return 0
    return _standin.TOOLS[tool](config, argv)


def main(tool, argv):
    entry = {'argv': [tool] + list(argv), 'time': round(time.time(), 3), 'pid': os.getpid()}
    config = None
    try:
        try:
            config = _standin.Config(_standin._config_path())  # pylint: disable=protected-access
        except StandinError:
            _log(entry, None)
            raise
        data = config.data
        entry['host'] = data.get('host')
        entry['env'] = dict((name, os.environ.get(name)) for name in data.get('log_env', []))
        entry['watch'] = dict((path, _read(path)) for path in data.get('watch', []))
        if _is_restart(tool, argv):
            entry['servers'] = _snapshot(config)
        _log(entry, data)
        return run(tool, config, argv)
    except StandinError as exc:
        sys.stdout.flush()
        sys.stderr.write(str(exc) + '\n')
        return exc.rc
    finally:
        if config is not None:
            config.close()


if __name__ == '__main__':
    if len(sys.argv) < 2 or sys.argv[1] not in ('systemctl', 'docker', 'vllm-restart'):
        sys.stderr.write('usage: _rollout_standin.py {systemctl|docker|vllm-restart} ARGS...\n')
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
