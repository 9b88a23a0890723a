#!/usr/bin/env python
"""`make try` / `make try-stop`: a sandbox to try every command of the docs against.

    python scripts/try.py start  [--dir .cache/try] [--lifetime SECONDS]
    python scripts/try.py stop   [--dir .cache/try]
    python scripts/try.py status [--dir .cache/try]

`start` leaves running, on fixed loopback ports (127.0.0.1:28000-28099, see PORTS below):

* the vLLM simulator (tests/simulator, one background process, started by tests/standins/simctl.py
  with a pid file) serving one simulated vLLM 0.32 server per inventory host, each in its own
  state: idle, busy, busy in a long chunked prefill, stuck (hung with work in flight, up for two
  hours, so past the watchdog's start-up grace) and down (nothing listens; its service is starting);
* a real nginx (least connections) in front of two of them, when nginx is installed
  (scripts/ensure-nginx.sh installs Debian's);

and writes, in the sandbox directory:

* inventory/hosts.yml, inventory/group_vars/: an example inventory as files;
* standins.json: what the systemctl / journalctl / docker stand-ins (tests/standins, first on PATH)
  act on: one systemd unit per host, `vllm-<host>`, that restarts its simulated server;
* state/: the watchdog's state directories (one per host, since every host is this machine);
* ansible.cfg: the settings the collection recommends (docs/fleet.md): the stdout callback
  modelops.vllm.oneline (one line per server and a total; -v for everything), pipelining, and an
  inventory that does not parse is an error;
* env.sh: the environment (collections path, interpreter, PATH with the stand-ins, ANSIBLE_CONFIG) and
  the shell function try_reset, which starts the sandbox afresh; `source` it.

`start` on a sandbox that runs already changes nothing and prints the same line. `stop` ends what
`start` started (by its pid files, nothing else) and removes the sandbox's own files (OWN below); what
you wrote there (a playbook, ansible-runner's runner/, rules/, textfile/) stays, and the directory
with it. `reset` is `stop` then `start`: every server back to its first state, no watchdog state, an
empty stand-ins log, and your files where they were.
Standard library only (the simulator's client, the stand-ins' simctl and the nginx harness).
"""

import argparse
import contextlib
import getpass
import io
import json
import os
import shutil
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run as a script: the repository root, for tests.support
    sys.path.insert(0, REPO)

from tests.standins import simctl  # noqa: E402  pylint: disable=wrong-import-position
from tests.harness.nginx import NginxProxy, NginxError, nginx_binary  # noqa: E402  pylint: disable=wrong-import-position,import-error
from tests.simulator.client import SimulatorClient, SimulatorError  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.ports import bindable, block  # noqa: E402  pylint: disable=wrong-import-position

DEFAULT_DIR = os.path.join(REPO, '.cache', 'try')
COLLECTIONS = os.path.join(REPO, '.cache', 'collections')  # `make collection-link`
STANDINS = os.path.join(REPO, 'tests', 'standins')
SIM_SCRIPT = os.path.join(REPO, 'tests', 'simulator', 'sim.py')

# The sandbox's loopback ports: 127.0.0.1:28000-28099, nothing else.
PORT_RANGE = block('try')
CONTROL_PORT = 28000
PROXY_PORT = 28010
# name, port, what it shows, simulator options, load (None: none), hang after the load is in flight
UP = 7200  # every simulated server has been up for 2 hours: past the watchdog's start-up grace (15 min)
HOSTS = [
    ('gb10-idle', 28001, 'idle: nothing in flight, a one-token probe answers',
     {'step_rate': 200, 'process_age': UP}, None, False),
    ('gb10-busy', 28002, 'busy: 3 requests decoding',
     {'step_rate': 8, 'process_age': UP}, {'concurrency': 3, 'max_tokens': 2000, 'repeat': True}, False),
    ('gb10-prefill', 28003, 'busy in a long chunked prefill: only the KV cache moves',
     # 30000 prompt tokens, 16 a step, 2 steps a second: about 15 minutes of prefill, then 4 tokens, again
     {'step_rate': 2, 'chunk_tokens': 16, 'process_age': UP},
     {'concurrency': 1, 'prompt_tokens': 30000, 'max_tokens': 4, 'repeat': True}, False),
    ('gb10-stuck', 28004, 'stuck: hung with 2 requests in flight, up for 2 hours',
     {'step_rate': 8, 'process_age': UP}, {'concurrency': 2, 'max_tokens': 10 ** 6}, True),
    ('gb10-down', 28005, 'down: nothing listens; its service says it is starting',
     None, None, False),
]
PROXY_HOST = 'llm-proxy'
PROXY_BACKENDS = ('gb10-idle', 'gb10-busy')
LOAD_SECONDS = 2  # a restart by the stand-ins closes the port this long (the weights load)


def say(text=''):
    print(text, flush=True)


# What the sandbox writes in its directory, and all that `stop` and `reset` remove: every other file there is
# the user's (the pages have them write playbooks, ansible-runner's runner/, rules/, textfile/). The stand-ins add
# standins.json.lock, their temporary standins.json.<pid>.tmp and journal/ (the runs of units they start).
OWN = ('sandbox.json', 'env.sh', 'ansible.cfg', 'inventory', 'state', 'systemd', 'local', 'standins.json',
       'standins.json.lock', 'standins.log', 'journal', 'simulator', 'nginx')


def own(name):
    """Whether a name in the sandbox's directory is the sandbox's own."""
    return name in OWN or (name.startswith('standins.json.') and name.endswith('.tmp'))


def paths(directory):
    return {
        'dir': directory,
        'marker': os.path.join(directory, 'sandbox.json'),
        'env': os.path.join(directory, 'env.sh'),
        'ansible_cfg': os.path.join(directory, 'ansible.cfg'),
        'inventory': os.path.join(directory, 'inventory'),
        'state': os.path.join(directory, 'state'),
        'systemd': os.path.join(directory, 'systemd'),
        'standins': os.path.join(directory, 'standins.json'),
        'standins_log': os.path.join(directory, 'standins.log'),
        'simulator': os.path.join(directory, 'simulator'),
        'nginx': os.path.join(directory, 'nginx'),
        'local': os.path.join(directory, 'local'),
    }


def url(port):
    return 'http://127.0.0.1:%d' % port


def _read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write(path, text, mode=0o644):
    with open(path, 'w') as handle:
        handle.write(text)
    os.chmod(path, mode)


def _simctl(*argv):
    """simctl's start/stop, with its JSON line captured instead of printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = simctl.main(list(argv))
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    return rc, (json.loads(lines[-1]) if lines else {})


def _cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            return handle.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except OSError:
        return ''


def _alive(pid, marker):
    return bool(pid) and marker in _cmdline(pid) and not _zombie(pid)


def _zombie(pid):
    try:
        with open('/proc/%d/stat' % pid) as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except (OSError, IndexError):
        return True


def _ancestors():
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            with open('/proc/%d/stat' % pid) as handle:
                pid = int(handle.read().rsplit(')', 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def leftovers(directory):
    """The sandbox's own processes still alive (what `stop` must leave none of): the simulator (and
    the `timeout` that runs it) and nginx, known by the sandbox directory in their command lines;
    not this process and the commands that started it (`make try-stop TRY_DIR=...`)."""
    found, mine = [], _ancestors()
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) in mine:
            continue
        cmdline = _cmdline(int(name))
        if directory in cmdline and (SIM_SCRIPT in cmdline or 'nginx' in cmdline) and not _zombie(int(name)):
            found.append((int(name), cmdline.strip()))
    return found


# ------------------------------------------------------------------------------------------ status

def running(p):
    """The sandbox's description when it is complete and its simulator answers; else None."""
    info = _read_json(p['marker'])
    if not isinstance(info, dict):
        return None
    try:
        client = SimulatorClient(info['control_url'], timeout=5)
        listed = {s['id'] for s in client.list()}
    except (OSError, SimulatorError, KeyError, ValueError):
        return None
    if not {h[0] for h in HOSTS if h[3] is not None} <= listed:
        return None
    if info.get('proxy') and not _alive(info['proxy'].get('pid'), p['nginx']):
        return None
    return info


# ------------------------------------------------------------------------------------------- start

def start(args):
    p = paths(os.path.abspath(args.dir))
    info = running(p)
    if info is not None:
        say('try: the sandbox in %s runs already (since %s); nothing changed'
            % (_show(p['dir']), time.strftime('%H:%M:%S', time.localtime(info['started']))))
        print_summary(p, info)
        return 0
    if looks_like_a_sandbox(p) and stop_sandbox(p, quiet=True) != 0:  # an earlier one, incomplete or dead
        return 1
    if os.path.isdir(p['dir']) and [n for n in os.listdir(p['dir']) if own(n)]:
        say('try: ERROR: %s holds %s but is not a sandbox (no sandbox.json, env.sh or simulator/): not touched'
            % (p['dir'], ', '.join(sorted(n for n in os.listdir(p['dir']) if own(n)))))
        return 1
    taken = [port for port in [CONTROL_PORT, PROXY_PORT] + [h[1] for h in HOSTS] if not bindable(port)]
    if taken:
        say('try: ERROR: 127.0.0.1 port(s) %s are in use; the sandbox needs 127.0.0.1:%d-%d '
            '(another sandbox? `make try-stop`, or `python scripts/try.py stop --dir DIR`)'
            % (', '.join(map(str, taken)), PORT_RANGE[0], PORT_RANGE[1]))
        return 1
    started = time.time()
    os.makedirs(p['dir'], mode=0o755, exist_ok=True)  # with the user's files of an earlier sandbox
    for key in ('state', 'systemd'):
        os.makedirs(p[key], mode=0o700)  # the watchdog refuses a state dir that group or others can write
        os.chmod(p[key], 0o700)
    try:
        info = build(p, args)
    except BaseException:  # stop what was started (also on SystemExit, Ctrl-C), then report
        stop_sandbox(p, quiet=True)
        raise
    info['started'] = started
    info['seconds'] = round(time.time() - started, 1)
    _write(p['marker'], json.dumps(info, indent=1, sort_keys=True) + '\n')
    say('try: sandbox up in %.1f s' % info['seconds'])
    print_summary(p, info)
    return 0


def build(p, args):
    rc, ready = _simctl('start', '--dir', p['simulator'], '--port-range', '%d-%d' % PORT_RANGE,
                        '--lifetime', str(args.lifetime), '--python', sys.executable)
    if rc != 0:
        raise SystemExit('try: the simulator did not start (see %s)' % os.path.join(p['simulator'], 'simulator.log'))
    if ready.get('control_port') != CONTROL_PORT:
        raise SystemExit('try: the simulator took control port %s, not %d' % (ready.get('control_port'), CONTROL_PORT))
    sim = SimulatorClient(ready['control_url'])
    hosts = {}
    for name, port, what, options, load, hang in HOSTS:
        hosts[name] = {'url': url(port), 'what': what, 'simulated': options is not None}
        if options is None:
            continue
        sim.create(id=name, port=port, **options)
    for name, port, what, options, load, hang in HOSTS:
        if load:
            sim.start_load(name, **load)
    for name, port, what, options, load, hang in HOSTS:
        if load:
            want = load['concurrency']
            sim.wait_for(name, lambda s, want=want: sum(e['reported_running'] for e in s['engines']) == want,
                         timeout=30)
        if hang:
            sim.set_state(name, 'hang')
    proxy = None
    try:
        nginx_binary()
        have_nginx = True
    except NginxError:
        have_nginx = False
    if have_nginx:
        os.makedirs(p['nginx'])
        server = NginxProxy([hosts[b]['url'] for b in PROXY_BACKENDS], port=PROXY_PORT, workdir=p['nginx']).start()
        proxy = {'url': server.url, 'pid': server.pid, 'backends': list(PROXY_BACKENDS)}
        server.proc = None  # it runs on after this process; `stop` ends it by its pid
        hosts[PROXY_HOST] = {'url': server.url, 'what': 'a proxy (nginx, least_conn) in front of %s'
                             % ' and '.join(PROXY_BACKENDS), 'simulated': False}
    write_standins(p, ready['control_url'])
    write_inventory(p, hosts, proxy)
    write_ansible_cfg(p)
    write_env(p, args.lifetime)
    return {'control_url': ready['control_url'], 'simulator_pid': ready.get('pid'),
            'launcher_pid': ready.get('launcher_pid'), 'hosts': hosts, 'proxy': proxy,
            'ports': '127.0.0.1:%d-%d' % PORT_RANGE, 'lifetime': args.lifetime}


def write_standins(p, control_url):
    services = {}
    for name, port, what, options, load, hang in HOSTS:
        if options is not None:
            services['vllm-' + name] = {'server': name, 'state': 'auto', 'load_seconds': LOAD_SECONDS}
    # down: nothing listens, and systemd says the unit has been starting since the sandbox began (loading its
    # weights): the watchdog leaves it alone inside its start-up grace, as it does a real server that is still
    # starting (one load, counted once towards vllm_watchdog_down_limit however many runs see it).
    services['vllm-gb10-down'] = {'state': 'activating', 'started_at': round(time.time(), 3),
                                  'logs': ['INFO Loading safetensors checkpoint shards: 40% Completed | 2/5']}
    # The local timer (docs/local.md) writes its units under local/ (the root it is installed under here): the
    # stand-in systemctl knows them there, and runs the timer's service when it is started, as systemd would.
    lib = os.path.join(p['local'], 'lib', 'systemd', 'system')
    os.makedirs(lib)
    _write(os.path.join(lib, 'polkit.service'), '[Unit]\nDescription=Authorization Manager (the sandbox\'s)\n'
           '[Service]\nType=dbus\nBusName=org.freedesktop.PolicyKit1\nExecStart=/usr/lib/polkit-1/polkitd\n')
    config = {'control_url': control_url, 'log': p['standins_log'], 'services': services, 'run_units': True,
              'unit_dirs': [os.path.join(p['local'], 'etc', 'systemd', 'system'), lib]}
    _write(p['standins'], json.dumps(config, indent=1, sort_keys=True) + '\n')
    _write(p['standins_log'], '')


def write_inventory(p, hosts, proxy):
    group_vars = os.path.join(p['inventory'], 'group_vars')
    os.makedirs(group_vars)
    lines = ['---',
             '# The sandbox of `make try` (scripts/try.py): simulated vLLM servers on this machine,',
             '# 127.0.0.1:%d-%d. Every host is this machine (group_vars/all.yml).' % PORT_RANGE,
             'all:', '  children:', '    vllm:', '      hosts:']
    for name, port, what, options, load, hang in HOSTS:
        lines += ['        %s:  # %s' % (name, what),
                  '          vllm_url: %s' % url(port)]
    lines += ['    vllm_proxies:', '      hosts:']
    if proxy:
        lines += ['        %s:  # nginx in front of %s' % (PROXY_HOST, ' and '.join(PROXY_BACKENDS)),
                  '          vllm_url: %s' % proxy['url'],
                  '          vllm_kind: proxy']
    else:
        lines[-1] = '      hosts: {}  # no nginx on this machine (scripts/ensure-nginx.sh installs it)'
    _write(os.path.join(p['inventory'], 'hosts.yml'), '\n'.join(lines) + '\n')
    _write(os.path.join(group_vars, 'all.yml'), '''---
# Every host of the sandbox is this machine.
ansible_connection: local
# The Python that runs Ansible, which has requests: for a local inventory, Ansible would otherwise
# discover /usr/bin/python3, which may not (on real hosts, install requests there instead).
ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"

# The watchdog's state (history, lock, verdicts, evidence): one directory per host here, since all
# the hosts share this machine; on real hosts keep the default, /var/lib/vllm-watchdog.
vllm_watchdog_state_dir: "{state}/{{{{ inventory_hostname }}}}"
# The stand-ins restart the simulated servers and the state is the sandbox's own: no root needed
# (ansible_become wins over a command's -b and a play's become).
vllm_watchdog_become: false
ansible_become: false

# Shorter waits than a real fleet needs (a simulated server restarts in {load} s).
vllm_check_interval: 2
# No movement for 4 s is proof of a hang here, so that the sandbox's hung server is restarted in the run that finds
# it; the default, 300 s, is what a real GB10 needs (one long engine step freezes every series: docs/health.md).
vllm_check_freeze_limit: 4
# The rollout's own (it falls back on vllm_watchdog_freeze_limit, not on the check's): its idle wait judges the hung
# server in seconds, not after watching a 300 s freeze.
vllm_rollout_freeze_limit: 4
vllm_watchdog_ready_delay: 1
vllm_watchdog_ready_timeout: 60
vllm_rollout_idle_delay: 2
vllm_rollout_ready_delay: 1
vllm_rollout_ready_timeout: 60
# An upgrade writes its systemd drop-in here, not in /etc/systemd/system.
vllm_rollout_systemd_dropin_dir: "{systemd}/vllm-{{{{ inventory_hostname }}}}.service.d"

# The local timer (docs/local.md) of this "box", spark-01: everything it writes under local/ (never /etc, /opt or
# /var), run as you (the sandbox makes no user), with this checkout's venv (it has ansible-core and requests).
vllm_local_root: "{local}"
vllm_local_user: {user}
vllm_local_venv: {venv}
vllm_local_host: spark-01
'''.format(state=p['state'], systemd=p['systemd'], load=LOAD_SECONDS, local=p['local'], user=getpass.getuser(),
           venv=sys.prefix))
    _write(os.path.join(group_vars, 'vllm.yml'), '''---
# How the watchdog and the rollout restart vLLM: systemd. Here systemctl and journalctl are the
# stand-ins of tests/standins (first on PATH, see env.sh), and each host has its own unit,
# vllm-<host>, because all the hosts are this one machine; on a real fleet it is just `vllm`.
vllm_watchdog_restart_method: systemd
vllm_watchdog_service: "vllm-{{ inventory_hostname }}"
''')


# The settings docs/fleet.md recommends, as the execution environment ships them: the same file.
ANSIBLE_CFG = os.path.join(REPO, 'execution-environment', 'ansible.cfg')


def write_ansible_cfg(p):
    with open(ANSIBLE_CFG) as handle:
        text = handle.read()
    _write(p['ansible_cfg'], '# The sandbox of `make try`: %s, as it is.\n%s' % (os.path.relpath(ANSIBLE_CFG, REPO), text))


def write_env(p, lifetime=0):
    venv_bin = os.path.dirname(sys.executable)
    text = '''# The environment of the modelops.vllm sandbox (`make try`); use it with: source {env_show}
export MODELOPS_TRY={dir}
# The collection: this checkout, linked as ansible_collections/modelops/vllm (`make collection-link`).
export ANSIBLE_COLLECTIONS_PATH={collections}
# The sandbox's Ansible settings (whatever the current directory): {ansible_cfg}
export ANSIBLE_CONFIG={ansible_cfg}
# A Python with requests for the module (hosts without ansible_python_interpreter).
export ANSIBLE_PYTHON_INTERPRETER={python}
# systemctl, journalctl, docker: stand-ins that act on the simulated servers (never the real ones),
# then the project's ansible, ansible-playbook and ansible-runner.
case ":$PATH:" in
    *":{standins}:"*) ;;
    *) export PATH="{standins}:{venv_bin}:$PATH" ;;
esac
export MODELOPS_STANDIN_CONFIG={standins_config}
export MODELOPS_STANDIN_LOG={standins_log}
# Start the sandbox afresh (every server back to its first state, no watchdog state, an empty
# stand-ins log), then come back here: try_reset
try_reset() {{
    {python} {try_py} reset --dir {dir} --lifetime {lifetime} >/dev/null && source {env} >/dev/null
}}
cd "$MODELOPS_TRY" && echo "modelops.vllm sandbox: now in $MODELOPS_TRY (inventory/, state/, standins.log)"
'''.format(env_show=_show(p['env']), dir=p['dir'], collections=COLLECTIONS, python=sys.executable,
           standins=STANDINS, venv_bin=venv_bin, standins_config=p['standins'], standins_log=p['standins_log'],
           ansible_cfg=p['ansible_cfg'], try_py=os.path.abspath(__file__), lifetime=int(lifetime), env=p['env'])
    _write(p['env'], text)


def _show(path):
    rel = os.path.relpath(path)
    return rel if not rel.startswith('..') else path


def print_summary(p, info):
    say('')
    say('  host           url                      %s' % 'what')
    for name, host in sorted(info['hosts'].items(), key=lambda item: item[1]['url']):
        simulated = ' (simulated)' if host['simulated'] else ''
        say('  %-14s %-24s %s%s' % (name, host['url'], host['what'], simulated))
    if not info.get('proxy'):
        say('  (no %s: nginx is not installed; scripts/ensure-nginx.sh installs it)' % PROXY_HOST)
    say('')
    say('  inventory: %s   stand-ins log: %s' % (_show(p['inventory']), _show(p['standins_log'])))
    say('  stop it with: make try-stop')
    say('')
    say('source %s' % _show(p['env']))


# -------------------------------------------------------------------------------------------- stop

def looks_like_a_sandbox(p):
    return os.path.exists(p['marker']) or os.path.exists(p['env']) or os.path.isdir(p['simulator'])


def stop_sandbox(p, quiet=False):
    directory = p['dir']
    if not os.path.isdir(directory):
        if not quiet:
            say('try: no sandbox in %s' % _show(directory))
        return 0
    if not looks_like_a_sandbox(p):
        if [name for name in os.listdir(directory) if own(name)]:
            say('try: ERROR: %s does not look like a sandbox (no sandbox.json, env.sh or simulator/): not touched'
                % directory)
            return 1
        if not quiet:
            say('try: no sandbox in %s (your files there are kept)' % _show(directory))
        return 0
    stopped = []
    # nginx: its master runs in its own process group, with the sandbox's prefix in its command line.
    pid = None
    try:
        with open(os.path.join(p['nginx'], 'nginx.pid')) as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        pid = ((_read_json(p['marker']) or {}).get('proxy') or {}).get('pid')
    if pid and _alive(pid, p['nginx']):
        for sig, wait in ((signal.SIGQUIT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + wait
            while time.time() < deadline and _alive(pid, p['nginx']):
                time.sleep(0.05)
            if not _alive(pid, p['nginx']):
                break
        stopped.append('nginx %d' % pid)
    if os.path.isdir(p['simulator']):
        dummy, out = _simctl('stop', '--dir', p['simulator'])
        stopped += out.get('stopped', [])
    left = leftovers(directory)
    if left:
        say('try: ERROR: still running after stop: %s' % '; '.join('%d %s' % item for item in left))
        return 1
    kept = remove_own(directory)
    if not quiet:
        say('try: stopped %s; removed %s%s' % (
            ', '.join(stopped) or 'nothing (it was not running)', _show(directory) if not kept else
            'the sandbox\'s files from %s; kept yours: %s' % (_show(directory), ', '.join(kept)), ''))
    return 0


def remove_own(directory):
    """Remove the sandbox's own files (OWN) from its directory, and the directory when nothing else is left; the
    names of what is kept (the user's), sorted."""
    for name in os.listdir(directory):
        if own(name):
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
    kept = sorted(os.listdir(directory))
    if not kept:
        os.rmdir(directory)
    return kept


def status(args):
    p = paths(os.path.abspath(args.dir))
    info = running(p)
    if info is None:
        say('try: no sandbox runs in %s (make try starts one)' % _show(p['dir']))
        return 1
    sim = SimulatorClient(info['control_url'], timeout=5)
    for server in sim.list():
        stats = sim.stats(server['id'])
        say('  %-14s %-9s %d in flight, hung engines: %s, restarts: %s'
            % (server['id'], server['status'],
               sum(e['reported_running'] + e['reported_waiting'] for e in stats['engines']),
               (server.get('state') or {}).get('hung_engines'), server.get('restarts')))
    print_summary(p, info)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog='scripts/try.py', description=__doc__.split('\n', 1)[0])
    sub = parser.add_subparsers(dest='command')
    sub.required = True
    for name in ('start', 'stop', 'status', 'reset'):
        cmd = sub.add_parser(name)
        cmd.add_argument('--dir', default=DEFAULT_DIR, help='the sandbox directory (default: .cache/try)')
        if name in ('start', 'reset'):
            cmd.add_argument('--lifetime', type=int, default=0,
                             help='stop the simulator after this many seconds (default 0: run until stopped)')
    args = parser.parse_args(argv)
    if args.command == 'start':
        return start(args)
    if args.command == 'stop':
        return stop_sandbox(paths(os.path.abspath(args.dir)))
    if args.command == 'reset':
        directory = os.path.abspath(args.dir)
        os.chdir(REPO)  # the shell that asks may be in the directory that is removed and made again
        args.dir = directory
        return stop_sandbox(paths(directory), quiet=True) or start(args)
    return status(args)


if __name__ == '__main__':
    sys.exit(main())
