# -*- coding: utf-8 -*-
"""Stand-ins for ``systemctl``, ``journalctl``, ``docker`` and a site's own restart command
(``vllm-restart``) that act on simulated vLLM servers.

The executables next to this file run ``main(<tool>, argv)``. Put this directory first on
``PATH`` and the commands of the watchdog role and of the rollout reach these stand-ins instead
of the real service managers. Every call:

* appends one JSON line to ``$MODELOPS_STANDIN_LOG`` (or the config's ``"log"``)::

    {"argv": [tool, arg1, ...], "time": epoch, "pid": n,
     "host": <the config's "host">,                  # when the config names one (one config per inventory host)
     "env": {"VLLM_IMAGE": ...},                     # the variables named in the config's "log_env", as seen
     "watch": {path: content or null},               # the files named in the config's "watch", at that moment
     "servers": {id: {"status", "running", "waiting", "start_time", "load"}}}   # restarts only: just before it

  so a test can prove, from the log alone, what existed at the moment of each call (a pause
  file, a drop-in, an env file) and what a server had in flight when it was restarted;
* answers from the JSON file named by ``$MODELOPS_STANDIN_CONFIG``::

    {
      "control_url": "http://127.0.0.1:21000",     # the simulator's control API
      "log": "/tmp/x/standins.log",                # optional; $MODELOPS_STANDIN_LOG wins
      "host": "gb10-01",                           # optional; copied into every log line
      "watch": ["/path/paused"], "log_env": ["VLLM_IMAGE"],   # optional; see the log line above
      "daemon_reload_rc": 0,                       # exit status of `systemctl daemon-reload` (non-zero: it fails)
      "meminfo": {"path": "/tmp/x/meminfo",        # optional: a meminfo file this host's memory is simulated in:
                  "total_kb": 128000000,           #   MemAvailable is running_kb after a start, stopped_kb after a
                  "running_kb": 20000000,          #   stop (low: the memory did not come back), boot_kb after a
                  "stopped_kb": 110000000,         #   host reboot (then running_kb once its services started)
                  "boot_kb": 120000000},
      "boot_id_file": "/tmp/x/boot_id",            # optional: host-reboot writes a new boot id there
      "reboot_comes_back": true,                   # false: host-reboot changes nothing (a host that does not come back)
      "reboot_rc": 0,                              # exit status of host-reboot
      "pull_rc": 0,                                # exit status of `docker pull`
      "services": {
        "vllm": {                                  # unit, container or compose service name
          "server": "s1",                          # the simulator server id it runs
          "state": "running",                      # running | failed | exited | activating | auto-restart | auto
          "started_at": 1796004614.2,              # epoch seconds of the last start (null: never)
          "load_seconds": 1.0,                     # a restart closes the port this long (weights load)
          "container_id": "4f1c...",               # docker/compose: the container id (default: derived)
          "project_dir": "/srv/vllm",              # compose: the project directory it belongs to
          "restart_rc": 0,                         # exit status of a restart (non-zero: it fails, nothing restarts)
          "stop_rc": 0,                            # exit status of a stop (non-zero: it fails, nothing stops)
          "main_pid": 1234,                        # MainPID / .State.Pid (default: the pid of the simulator it runs
                                                   #   on while the service runs; null: none)
          "control_url": "http://127.0.0.1:21001", # optional: the simulator this service's server runs on (default:
                                                   #   the config's); two simulators are two processes, each holding
                                                   #   only its own servers' sockets (two servers of one host)
          "ports": {"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8001"}]},   # docker inspect
                                                   #   --format '{{json .NetworkSettings.Ports}}' (default null)
          "logs": ["INFO ... line", ...]           # extra lines for journalctl / docker logs
        }
      }
    }

``systemctl stop`` / ``docker stop`` / ``docker compose ... stop`` stop the simulated server (its port
closes) and ``... start`` starts it again (a new process after ``load_seconds``); a stop sets the
simulated meminfo's ``MemAvailable`` to ``stopped_kb``, a start to ``running_kb``. ``host-reboot`` is a
host reboot for ``ansible.builtin.reboot``'s ``reboot_command`` (or a power cycle run from the
controller): a new boot id in ``boot_id_file``, every service restarted, the memory back.

The main process a service manager reports (``MainPID``, ``.State.Pid``) is, by default, the simulator
process itself while the service runs: it holds the simulated server's listening socket, so the
watchdog's proof that a URL is the service (the main process listens on the URL's port) and its stack
dumps (py-spy of that process) meet a real process.

``"state": "auto"`` asks the simulator instead: a server that listens or is loading is
running since its process start time, a stopped one has failed.

A restart (``systemctl restart``, ``docker restart``, ``docker compose ... restart``,
``docker compose ... up -d SERVICE`` (a recreate), ``vllm-restart SERVICE``) calls the
simulator's control API (``POST /servers/<id>/state {"state": "restart", "load_seconds": ...}``)
and records in the config file that the service runs again since now (``state`` running,
``started_at`` now, ``restarts`` + 1), so that status commands afterwards see the new start,
like a real service manager. ``systemctl daemon-reload`` counts its calls in the config
(``daemon_reloads``); ``docker pull IMAGE`` pulls nothing. Nothing here ever calls a real service
manager: without ``$MODELOPS_STANDIN_CONFIG`` every call fails.

Standard library only; Python 3.6+.
"""

from __future__ import print_function

import datetime
import fcntl
import hashlib
import json
import os
import pwd
import shlex
import socket
import subprocess
import sys
import time

from urllib.error import HTTPError, URLError
from urllib.request import ProxyHandler, Request, build_opener

CONFIG_ENV = 'MODELOPS_STANDIN_CONFIG'
LOG_ENV = 'MODELOPS_STANDIN_LOG'

SYSTEMD_STATES = {
    # state: (ActiveState, SubState)
    'running': ('active', 'running'),
    'failed': ('failed', 'failed'),
    'exited': ('inactive', 'dead'),
    'stopped': ('inactive', 'dead'),
    'inactive': ('inactive', 'dead'),
    'activating': ('activating', 'start'),
    'auto-restart': ('activating', 'auto-restart'),
}


class StandinError(Exception):
    """Print the message on stderr and exit with ``rc``."""

    def __init__(self, message, rc=1):
        super(StandinError, self).__init__(message)
        self.rc = rc


# --------------------------------------------------------------------------- config, log

def _config_path():
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise StandinError('standin: $%s is not set: refusing to act (this is a test stand-in, not the real '
                           'tool)' % CONFIG_ENV, 2)
    return path


class Config(object):
    """The config file, locked for the duration of a call (restarts rewrite it)."""

    def __init__(self, path):
        self.path = path
        self._lock = open(path + '.lock', 'a')
        fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX)
        try:
            with open(path) as handle:
                self.data = json.load(handle)
        except (IOError, OSError, ValueError) as exc:
            self.close()
            raise StandinError('standin: cannot read %s: %s' % (path, exc), 2)
        self.dirty = False

    @property
    def services(self):
        return self.data.setdefault('services', {})

    def service(self, name):
        return self.services.get(name)

    def save(self):
        tmp = '%s.%d.tmp' % (self.path, os.getpid())
        with open(tmp, 'w') as handle:
            json.dump(self.data, handle, indent=1, sort_keys=True)
        os.rename(tmp, self.path)

    def close(self):
        if self.dirty:
            self.save()
            self.dirty = False
        if self._lock is not None:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def append_log(entry, config_data=None):
    """Append one call to the log: $MODELOPS_STANDIN_LOG, else the config's "log" (read without the lock
    when the config could not be opened)."""
    path = os.environ.get(LOG_ENV)
    if not path and config_data is not None:
        path = config_data.get('log')
    if not path and config_data is None:
        try:
            with open(os.environ.get(CONFIG_ENV, '')) as handle:
                path = json.load(handle).get('log')
        except (IOError, OSError, ValueError, AttributeError):
            path = None
    if not path:
        return
    line = json.dumps(entry) + '\n'
    with open(path, 'a') as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(line)
        handle.flush()
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --------------------------------------------------------------------------- simulator

def _control(config, method, path, body=None, timeout=10, svc=None):
    url = (svc or {}).get('control_url') or config.data.get('control_url')
    if not url:
        raise StandinError('standin: no "control_url" in %s' % config.path, 2)
    data = None if body is None else json.dumps(body).encode('utf-8')
    req = Request(url.rstrip('/') + path, data=data, method=method, headers={'Content-Type': 'application/json'})
    try:
        with build_opener(ProxyHandler({})).open(req, timeout=timeout) as resp:
            raw = resp.read()
    except HTTPError as exc:
        raise StandinError('standin: simulator %s %s: HTTP %s %s' % (method, path, exc.code,
                                                                     exc.read().decode('utf-8', 'replace')))
    except (URLError, OSError) as exc:
        raise StandinError('standin: simulator %s %s: %s' % (method, path, exc))
    return json.loads(raw.decode('utf-8')) if raw else None


def _server_info(config, svc):
    if not svc.get('server'):
        return None
    try:
        return _control(config, 'GET', '/servers/%s' % svc['server'], svc=svc)
    except StandinError:
        return None


def service_state(config, name):
    """(state, started_at epoch or None, simulator info or None) of a configured service."""
    svc = config.service(name)
    info = _server_info(config, svc)
    state = svc.get('state', 'auto')
    started_at = svc.get('started_at')
    if isinstance(started_at, str):
        # The config is written by a play: ansible-core 2.16 renders a templated number inside a dict as a string.
        started_at = float(started_at)
    if state == 'auto':
        status = (info or {}).get('status')
        if status in ('listening', 'loading'):
            state, started_at = 'running', info.get('start_time')
        elif status in ('stopped', 'exited'):
            state = 'failed'
        else:
            state = 'exited'
    return state, started_at, info


def simulator_pid(config, svc=None):
    """The pid of the simulator the service runs on (it holds every socket of its simulated servers), or 0."""
    try:
        return int((_control(config, 'GET', '/health', svc=svc) or {}).get('pid') or 0)
    except (StandinError, ValueError, TypeError):
        return 0


def main_pid(config, name, running):
    """What the service manager names as the service's main process: the config's ``main_pid``, else the simulator."""
    svc = config.service(name)
    if 'main_pid' in svc:
        try:
            return int(svc['main_pid'] or 0)
        except (TypeError, ValueError):
            return 0
    if not running or not svc.get('server'):
        return 0
    return simulator_pid(config, svc)


def set_memory(config, which):
    """Write the simulated meminfo with MemAvailable = the config's ``<which>_kb`` (running, stopped, boot)."""
    memory = config.data.get('meminfo')
    if not isinstance(memory, dict) or not memory.get('path'):
        return
    available = memory.get('%s_kb' % which)
    if available is None:
        return
    total = int(memory.get('total_kb') or 128000000)
    text = ('MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\nBuffers:           1024 kB\n'
            'Cached:          %d kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n'
            % (total, int(available) // 2, int(available), int(available) // 4))
    tmp = memory['path'] + '.tmp'
    with open(tmp, 'w') as handle:
        handle.write(text)
    os.rename(tmp, memory['path'])


def stop(config, name):
    svc = config.service(name)
    rc = int(svc.get('stop_rc', 0) or 0)
    if rc:
        raise StandinError(svc.get('stop_error') or 'standin: stop of %s fails (stop_rc %d)' % (name, rc), rc)
    if svc.get('server'):
        _control(config, 'POST', '/servers/%s/state' % svc['server'], {'state': 'stop'}, svc=svc)
    svc['state'] = 'inactive'
    svc['stops'] = int(svc.get('stops', 0) or 0) + 1
    config.dirty = True
    set_memory(config, 'stopped')


def restart(config, name):
    svc = config.service(name)
    rc = int(svc.get('restart_rc', 0) or 0)
    if rc:
        raise StandinError(svc.get('restart_error') or 'standin: restart of %s fails (restart_rc %d)' % (name, rc), rc)
    if svc.get('server'):
        _control(config, 'POST', '/servers/%s/state' % svc['server'],
                 {'state': 'restart', 'load_seconds': float(svc.get('load_seconds', 0) or 0)}, svc=svc)
    svc['state'] = 'running'
    svc['started_at'] = round(time.time(), 3)
    svc['restarts'] = int(svc.get('restarts', 0) or 0) + 1
    config.dirty = True
    set_memory(config, 'running')


def host_reboot(config, argv):
    """A host reboot (``ansible.builtin.reboot``'s ``reboot_command``) or a power cycle from the controller: a new boot
    id, every service started again, the memory back. Never touches this machine."""
    config.data['reboots'] = int(config.data.get('reboots', 0) or 0) + 1
    config.dirty = True
    rc = int(config.data.get('reboot_rc', 0) or 0)
    if rc:
        raise StandinError('standin host-reboot: the reboot fails (reboot_rc %d)' % rc, rc)
    if config.data.get('reboot_comes_back', True) is False:
        return 0  # a host that never comes back: nothing changes, its boot id stays
    set_memory(config, 'boot')
    for name in sorted(config.services):
        svc = config.service(name)
        if svc.get('server'):
            _control(config, 'POST', '/servers/%s/state' % svc['server'],
                     {'state': 'restart', 'load_seconds': float(svc.get('load_seconds', 0) or 0)}, svc=svc)
        svc['state'] = 'running'
        svc['started_at'] = round(time.time(), 3)
    set_memory(config, 'running')
    if config.data.get('boot_id_file'):
        tmp = config.data['boot_id_file'] + '.tmp'
        with open(tmp, 'w') as handle:
            handle.write('standin-boot-%d-%s\n' % (config.data['reboots'], hashlib.sha256(
                str(time.time()).encode('utf-8')).hexdigest()[:16]))
        os.rename(tmp, config.data['boot_id_file'])
    return 0


def log_lines(config, name, count):
    """The service's recent log: its configured lines, then one line on the simulated server."""
    svc = config.service(name)
    state, started_at, info = service_state(config, name)
    lines = list(svc.get('logs') or [])
    if info is not None:
        lines.append('standin: simulator server %s status=%s restarts=%s hung_engines=%s dead=%s'
                     % (info.get('id'), info.get('status'), info.get('restarts'),
                        (info.get('state') or {}).get('hung_engines'), (info.get('state') or {}).get('dead')))
    lines.append('standin: service %s is %s (started_at %s, restarts by the stand-in: %s)'
                 % (name, state, started_at, svc.get('restarts', 0)))
    return lines[-count:] if count > 0 else []


# --------------------------------------------------------------------------- formatting

def _iso_local(epoch):
    return datetime.datetime.fromtimestamp(epoch).astimezone().strftime('%Y-%m-%dT%H:%M:%S%z')


def _rfc3339_nano(epoch):
    if epoch is None:
        return '0001-01-01T00:00:00Z'
    whole = int(epoch)
    nanos = int(round((epoch - whole) * 1e9))
    if nanos >= 1000000000:
        whole, nanos = whole + 1, 0
    return datetime.datetime.utcfromtimestamp(whole).strftime('%Y-%m-%dT%H:%M:%S') + '.%09dZ' % nanos


def container_id(name, svc):
    return svc.get('container_id') or hashlib.sha256(('standin-' + name).encode('utf-8')).hexdigest()


def docker_state(config, name):
    svc = config.service(name)
    state, started_at, info = service_state(config, name)
    running = state in ('running', 'activating', 'auto-restart')
    pid = main_pid(config, name, running)
    exit_code = 0 if running or state in ('exited', 'stopped', 'inactive') else 1
    return {
        'Status': {'auto-restart': 'restarting'}.get(state, 'running' if running else 'exited'),
        'Running': running,
        'Paused': False,
        'Restarting': state == 'auto-restart',
        'OOMKilled': False,
        'Dead': False,
        'Pid': pid,
        'ExitCode': exit_code,
        'Error': '',
        'StartedAt': _rfc3339_nano(started_at),
        'FinishedAt': '0001-01-01T00:00:00Z' if running else _rfc3339_nano(time.time()),
    }


def _parse_options(argv, with_value):
    """Split argv into ({option: value}, [positional]); ``--opt=value`` and ``--opt value`` both work."""
    options, positional = {}, []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith('-') and arg != '-':
            key, sep, value = arg.partition('=')
            if sep:
                options.setdefault(key, []).append(value)
            elif key in with_value and i + 1 < len(argv):
                options.setdefault(key, []).append(argv[i + 1])
                i += 1
            else:
                options.setdefault(key, []).append(True)
        else:
            positional.append(arg)
        i += 1
    return options, positional


# --------------------------------------------------------------------------- tools

def _unit(name):
    return name[:-len('.service')] if name.endswith('.service') else name


# --------------------------------------------------------------------------- unit files (a timer and its service)

UNIT_SUFFIXES = ('.service', '.timer', '.socket', '.target', '.path', '.mount', '.slice', '.scope')


def _full(name):
    """A unit's name as systemd spells it: ``vllm`` is ``vllm.service``."""
    return name if name.endswith(UNIT_SUFFIXES) else name + '.service'


def unit_file(config, name):
    """The unit file of ``name`` in the config's ``unit_dirs`` (the first one is /etc/systemd/system's place), or
    None: a unit systemd would not know."""
    for directory in config.data.get('unit_dirs') or []:
        path = os.path.join(directory, _full(name))
        if os.path.isfile(path):
            return path
    return None


def _install_targets(path):
    """The targets of the unit file's [Install] section (WantedBy=, RequiredBy=)."""
    targets, section = [], None
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if line.startswith('['):
                section = line
            elif section == '[Install]' and line.split('=', 1)[0].strip() in ('WantedBy', 'RequiredBy'):
                kind = 'wants' if line.startswith('WantedBy') else 'requires'
                targets += [(target, kind) for target in line.split('=', 1)[1].split()]
    return targets


def _links(config, name, path):
    """The symbolic links ``systemctl enable`` makes for the unit: [(link, its target)]."""
    home = (config.data.get('unit_dirs') or [os.path.dirname(path)])[0]
    return [(os.path.join(home, '%s.%s' % (target, kind), _full(name)), path)
            for target, kind in _install_targets(path)]


def unit_file_state(config, name, path):
    links = _links(config, name, path)
    if not links:
        return 'static'
    return 'enabled' if any(os.path.islink(link) for link, dummy in links) else 'disabled'


def _record(config, name):
    """What the stand-in keeps about a unit of a file: whether it is active, its runs (a service), its last result."""
    config.dirty = True
    return config.data.setdefault('units', {}).setdefault(_full(name), {})


def _timestamp(epoch, unix, unset=''):
    if epoch is None:
        return unset
    if unix:
        return '@%d' % int(epoch)
    return datetime.datetime.fromtimestamp(epoch).astimezone().strftime('%a %Y-%m-%d %H:%M:%S %Z')


def file_unit_values(config, name, path, unix):
    """``systemctl show`` of a unit of a file: a timer (active: waiting for its next elapse, every 5 minutes here),
    or a oneshot service (each start is one run, which ends at once with the recorded result)."""
    full = _full(name)
    record = dict((config.data.get('units') or {}).get(full) or {})
    active = bool(record.get('active'))
    values = {'Id': full, 'Names': full, 'LoadState': 'loaded', 'FragmentPath': path, 'NeedDaemonReload': 'no',
              'UnitFileState': unit_file_state(config, name, path), 'MainPID': 0,
              'ActiveState': 'active' if active else 'inactive'}
    if full.endswith('.timer'):
        now = time.time()
        values.update(SubState='waiting' if active else 'dead',
                      LastTriggerUSec=_timestamp(record.get('last_trigger'), unix, 'n/a'),
                      NextElapseUSecRealtime=_timestamp((int(now) // 300 + 1) * 300 if active else None, unix, 'n/a'),
                      Result='success')
    else:
        values.update(SubState='running' if active else 'dead', Result=record.get('result', 'success'),
                      ExecMainStatus=record.get('exec_main_status', 0),
                      ExecMainStartTimestamp=_timestamp(record.get('started'), unix),
                      ExecMainExitTimestamp=_timestamp(record.get('exited'), unix))
    return values


def _section(path, name):
    """{key: [values]} of one section of a unit file."""
    out, section = {}, None
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if line.startswith('['):
                section = line[1:-1]
            elif section == name and '=' in line and not line.startswith(('#', ';')):
                key, value = line.split('=', 1)
                out.setdefault(key.strip(), []).append(value.strip())
    return out


def journal_path(config, name):
    return os.path.join(os.path.dirname(config.path), 'journal', _full(name) + '.log')


def run_oneshot(config, name, path):
    """systemd's start of a oneshot service, when the config says ``run_units``: its ExecStart, as its User (through
    setpriv, when the stand-in runs as root), in its WorkingDirectory, with its Environment and the caller's PATH (the
    stand-ins stay first: what the run asks of systemd comes back here). Its output goes to the unit's journal
    (``journal/<unit>.log`` beside the config, what ``journalctl -u`` prints), its result into the config. The config
    is not held while it runs: the run calls the stand-ins too."""
    service = _section(path, 'Service')
    argv = shlex.split(service['ExecStart'][-1].lstrip('-@+!'))
    env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C.UTF-8', CONFIG_ENV: config.path}
    if os.environ.get(LOG_ENV):
        env[LOG_ENV] = os.environ[LOG_ENV]
    for line in service.get('Environment', []):
        env.update(item.split('=', 1) for item in shlex.split(line) if '=' in item)
    user = (service.get('User') or [''])[-1]
    if user and user != 'root' and os.geteuid() == 0:
        entry = pwd.getpwnam(user)
        argv = ['setpriv', '--reuid=%d' % entry.pw_uid, '--regid=%d' % entry.pw_gid, '--init-groups'] + argv
    env['USER'] = user or pwd.getpwuid(os.geteuid()).pw_name
    journal = journal_path(config, name)
    os.makedirs(os.path.dirname(journal), exist_ok=True)
    config.close()
    started = round(time.time(), 3)
    with open(journal, 'a') as out:
        out.flush()
        rc = subprocess.call(argv, cwd=(service.get('WorkingDirectory') or ['/'])[-1], env=env, stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             timeout=float(config.data.get('run_timeout', 1800)))
    again = Config(config.path)
    try:
        _record(again, name).update(runs=int(_record(again, name).get('runs', 0) or 0) + 1, started=started,
                                    exited=round(time.time(), 3), active=False, exec_main_status=rc,
                                    result='success' if rc == 0 else 'exit-code')
    finally:
        again.close()
    config.data = again.data
    if rc != 0:
        raise StandinError('Job for %s failed because the control process exited with error code.\nSee "systemctl '
                           'status %s" and "journalctl -xeu %s" for details.' % ((_full(name),) * 3), 1)


def start_file_unit(config, name):
    now = round(time.time(), 3)
    path = unit_file(config, name)
    if _full(name).endswith('.service'):
        if config.data.get('run_units') and path and (_section(path, 'Service').get('Type') or ['simple'])[-1] == 'oneshot':
            run_oneshot(config, name, path)
            return
        # A oneshot service whose command the stand-in does not run: the run starts and ends, its result is kept.
        record = _record(config, name)
        record.update(runs=int(record.get('runs', 0) or 0) + 1, started=now, exited=now, active=False)
    else:
        _record(config, name).update(active=True, since=now)


def stop_file_unit(config, name):
    _record(config, name)['active'] = False


def _enable(config, units, command, now):
    """``systemctl enable|disable [--now] UNIT...``: the links of its [Install] section, as systemd makes them."""
    paths = []
    for name in units:
        path = unit_file(config, name)
        if path is None:
            raise StandinError('Failed to %s unit: Unit file %s does not exist.' % (command, _full(name)), 1)
        paths.append((name, path))
    for name, path in paths:
        links = _links(config, name, path)
        if not links:
            sys.stderr.write('The unit files have no installation config (WantedBy=, RequiredBy=, Also=,\n'
                             'Alias= settings in the [Install] section, and DefaultInstance= for template\n'
                             'units). This means they are not meant to be enabled or disabled using systemctl.\n')
        for link, target in links:
            if command == 'enable' and not os.path.islink(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(target, link)
                sys.stderr.write('Created symlink %s \u2192 %s.\n' % (link, target))
            elif command == 'disable' and os.path.islink(link):
                os.unlink(link)
                sys.stderr.write('Removed "%s".\n' % link)
        if now:
            (start_file_unit if command == 'enable' else stop_file_unit)(config, name)
    return 0


def systemctl(config, argv):
    options, args = _parse_options(argv, ('-p', '--property', '--timestamp', '-H', '--host', '-M'))
    if not args:
        raise StandinError('standin systemctl: no command given')
    command, names = args[0], args[1:]
    units = [_unit(u) for u in names]
    if command == 'show':
        props = []
        for value in options.get('--property', []) + options.get('-p', []):
            props.extend(p for p in str(value).split(',') if p)
        props = props or ['Id', 'LoadState', 'ActiveState', 'SubState', 'ExecMainStartTimestamp']
        unix = 'unix' in options.get('--timestamp', [])
        for index, (raw, unit) in enumerate(zip(names, units)):
            if index:
                print('')
            svc = config.service(unit)
            path = unit_file(config, raw) if svc is None else None
            if path is not None:
                values = file_unit_values(config, raw, path, unix)
            elif svc is None:
                values = {'Id': _full(raw), 'LoadState': 'not-found', 'ActiveState': 'inactive',
                          'SubState': 'dead', 'ExecMainStartTimestamp': '', 'MainPID': 0, 'UnitFileState': '',
                          'Result': 'success'}
            else:
                state, started_at, dummy = service_state(config, unit)
                active, sub = SYSTEMD_STATES.get(state, ('inactive', 'dead'))
                values = {'Id': unit + '.service', 'LoadState': 'loaded', 'ActiveState': active, 'SubState': sub,
                          'ExecMainStartTimestamp': _timestamp(started_at, unix),
                          'MainPID': main_pid(config, unit, active in ('active', 'activating', 'reloading'))}
            for prop in props:
                print('%s=%s' % (prop, values.get(prop, '')))
        return 0
    if command in ('restart', 'try-restart', 'reload-or-restart', 'stop', 'start'):
        missing = [raw for raw, u in zip(names, units) if config.service(u) is None and unit_file(config, raw) is None]
        if missing:
            verb = command if command in ('stop', 'start') else 'restart'
            raise StandinError('Failed to %s %s: Unit %s not found.' % (verb, _full(missing[0]), _full(missing[0])), 5)
        for raw, unit in zip(names, units):
            if config.service(unit) is None:
                (stop_file_unit if command == 'stop' else start_file_unit)(config, raw)
            elif command == 'stop':
                stop(config, unit)
            else:
                restart(config, unit)
        return 0
    if command in ('enable', 'disable'):
        return _enable(config, names, command, '--now' in options)
    if command == 'is-enabled':
        rc = 0
        for raw, unit in zip(names, units):
            path = unit_file(config, raw) if config.service(unit) is None else None
            if config.service(unit) is not None:
                print('enabled')
            elif path is None:
                raise StandinError('Failed to get unit file state for %s: No such file or directory' % _full(raw), 1)
            else:
                state = unit_file_state(config, raw, path)
                print(state)
                rc = rc or (0 if state in ('enabled', 'static') else 1)
        return rc
    if command == 'daemon-reload':
        config.data['daemon_reloads'] = int(config.data.get('daemon_reloads', 0) or 0) + 1
        config.dirty = True
        rc = int(config.data.get('daemon_reload_rc', 0) or 0)
        if rc:
            raise StandinError(config.data.get('daemon_reload_error') or 'Failed to reload daemon: Access denied', rc)
        return 0
    if command == 'is-active':
        rc = 0
        for raw, unit in zip(names, units):
            if config.service(unit) is None:
                path = unit_file(config, raw)
                active = file_unit_values(config, raw, path, True)['ActiveState'] if path else 'inactive'
            else:
                active = SYSTEMD_STATES.get(service_state(config, unit)[0], ('inactive', 'dead'))[0]
            print(active)
            rc = rc or (0 if active == 'active' else 3)
        return rc
    if command == 'list-timers':
        rows = []
        for directory in config.data.get('unit_dirs') or []:
            for filename in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
                if filename.endswith('.timer') and (not names or filename in [_full(n) for n in names]):
                    values = file_unit_values(config, filename, os.path.join(directory, filename), False)
                    if values['ActiveState'] == 'active' and filename not in [r[-2] for r in rows]:
                        rows.append((values['NextElapseUSecRealtime'], values['LastTriggerUSec'], filename,
                                     filename[:-len('.timer')] + '.service'))
        print('NEXT LEFT LAST PASSED UNIT ACTIVATES')
        for row in rows:
            print('%s - %s - %s %s' % row)
        print('')
        print('%d timers listed.' % len(rows))
        return 0
    raise StandinError('standin systemctl: unsupported command %r' % command)


def journalctl(config, argv):
    options, args = _parse_options(argv, ('-u', '--unit', '-n', '--lines', '-o', '--output', '--since'))
    units = [_unit(u) for u in options.get('--unit', []) + options.get('-u', [])]
    lines_opt = (options.get('--lines') or options.get('-n') or ['10'])[-1]
    count = 10 if lines_opt is True else int(lines_opt)
    host = socket.gethostname().split('.')[0]
    if not units:
        raise StandinError('standin journalctl: only --unit is supported')
    out = []
    for unit in units:
        if config.service(unit) is None:
            # A unit of a file: what its runs printed (run_units), as journald keeps it.
            journal = journal_path(config, unit)
            if os.path.isfile(journal):
                with open(journal) as handle:
                    out += ['%s %s %s[%d]: %s' % (_iso_local(os.path.getmtime(journal)), host, _unit(unit), 4000,
                                                  line.rstrip('\n')) for line in handle]
            continue
        for line in log_lines(config, unit, count):
            out.append('%s %s %s[%d]: %s' % (_iso_local(time.time()), host, unit, 4000, line))
    if not out:
        print('-- No entries --')
    for line in out[-count:]:
        print(line)
    return 0


def _docker_lookup(config, ref):
    for name, svc in config.services.items():
        if ref == name or ref == container_id(name, svc) or (len(ref) >= 12 and container_id(name, svc).startswith(ref)):
            return name
    return None


def docker(config, argv):
    if not argv:
        raise StandinError('standin docker: no command given')
    command, rest = argv[0], argv[1:]
    if command == 'compose':
        return compose(config, rest)
    if command == 'restart':
        options, refs = _parse_options(rest, ('-t', '--time', '-s', '--signal'))
        names = []
        for ref in refs:
            name = _docker_lookup(config, ref)
            if name is None:
                raise StandinError('Error response from daemon: No such container: %s' % ref)
            names.append((ref, name))
        for ref, name in names:
            restart(config, name)
            print(ref)
        return 0
    if command in ('stop', 'start'):
        options, refs = _parse_options(rest, ('-t', '--time', '-s', '--signal'))
        names = []
        for ref in refs:
            name = _docker_lookup(config, ref)
            if name is None:
                raise StandinError('Error response from daemon: No such container: %s' % ref)
            names.append((ref, name))
        for ref, name in names:
            (stop if command == 'stop' else restart)(config, name)
            print(ref)
        return 0
    if command == 'pull':
        options, refs = _parse_options(rest, ('--platform',))
        if len(refs) != 1:
            raise StandinError('"docker pull" requires exactly 1 argument.')
        rc = int(config.data.get('pull_rc', 0) or 0)
        if rc:
            raise StandinError('Error response from daemon: manifest for %s not found: manifest unknown' % refs[0], rc)
        print('%s: Pulling from standin' % refs[0])
        print('Status: Image is up to date for %s' % refs[0])
        return 0
    if command == 'inspect':
        options, refs = _parse_options(rest, ('-f', '--format', '--type'))
        fmt = (options.get('--format') or options.get('-f') or [None])[-1]
        found = []
        for ref in refs:
            name = _docker_lookup(config, ref)
            if name is None:
                print('[]' if fmt is None else '')
                raise StandinError('Error: No such object: %s' % ref)
            found.append((name, docker_state(config, name)))
        for name, state in found:
            if fmt is None:
                print(json.dumps([{'Id': container_id(name, config.service(name)), 'Name': '/' + name,
                                   'State': state}], indent=4))
            elif fmt.replace(' ', '') == '{{json.State}}':
                print(json.dumps(state))
            elif fmt.replace(' ', '') == '{{.State.Running}}':
                print('true' if state['Running'] else 'false')
            elif fmt.replace(' ', '') == '{{json.NetworkSettings.Ports}}':
                print(json.dumps(config.service(name).get('ports')))
            else:
                raise StandinError('standin docker inspect: unsupported --format %r' % fmt)
        return 0
    if command == 'logs':
        options, refs = _parse_options(rest, ('-n', '--tail', '--since', '--until'))
        tail = (options.get('--tail') or options.get('-n') or ['all'])[-1]
        if len(refs) != 1:
            raise StandinError('standin docker logs: exactly one container')
        name = _docker_lookup(config, refs[0])
        if name is None:
            raise StandinError('Error response from daemon: No such container: %s' % refs[0])
        for line in log_lines(config, name, 1000 if tail == 'all' else int(tail)):
            print(line)
        return 0
    raise StandinError('standin docker: unsupported command %r' % command)


def _compose_service(config, project_dir, service):
    svc = config.service(service)
    if svc is None:
        return None
    wanted = svc.get('project_dir')
    if wanted and project_dir and os.path.abspath(wanted) != os.path.abspath(project_dir):
        return None
    return service


def _compose_globals(argv):
    """``docker compose`` global options, before the command: (project directory or None, index of the command)."""
    project_dir = None
    i = 0
    while i < len(argv) and argv[i].startswith('-'):
        key, sep, value = argv[i].partition('=')
        if key in ('--project-directory', '-f', '--file', '-p', '--project-name', '--env-file', '--profile'):
            if not sep:
                i += 1
                value = argv[i] if i < len(argv) else ''
            if key == '--project-directory':
                project_dir = value
        i += 1
    return project_dir, i


def compose(config, argv):
    project_dir, i = _compose_globals(argv)
    if i >= len(argv):
        raise StandinError('standin docker compose: no command given')
    command, rest = argv[i], argv[i + 1:]
    if project_dir is not None and not os.path.isdir(project_dir):
        raise StandinError('stat %s: no such file or directory' % project_dir, 1)
    if command in ('restart', 'up'):
        if command == 'up':
            options, services = _parse_options(rest, ('-t', '--timeout', '--scale', '--pull', '--wait-timeout'))
            if not ('-d' in options or '--detach' in options):
                raise StandinError('standin docker compose up: only detached (-d) is supported')
            if not services:
                raise StandinError('standin docker compose up: name the service')
            doing = 'Recreate' if '--force-recreate' in options else 'Running'
        else:
            options, services = _parse_options(rest, ('-t', '--timeout'))
            doing = 'Restarting'
        for service in services:
            name = _compose_service(config, project_dir, service)
            if name is None:
                raise StandinError('no such service: %s' % service)
            sys.stderr.write(' Container %s-1  %s\n' % (service, doing))
            restart(config, name)
            sys.stderr.write(' Container %s-1  Started\n' % service)
        return 0
    if command in ('stop', 'start'):
        options, services = _parse_options(rest, ('-t', '--timeout'))
        for service in services:
            name = _compose_service(config, project_dir, service)
            if name is None:
                raise StandinError('no such service: %s' % service)
            sys.stderr.write(' Container %s-1  %s\n' % (service, 'Stopping' if command == 'stop' else 'Starting'))
            (stop if command == 'stop' else restart)(config, name)
            sys.stderr.write(' Container %s-1  %s\n' % (service, 'Stopped' if command == 'stop' else 'Started'))
        return 0
    if command == 'ps':
        options, services = _parse_options(rest, ('--format', '--filter', '--status'))
        quiet = '-q' in options or '--quiet' in options
        show_all = '-a' in options or '--all' in options
        names = services or [n for n in config.services if _compose_service(config, project_dir, n)]
        for service in names:
            name = _compose_service(config, project_dir, service)
            if name is None:
                raise StandinError('no such service: %s' % service)
            svc = config.service(name)
            if svc.get('container_id', '') is None:
                continue  # no container was ever created
            state = docker_state(config, name)
            if not show_all and not state['Running']:
                continue
            print(container_id(name, svc) if quiet else '%s-1  %s' % (service, state['Status']))
        return 0
    if command == 'logs':
        options, services = _parse_options(rest, ('-n', '--tail', '--since', '--until'))
        tail = (options.get('--tail') or options.get('-n') or ['all'])[-1]
        for service in services:
            name = _compose_service(config, project_dir, service)
            if name is None:
                raise StandinError('no such service: %s' % service)
            for line in log_lines(config, name, 1000 if tail == 'all' else int(tail)):
                print('%s-1  | %s' % (service, line))
        return 0
    raise StandinError('standin docker compose: unsupported command %r' % command)


def vllm_restart(config, argv):
    """A site's own restart command (method ``command``): ``vllm-restart SERVICE``."""
    if len(argv) != 1 or config.service(argv[0]) is None:
        raise StandinError('usage: vllm-restart SERVICE (a service of the stand-in config)')
    restart(config, argv[0])
    return 0


TOOLS = {'systemctl': systemctl, 'journalctl': journalctl, 'docker': docker, 'vllm-restart': vllm_restart,
         'host-reboot': host_reboot}


def restarts(tool, argv):
    """Whether this call restarts (or recreates, or stops, or starts) a service, or reboots the host."""
    if tool in ('vllm-restart', 'host-reboot'):
        return True
    if tool == 'systemctl':
        return any(a in ('restart', 'try-restart', 'reload-or-restart', 'stop', 'start') for a in argv)
    if tool == 'docker' and argv[:1] in (['restart'], ['stop'], ['start']):
        return True
    if tool == 'docker' and argv[:1] == ['compose']:
        dummy, i = _compose_globals(argv[1:])
        return argv[1 + i:2 + i] in (['restart'], ['up'], ['stop'], ['start'])
    return False


def snapshot(config):
    """What every simulated server of this config has in flight, right now."""
    out = {}
    for svc in config.services.values():
        sid = svc.get('server')
        if not sid:
            continue
        try:
            stats = _control(config, 'GET', '/servers/%s/stats' % sid, svc=svc)
        except StandinError as exc:
            out[sid] = {'error': str(exc)}
            continue
        out[sid] = {'status': stats['status'], 'running': stats['totals']['running'],
                    'waiting': stats['totals']['waiting'], 'start_time': stats['start_time'], 'load': stats['load']}
    return out


def describe(entry, config, tool, argv):
    """Add to a log entry what the config asks to record (host, environment, watched files, servers)."""
    data = config.data
    if 'host' in data:
        entry['host'] = data['host']
    if data.get('log_env'):
        entry['env'] = dict((name, os.environ.get(name)) for name in data['log_env'])
    if data.get('watch'):
        entry['watch'] = dict((path, _read(path)) for path in data['watch'])
    if restarts(tool, argv):
        entry['servers'] = snapshot(config)
    return entry


def main(tool, argv):
    entry = {'argv': [tool] + list(argv), 'time': round(time.time(), 3), 'pid': os.getpid()}
    config = None
    try:
        try:
            config = Config(_config_path())
        except StandinError:
            append_log(entry)
            raise
        append_log(describe(entry, config, tool, argv), config.data)
        return TOOLS[tool](config, argv)
    except StandinError as exc:
        sys.stdout.flush()
        sys.stderr.write(str(exc) + '\n')
        return exc.rc
    finally:
        if config is not None:
            config.close()


if __name__ == '__main__':
    if len(sys.argv) < 2 or sys.argv[1] not in TOOLS:
        sys.stderr.write('usage: _standin.py {%s} ARGS...\n' % '|'.join(sorted(TOOLS)))
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
