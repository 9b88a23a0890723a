"""modelops.vllm.watchdog end to end, through ``ansible-playbook`` and ``ansible-runner``.

* Two ``ansible-playbook`` runs at once against one stuck (simulated) server restart it once:
  the gate's lock on the host and the history it keeps.
* ``ansible-runner`` (what AWX runs) with the collection's ``watchdog.yml`` against a busy and a
  stuck server: the fleet summary (``set_stats``) is in the runner's artifacts.
* The execution environment definition: ``ansible-builder create`` works offline.
* The ``command`` restart method against a REAL vLLM server hung by SIGSTOP with requests in
  flight: one restart, by a command the test provides, and the server is idle afterwards.
  Marked ``vllm``; it runs last.

The service managers are the stand-ins of ``tests/standins/`` (first on PATH): they log their
exact argv and act on the simulated servers. Ports: the simulator and the test's own control
endpoint use 127.0.0.1:21500-21999 (the molecule scenarios use 21000-21499).
"""

import configparser
import glob
import http.server
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time

import pytest
import yaml

from tests.support.ansible_run import env as ansible_env
from tests.support.ansible_run import health, run_playbook
from tests.support.paths import REPO
from tests.support import servers
from tests.support.standins import Standins
from tests.support.ports import block, span

PORT_RANGE = span('watchdog')
CONTROL_PORTS = range(block('watchdog-control')[0], block('watchdog-control')[1] + 1)
BIN = os.path.dirname(sys.executable)

SHOW = ['systemctl', 'show', 'vllm', '--property=ActiveState', '--property=SubState',
        '--property=ExecMainStartTimestamp', '--property=MainPID', '--property=LoadState', '--timestamp=unix']

# The collection's scheduled playbook, as users run it (by its FQCN), then the role's results saved.
WATCHDOG_PLAY = """
- name: The collection's watchdog playbook
  ansible.builtin.import_playbook: modelops.vllm.watchdog

- name: Save what the role found and did
  hosts: vllm
  gather_facts: false
  tasks:
    - name: Save vllm_watchdog_results
      ansible.builtin.copy:
        content: "{{ ansible_facts.vllm_watchdog_results | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0600"
"""

# Short waits; the check reads /metrics three times, `interval` apart, to call a server stuck.
FAST = {
    'vllm_watchdog_interval': 1,
    # Proof of a hang within a run's own two waits: these tests are about what the role does with the verdict;
    # how long proof takes by default (300 s) is test_long_step.py's and tests/unit test_freeze.py's.
    'vllm_watchdog_freeze_limit': 2,
    'vllm_watchdog_probe_timeout': 5,
    'vllm_watchdog_metrics_timeout': 5,
    'vllm_watchdog_ready_delay': 1,
    'vllm_watchdog_ready_timeout': 60,
}


# --------------------------------------------------------------------------- helpers

def stuck_server(sim, **options):
    return servers.create(sim, 'stuck', **dict({'max_num_seqs': 4, 'step_rate': 50}, **options))


def busy_server(sim):
    return servers.create(sim, 'busy', max_num_seqs=4, step_rate=50)


def write_inventory(path, hosts, group_vars):
    """A YAML inventory: the hosts in the group `vllm` (what watchdog.yml targets), all local."""
    inventory = {'all': {'children': {'vllm': {
        'hosts': {name: dict({'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}, **hv)
                  for name, hv in hosts.items()},
        'vars': group_vars}}}}
    with open(path, 'w') as handle:
        yaml.safe_dump(inventory, handle)
    return path


def history(state_dir, name='vllm'):
    with open(os.path.join(state_dir, '%s.json' % name)) as handle:
        return json.load(handle)


# --------------------------------------------------------------------------- one restart authority

def test_two_runs_at_once_restart_a_stuck_server_once(sim, tmp_path):
    """A schedule and an ad-hoc run at the same time: both find the server stuck, one restarts it.

    The stand-in's restart restarts the simulated server, whose new process hangs at once (a restart
    that does not help), so that both runs judge it stuck whatever their timing (before the restart:
    work in flight and nothing moves; after it: two unanswered probes): only the gate's lock and
    history stand between the second run and a second restart.
    """
    srv = stuck_server(sim, hang_after_restart=True)
    standins = Standins(str(tmp_path), sim.base_url)
    standins.write({'vllm': {'server': srv['id'], 'state': 'running', 'started_at': time.time() - 3600}})
    state_dir = str(tmp_path / 'state')
    inventory = write_inventory(str(tmp_path / 'inventory.yml'), {'gb10-test': {}}, dict(
        FAST, vllm_url=srv['url'], vllm_watchdog_state_dir=state_dir, vllm_watchdog_restart_method='systemd',
        vllm_watchdog_service='vllm', vllm_watchdog_interval=2))

    runs = [None, None]
    checks_dir = os.path.join(state_dir, 'checks')  # where the background checks leave their results

    def run(index):
        workdir = tmp_path / ('run%d' % index)
        workdir.mkdir()
        runs[index] = run_playbook(WATCHDOG_PLAY, inventory=inventory, workdir=str(workdir), timeout=300,
                                   extra_env=standins.env())

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    for one in runs:
        assert one.rc == 0, one
    results = [one.outputs['gb10-test.json'][0] for one in runs]
    assert [r['state'] for r in results] == ['stuck', 'stuck'], results
    assert sorted(r['action'] for r in results) == ['none', 'restarted'], results
    second = [r for r in results if r['action'] == 'none'][0]
    assert 'within the start-up grace' in second['decision'], second
    # The restart is a stop, a wait until the memory is back, then a start (the memory of a GB10 outlives a process).
    assert standins.stops() == [['systemctl', 'stop', 'vllm']], standins.calls()
    assert standins.restarts() == [['systemctl', 'start', 'vllm']], standins.calls()
    assert len(history(state_dir)['restarts']) == 1
    assert len(glob.glob(os.path.join(state_dir, 'evidence', 'vllm-*.json'))) == 1
    assert os.path.isdir(checks_dir) and os.listdir(checks_dir) == []  # the gates removed both results


# --------------------------------------------------------------------------- ansible-runner (AWX)

UNREACHABLE_PLAY = """
- name: The collection's watchdog playbook
  ansible.builtin.import_playbook: modelops.vllm.watchdog

- name: Save the report
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Save every host's results
      ansible.builtin.copy:
        content: "{{ dict(groups['vllm'] | zip(groups['vllm'] | map('extract', hostvars, ['ansible_facts', 'vllm_watchdog_results']))) | to_json }}"
        dest: "{{ out_dir }}/results.json"
        mode: "0600"
"""


def test_an_unreachable_host_is_reported_never_dropped_and_power_cycled_under_the_guard_rails(sim, tmp_path):
    """A host that answers nothing over SSH (a wedged GB10): a line of its own, counted unreachable (never
    healthy), never restarted; the controller's vllm_watchdog_unreachable_command runs once, and not again
    inside the start-up grace after it."""
    busy = busy_server(sim)
    power_log = tmp_path / 'power-cycles.log'
    inventory = write_inventory(str(tmp_path / 'inventory.yml'), {
        'gb10-ok': {'vllm_url': busy['url']},
        # Nothing listens on port 1: ssh is refused at once, as from a box that answers nothing.
        'gb10-wedged': {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': 1,
                        'vllm_url': 'http://127.0.0.1:1'},
    }, dict(FAST, vllm_watchdog_state_dir=str(tmp_path / 'state'),
            vllm_watchdog_controller_state_dir=str(tmp_path / 'controller-state'),
            vllm_watchdog_unreachable_command=['sh', '-c', 'echo "{{ inventory_hostname }}" >> %s' % power_log]))
    runs = []
    for index in range(2):
        run = run_playbook(UNREACHABLE_PLAY, inventory=inventory, workdir=str(tmp_path / ('run%d' % index)),
                           timeout=300, extra_env={'ANSIBLE_TIMEOUT': '5'})
        runs.append(run)
        results = run.outputs['results.json']
        ok, wedged = results['gb10-ok'][0], results['gb10-wedged'][0]
        assert ok['state'] == 'busy' and ok['action'] == 'none', ok
        assert wedged['state'] == 'unreachable' and wedged['unreachable'] and wedged['failed'], wedged
        assert wedged['action'] == 'unreachable' and not wedged['restarted'], wedged
        assert 'gb10-wedged/vllm: unreachable - watchdog: host UNREACHABLE' in run.stdout
        assert 'unreachable hosts: gb10-wedged' in run.stdout
        recap = [line for line in run.stdout.split('PLAY RECAP')[-1].splitlines() if line.startswith('gb10-wedged')]
        assert recap and 'failed=1' in recap[0], recap  # it fails for a human, it is not dropped
    assert power_log.read_text().split() == ['gb10-wedged'], power_log.read_text()  # once: the grace holds
    assert 'unreachable command sh -c' in runs[0].outputs['results.json']['gb10-wedged'][0]['decision']
    assert 'within the start-up grace' in runs[1].outputs['results.json']['gb10-wedged'][0]['decision']


def test_ansible_runner_reports_the_fleet_in_its_artifacts(sim, tmp_path):
    busy = busy_server(sim)
    stuck = stuck_server(sim)
    standins = Standins(str(tmp_path), sim.base_url)
    standins.write({
        'vllm-a': {'server': busy['id'], 'state': 'running', 'started_at': time.time() - 3600, 'load_seconds': 1},
        'vllm-b': {'server': stuck['id'], 'state': 'running', 'started_at': time.time() - 3600, 'load_seconds': 1},
    })
    pdd = tmp_path / 'runner'
    (pdd / 'project').mkdir(parents=True)
    (pdd / 'inventory').mkdir()
    (pdd / 'env').mkdir()
    shutil.copy(os.path.join(REPO, 'playbooks', 'watchdog.yml'), str(pdd / 'project' / 'watchdog.yml'))
    write_inventory(str(pdd / 'inventory' / 'hosts.yml'), {
        'gb10-a': {'vllm_url': busy['url'], 'vllm_watchdog_service': 'vllm-a',
                   'vllm_watchdog_state_dir': str(tmp_path / 'state-a')},
        'gb10-b': {'vllm_url': stuck['url'], 'vllm_watchdog_service': 'vllm-b',
                   'vllm_watchdog_state_dir': str(tmp_path / 'state-b')},
    }, dict(FAST, vllm_watchdog_restart_method='systemd'))
    envvars = ansible_env(standins.env())
    with open(str(pdd / 'env' / 'envvars'), 'w') as handle:
        yaml.safe_dump({key: envvars[key] for key in (
            'PATH', 'MODELOPS_STANDIN_CONFIG', 'MODELOPS_STANDIN_LOG', 'ANSIBLE_COLLECTIONS_PATH',
            'ANSIBLE_PYTHON_INTERPRETER', 'ANSIBLE_HOST_KEY_CHECKING', 'ANSIBLE_NOCOLOR')}, handle)

    proc = subprocess.run([os.path.join(BIN, 'ansible-runner'), 'run', str(pdd), '-p', 'watchdog.yml',
                           '--ident', 'watchdog-1'],
                          capture_output=True, text=True, timeout=300, env=envvars, check=False)
    artifacts = pdd / 'artifacts' / 'watchdog-1'
    with open(str(artifacts / 'status')) as handle:
        status = handle.read().strip()
    assert proc.returncode == 0 and status == 'successful', (status, proc.stdout[-4000:], proc.stderr[-2000:])

    events = []
    for path in glob.glob(str(artifacts / 'job_events' / '*.json')):
        with open(path) as handle:
            events.append(json.load(handle))
    events.sort(key=lambda e: e['counter'])
    stats = [e for e in events if e['event'] == 'playbook_on_stats']
    assert len(stats) == 1
    custom = stats[0]['event_data']['artifact_data']
    assert custom['vllm_watchdog_counts'] == {'busy': 1, 'stuck': 1}, custom
    assert custom['vllm_watchdog_restarted'] == ['gb10-b/vllm'], custom
    assert custom['vllm_watchdog_needs_human'] == [], custom

    restarted = [e for e in events if e['event'] == 'runner_on_ok'
                 and e['event_data'].get('task') == 'Restart | by its method, then wait until it serves its model']
    assert [e['event_data']['host'] for e in restarted] == ['gb10-b']
    assert restarted[0]['event_data']['res']['changed'] is True
    assert standins.restarts() == [['systemctl', 'start', 'vllm-b']], standins.calls()
    changed = stats[0]['event_data']['changed']
    assert 'gb10-a' not in changed and changed.get('gb10-b', 0) > 0, changed  # `changed` only where it restarted


# --------------------------------------------------------------------------- execution environment

def test_execution_environment_context_is_created_offline(tmp_path):
    builder = os.path.join(BIN, 'ansible-builder')
    assert os.path.exists(builder), 'ansible-builder is missing from the venv (requirements/test.txt pins it)'
    with open(os.path.join(REPO, 'galaxy.yml')) as handle:
        galaxy = yaml.safe_load(handle)
    tarball_name = '%s-%s-%s.tar.gz' % (galaxy['namespace'], galaxy['name'], galaxy['version'])
    ee_file = os.path.join(REPO, 'execution-environment', 'execution-environment.yml')
    with open(ee_file) as handle:
        definition = yaml.safe_load(handle)
    # The definition names the tarball `make build` writes for this version of the collection.
    assert definition['version'] == 3
    assert [f['src'] for f in definition['additional_build_files']] == ['../build/' + tarball_name, 'ansible.cfg']
    assert definition['dependencies']['galaxy'] == '../build/ee-requirements.yml'  # written by `make build`
    base = definition['images']['base_image']['name']
    assert '@sha256:' in base and not base.split('@')[0].endswith(':latest'), base  # a pinned base

    # A copy of the layout it refers to (../build, ../requirements).
    layout = tmp_path / 'layout'
    (layout / 'execution-environment').mkdir(parents=True)
    (layout / 'requirements').mkdir()
    shutil.copy(ee_file, str(layout / 'execution-environment'))
    shutil.copy(os.path.join(REPO, 'execution-environment', 'ansible.cfg'), str(layout / 'execution-environment'))
    shutil.copy(os.path.join(REPO, 'requirements', 'collection.txt'), str(layout / 'requirements'))

    def create(context):
        return subprocess.run(
            [builder, 'create', '--file', str(layout / 'execution-environment' / 'execution-environment.yml'),
             '--context', str(context), '--output-filename', 'Containerfile'],
            capture_output=True, text=True, timeout=120, check=False,
            env=dict(ansible_env(), http_proxy='http://127.0.0.1:9', https_proxy='http://127.0.0.1:9'))

    # Without `make build` first, it fails and says what is missing (it used to exit 0 with no collection).
    early = create(tmp_path / 'early')
    assert early.returncode != 0 and 'ee-requirements.yml does not exist' in early.stdout + early.stderr, (
        early.returncode, early.stdout + early.stderr)

    # `make build`'s script, writing into the layout's build/.
    build_env = dict(ansible_env(), BUILD_DIR=str(layout / 'build'), PATH=BIN + os.pathsep + os.environ.get('PATH', ''))
    subprocess.run([os.path.join(REPO, 'scripts', 'build-collection.sh')], check=True, capture_output=True, text=True,
                   timeout=300, env=build_env)
    assert os.path.exists(str(layout / 'build' / tarball_name))

    context = tmp_path / 'context'
    proc = create(context)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'No matches' not in proc.stdout + proc.stderr
    containerfile = (context / 'Containerfile').read_text()
    assert 'ansible-galaxy collection install' in containerfile
    assert 'ansible-core==2.19.14' in containerfile
    assert 'requests>=2.25' in (context / '_build' / 'requirements.txt').read_text()
    # The recommended settings: /etc/ansible/ansible.cfg (pipelining, the one-line callback), and the callback in
    # the environment, which ansible-runner keeps under its own (ORIGINAL_STDOUT_CALLBACK).
    config = configparser.ConfigParser()
    config.read_string((context / '_build' / 'configs' / 'ansible.cfg').read_text())
    assert config.getboolean('connection', 'pipelining') is True
    assert config.get('defaults', 'stdout_callback') == 'modelops.vllm.oneline'
    assert config.getboolean('inventory', 'unparsed_is_failed') is True
    lines = containerfile.splitlines()
    assert 'COPY _build/configs/ansible.cfg /etc/ansible/ansible.cfg' in lines, containerfile
    assert 'ENV ANSIBLE_STDOUT_CALLBACK=modelops.vllm.oneline' in lines, containerfile
    with tarfile.open(str(context / '_build' / 'collections' / tarball_name)) as tar:
        names = tar.getnames()
    assert 'roles/watchdog/tasks/main.yml' in names and 'plugins/modules/health.py' in names
    assert yaml.safe_load((context / '_build' / 'requirements.yml').read_text()) == {
        'collections': [{'name': '/build/collections/' + tarball_name, 'type': 'file'}]}


# --------------------------------------------------------------------------- a real vLLM server (last)

CTL = r'''
"""Restart, status and logs of the test's real vLLM server, for the role's `command` method.
Logs its argv (one JSON line) to argv.log next to it, then asks the test process over HTTP."""
import json, os, sys, time, urllib.request
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, 'argv.log'), 'a') as log:
    log.write(json.dumps({'argv': ['ctl'] + sys.argv[1:], 'time': time.time()}) + '\n')
with open(os.path.join(HERE, 'control_url')) as handle:
    url = handle.read().strip() + '/' + sys.argv[1]
method = 'POST' if sys.argv[1] == 'restart' else 'GET'
req = urllib.request.Request(url, data=b'' if method == 'POST' else None, method=method)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(req, timeout=30) as resp:
    body = json.loads(resp.read().decode())
for line in body.get('lines', []):
    print(line)
sys.exit(body.get('rc', 0))
'''


class ServerControl(object):
    """An HTTP endpoint in the test process that restarts, reports and shows the log of a VllmServer.

    ``POST /restart`` answers at once (like ``systemctl restart`` of a simple unit) and restarts the
    server in a thread: SIGCONT + SIGTERM of its process group, then a fresh start on the same port.
    """

    def __init__(self, server):
        self.server = server
        self.restarts = 0
        self.errors = []
        self.served_logs = []  # the lines of each answer to GET /logs: what the logs command printed
        self.threads = []
        control = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                if self.path != '/restart':
                    return self._answer(404, {'rc': 2})
                control.restarts += 1
                thread = threading.Thread(target=control._restart, daemon=True)
                control.threads.append(thread)
                thread.start()
                return self._answer(202, {'rc': 0})

            def do_GET(self):  # noqa: N802
                if self.path == '/status':
                    return self._answer(200, {'rc': 0 if control.server.is_running() else 3})
                if self.path == '/logs':
                    control.served_logs.append(control.server.log_tail(50).splitlines())
                    return self._answer(200, {'rc': 0, 'lines': control.served_logs[-1]})
                return self._answer(404, {'rc': 2})

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        for port in CONTROL_PORTS:
            try:
                self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)
                break
            except OSError:
                continue
        else:
            raise RuntimeError('no free port in %s-%s' % (CONTROL_PORTS[0], CONTROL_PORTS[-1]))
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        self._serve = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._serve.start()

    def _restart(self):
        try:
            self.server.restart()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        for thread in self.threads:
            thread.join(300)


@pytest.mark.vllm
def test_command_method_restarts_a_real_hung_vllm_once(vllm_server, tmp_path):
    server = vllm_server()
    control = ServerControl(server)
    load = None
    try:
        (tmp_path / 'ctl.py').write_text(CTL)
        (tmp_path / 'control_url').write_text(control.url)
        ctl = [sys.executable, str(tmp_path / 'ctl.py')]
        load = server.start_completions(2, max_tokens=30000)
        server.wait_running(2)
        api_server = server.pid
        stopped = server.hang()  # SIGSTOP of the engine: /metrics still answers, nothing moves
        state_dir = str(tmp_path / 'state')
        inventory = write_inventory(str(tmp_path / 'inventory.yml'), {'gb10-real': {}}, dict(
            FAST, vllm_url=server.url, vllm_watchdog_state_dir=state_dir, vllm_watchdog_interval=3,
            vllm_watchdog_restart_method='command', vllm_watchdog_restart_command=ctl + ['restart'],
            vllm_watchdog_assume_url_is_service=True,
            vllm_watchdog_status_command=ctl + ['status'], vllm_watchdog_logs_command=ctl + ['logs'],
            vllm_watchdog_ready_delay=2, vllm_watchdog_ready_timeout=300,
            # The stack dumps of the evidence: py-spy from this venv (requirements/test.txt); the other pieces as a
            # host without NVIDIA tools has them (nvidia-smi missing, said so).
            vllm_watchdog_py_spy=os.path.join(BIN, 'py-spy'),
            # vLLM's own process_start_time_seconds says it started a minute or two ago: a grace of 20 s
            # has passed (the default 900 s would rightly keep the watchdog away from it).
            vllm_watchdog_startup_grace=20,
            # A real freeze limit (FAST's 2 s is the two waits): the run that finds the hang watches it until it
            # has lasted 20 s (vllm_watchdog_freeze_wait defaults to the limit), then restarts. Never before.
            vllm_watchdog_freeze_limit=20))

        run = run_playbook(WATCHDOG_PLAY, inventory=inventory, workdir=str(tmp_path / 'run'), timeout=600)
        assert run.rc == 0, run
        result = run.outputs['gb10-real.json'][0]
        assert result['state'] == 'stuck', result
        assert 'past freeze_limit (20s)' in result['reason'], result
        assert result['action'] == 'restarted', result
        assert result['after'] == 'idle', result  # waited until ready, then checked again

        for thread in control.threads:
            thread.join(300)
        assert control.errors == []
        assert control.restarts == 1
        with open(str(tmp_path / 'argv.log')) as handle:
            calls = [json.loads(line)['argv'] for line in handle]
        assert calls == [['ctl', 'status'], ['ctl', 'logs'], ['ctl', 'restart']], calls
        assert server.starts == 2

        evidence = glob.glob(os.path.join(state_dir, 'evidence', 'vllm-*.json'))
        assert len(evidence) == 1
        with open(evidence[0]) as handle:
            kept = json.load(handle)
        assert kept['verdict']['state'] == 'stuck' and kept['service']['running'] is True
        assert kept['verdict']['frozen_for'] >= 20, kept['verdict']  # no movement for the whole limit
        # The server's own log, as the logs command printed it (its last lines, in order). Not a search for a word:
        # which lines of vLLM's log are last when the hang is seen varies (route listings name no 'vllm').
        assert len(control.served_logs) == 1 and control.served_logs[0], control.served_logs
        served = control.served_logs[0]
        assert kept['logs'] and kept['logs'] == served[-len(kept['logs']):], (kept['logs'], served)

        # The hang itself, taken before the restart: a py-spy stack dump of every process of the server, found from
        # the process that listens on the URL's port (the command method names no main process): the API server and
        # the SIGSTOPped EngineCore, which py-spy cannot pause (ptrace) and reads without pausing.
        hang = kept['hang']
        assert 'listen on the URL' in hang['processes_found_by'], hang['processes_found_by']
        dumped = dict((p['pid'], p) for p in hang['stacks']['processes'])
        assert api_server in dumped and 'Thread' in dumped[api_server].get('dump', ''), dumped.get(api_server)
        for pid in stopped:
            assert pid in dumped, (pid, sorted(dumped))
            assert '--nonblocking' in dumped[pid].get('mode', ''), dumped[pid]
            assert 'vllm' in dumped[pid]['dump'] and 'Thread' in dumped[pid]['dump'], dumped[pid]
        engine = [dumped[pid] for pid in stopped if 'EngineCore' in dumped[pid]['cmdline'] + dumped[pid]['dump']]
        assert engine and 'vllm/v1/engine' in engine[0]['dump'], [dumped[pid] for pid in stopped]
        assert hang['meminfo']['kb']['MemAvailable'] > 0
        assert 'is not installed' in hang['nvidia_smi']['error']  # no NVIDIA tools here, and the evidence says so
        assert 'lines' in hang['kernel'] or 'error' in hang['kernel']
        assert result['evidence'] and 'py-spy %d stack(s)' % len([p for p in dumped.values() if p.get('dump')]) \
            in result['evidence'], result['evidence']

        # And on its own, after the role: the server is idle.
        after, dummy = health({'url': server.url, 'interval': 2})
        assert after['state'] == 'idle', after['reason']
    finally:
        if load is not None:
            load.cancel()
        control.close()
