# -*- coding: utf-8 -*-
"""Run the vLLM simulator in the background across separate ``ansible-playbook`` runs (molecule steps).

``--exit-with-parent`` cannot be used when the simulator must outlive the playbook that
started it (molecule's create step) and be stopped by another one (the destroy step). So:

    python tests/standins/simctl.py start --dir DIR [--port-range 21000-21499] [--lifetime 900]
        starts the simulator in its own session, under ``timeout LIFETIME`` (a safety net: it
        never outlives a crashed test run by more than that), writes DIR/simulator.pid and
        DIR/simulator.ready (the ready line: control_url, pid, ...), prints the ready line.
        A simulator still running from an earlier, interrupted start in DIR is stopped first.
    python tests/standins/simctl.py stop --dir DIR
        stops what ``start`` (and ``trigger``) started, by the pids in DIR, and nothing else.
    python tests/standins/simctl.py trigger --dir DIR --server ID --after-reads N
            [--state restart] [--load-seconds S] [--timeout T]
        in the background: once the server has answered N ``GET /metrics`` (counted by the
        simulator since its creation or its last reset_counts), set its state (default:
        restart), write DIR/trigger.done and exit. Used to restart a server between two reads
        of a health check.

Standard library only.
"""

from __future__ import print_function

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SIM = os.path.join(REPO, 'tests', 'simulator', 'sim.py')
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.simulator.client import SimulatorClient, SimulatorError  # noqa: E402  pylint: disable=wrong-import-position


def _paths(directory):
    return {
        'pid': os.path.join(directory, 'simulator.pid'),
        'ready': os.path.join(directory, 'simulator.ready'),
        'log': os.path.join(directory, 'simulator.log'),
        'trigger_pid': os.path.join(directory, 'trigger.pid'),
        'trigger_done': os.path.join(directory, 'trigger.done'),
    }


def _cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            return handle.read().replace(b'\0', b' ').decode('utf-8', 'replace')
    except (IOError, OSError):
        return ''


def _alive(pid, marker):
    """The process is alive, not a zombie, and is the one we started (its command line has ``marker``)."""
    try:
        with open('/proc/%d/stat' % pid) as handle:
            state = handle.read().rsplit(')', 1)[1].split()[0]
    except (IOError, OSError, IndexError):
        return False
    return state != 'Z' and marker in _cmdline(pid)


def _read_pid(path):
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (IOError, OSError, ValueError):
        return None


def _terminate(pid, marker, timeout=10.0):
    if pid is None or not _alive(pid, marker):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not _alive(pid, marker):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return True


def start(args):
    paths = _paths(args.dir)
    if not os.path.isdir(args.dir):
        os.makedirs(args.dir)
    # A simulator that an earlier, interrupted run started from this directory: ours, so stop it.
    _terminate(_read_pid(paths['trigger_pid']), os.path.abspath(__file__))
    _terminate(_read_pid(paths['pid']), SIM)
    for key in ('ready', 'pid'):
        if os.path.exists(paths[key]):
            os.unlink(paths[key])
    cmd = ['timeout', '--signal=TERM', '--kill-after=10', str(int(args.lifetime)), args.python, SIM,
           '--host', '127.0.0.1', '--control-port', '0', '--port-range', args.port_range,
           '--ready-file', paths['ready']] + list(args.sim_args)
    with open(paths['log'], 'ab') as log, open(os.devnull, 'rb') as devnull:
        proc = subprocess.Popen(cmd, stdin=devnull, stdout=log, stderr=log, start_new_session=True,  # pylint: disable=consider-using-with
                                close_fds=True, env=dict(os.environ, PYTHONUNBUFFERED='1'))
    with open(paths['pid'], 'w') as handle:
        handle.write('%d\n' % proc.pid)
    deadline = time.time() + args.startup_timeout
    while not os.path.exists(paths['ready']):
        if proc.poll() is not None or time.time() > deadline:
            _terminate(proc.pid, SIM)
            with open(paths['log'], 'rb') as handle:
                tail = handle.read()[-3000:].decode('utf-8', 'replace')
            print('simctl: the simulator did not start (exit %s); %s:\n%s' % (proc.poll(), paths['log'], tail),
                  file=sys.stderr)
            return 1
        time.sleep(0.05)
    with open(paths['ready']) as handle:
        ready = json.loads(handle.read())
    ready['launcher_pid'] = proc.pid
    print(json.dumps(ready))
    return 0


def stop(args):
    paths = _paths(args.dir)
    stopped = []
    trigger = _read_pid(paths['trigger_pid'])
    if _terminate(trigger, os.path.abspath(__file__)):
        stopped.append('trigger %d' % trigger)
    pid = _read_pid(paths['pid'])
    if pid is not None and _alive(pid, SIM):
        try:
            with open(paths['ready']) as handle:
                SimulatorClient(json.load(handle)['control_url'], timeout=5).shutdown()
            deadline = time.time() + 10
            while time.time() < deadline and _alive(pid, SIM):
                time.sleep(0.05)
        except (IOError, OSError, ValueError, KeyError, SimulatorError):
            pass
        _terminate(pid, SIM)
        stopped.append('simulator %d' % pid)
    for key in ('pid', 'trigger_pid'):
        if os.path.exists(paths[key]):
            os.unlink(paths[key])
    print(json.dumps({'stopped': stopped}))
    return 0


def trigger(args):
    paths = _paths(args.dir)
    for key in ('trigger_done',):
        if os.path.exists(paths[key]):
            os.unlink(paths[key])
    cmd = [args.python, os.path.abspath(__file__), '_trigger-run', '--dir', args.dir, '--server', args.server,
           '--after-reads', str(args.after_reads), '--state', args.state, '--load-seconds', str(args.load_seconds),
           '--timeout', str(args.timeout)]
    with open(paths['log'], 'ab') as log, open(os.devnull, 'rb') as devnull:
        proc = subprocess.Popen(cmd, stdin=devnull, stdout=log, stderr=log, start_new_session=True,  # pylint: disable=consider-using-with
                                close_fds=True)
    with open(paths['trigger_pid'], 'w') as handle:
        handle.write('%d\n' % proc.pid)
    print(json.dumps({'trigger_pid': proc.pid}))
    return 0


def trigger_run(args):
    paths = _paths(args.dir)
    with open(paths['ready']) as handle:
        client = SimulatorClient(json.load(handle)['control_url'], timeout=5)
    deadline = time.time() + args.timeout
    done = {'server': args.server, 'state': args.state, 'after_reads': args.after_reads}
    while True:
        reads = client.request_counts(args.server).get('GET /metrics', 0)
        if reads >= args.after_reads:
            params = {'load_seconds': args.load_seconds} if args.state == 'restart' else {}
            client.set_state(args.server, args.state, **params)
            done.update(fired=True, reads=reads, time=time.time())
            break
        if time.time() > deadline:
            done.update(fired=False, reads=reads, time=time.time())
            break
        time.sleep(0.01)
    with open(paths['trigger_done'] + '.tmp', 'w') as handle:
        json.dump(done, handle)
    os.rename(paths['trigger_done'] + '.tmp', paths['trigger_done'])
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog='simctl.py', description=__doc__.split('\n', maxsplit=1)[0])
    sub = parser.add_subparsers(dest='command')
    sub.required = True
    p = sub.add_parser('start')
    p.add_argument('--dir', required=True)
    p.add_argument('--port-range', default='21000-21499')
    p.add_argument('--lifetime', type=float, default=900)
    p.add_argument('--startup-timeout', type=float, default=20)
    p.add_argument('--python', default=sys.executable)
    p.add_argument('sim_args', nargs='*', help='more simulator options, after --')
    p.set_defaults(func=start)
    p = sub.add_parser('stop')
    p.add_argument('--dir', required=True)
    p.set_defaults(func=stop)
    for name, func in (('trigger', trigger), ('_trigger-run', trigger_run)):
        p = sub.add_parser(name)
        p.add_argument('--dir', required=True)
        p.add_argument('--server', required=True)
        p.add_argument('--after-reads', type=int, default=1)
        p.add_argument('--state', default='restart')
        p.add_argument('--load-seconds', type=float, default=0.0)
        p.add_argument('--timeout', type=float, default=120)
        p.add_argument('--python', default=sys.executable)
        p.set_defaults(func=func)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
