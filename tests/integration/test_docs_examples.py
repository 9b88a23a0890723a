"""The copy-paste examples of the docs, run verbatim against simulated vLLM servers.

A fenced block right after a ``<!-- example: NAME -->`` line in docs/*.md is an example; the
tests below take it from the doc as it is written, so the docs and what works cannot drift apart.
"""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import yaml

from ansible_run import _bin, env
from modelops_paths import REPO

PORT_RANGE = '19700-19799'  # the simulator of this module (the `sim` fixture of conftest.py)
EXAMPLE = re.compile(r'<!-- example: ([\w-]+) -->\s*\n```\w*\n(.*?)\n```', re.S)


def examples(doc):
    with open(os.path.join(REPO, 'docs', doc)) as handle:
        return dict(EXAMPLE.findall(handle.read()))


def run_command(text, cwd, replace):
    for old, new in replace.items():
        text = text.replace(old, new)
    argv = shlex.split(text)
    argv[0] = _bin(argv[0])
    return subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=300, check=False)


def test_adhoc_command(sim, tmp_path):
    busy = sim.create(step_rate=200)
    sim.start_load(busy['id'], concurrency=3, max_tokens=10 ** 8)
    sim.wait_for(busy['id'], lambda s: sum(e['reported_running'] for e in s['engines']) == 3)
    sim.reset_counts(busy['id'])
    proc = run_command(examples('adhoc.md')['adhoc-command'], tmp_path,
                       {'http://127.0.0.1:8000': busy['url']})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"state": "busy"' in proc.stdout
    counts = sim.request_counts(busy['id'])
    assert not any('/v1/' in key for key in counts), counts  # nothing sent to the busy server
    sim.delete(busy['id'])


def test_adhoc_inventory_and_playbook(sim, tmp_path):
    busy = sim.create(step_rate=200)
    idle = sim.create(step_rate=200)
    sim.start_load(busy['id'], concurrency=3, max_tokens=10 ** 8)
    sim.wait_for(busy['id'], lambda s: sum(e['reported_running'] for e in s['engines']) == 3)
    found = examples('adhoc.md')
    inventory = found['adhoc-inventory'].replace('http://127.0.0.1:8000', busy['url']) \
        .replace('http://127.0.0.1:8001', idle['url'])
    assert yaml.safe_load(inventory)['vllm']['hosts']
    (tmp_path / 'inventory.yml').write_text(inventory)
    proc = run_command(found['adhoc-playbook'], tmp_path, {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'gb10-01: busy - ' in proc.stdout
    assert 'gb10-02: idle - ' in proc.stdout
    for server in (busy, idle):
        sim.delete(server['id'])


RESTART = '''import json, sys, urllib.request
control, server = sys.argv[1:3]
req = urllib.request.Request(control + "/servers/" + server + "/state", method="POST",
                             data=json.dumps({"state": "restart", "load_seconds": 1}).encode(),
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
'''


def test_awx_example_under_ansible_runner(sim, tmp_path):
    """docs/awx.md's inventory and ansible-runner commands, verbatim, against a busy and a stuck server.
    Only the URLs, the restart method (a command that restarts the simulated server instead of
    systemctl) and short waits are set for this machine."""
    busy = sim.create(step_rate=50)
    stuck = sim.create(step_rate=50, process_age=7200)  # up for two hours: past the start-up grace
    for server in (busy, stuck):
        sim.start_load(server['id'], concurrency=2, max_tokens=10 ** 8)
        sim.wait_for(server['id'], lambda s: sum(e['reported_running'] for e in s['engines']) == 2)
    sim.set_state(stuck['id'], 'hang')
    found = examples('awx.md')
    inventory = yaml.safe_load(found['awx-inventory'])
    restarter = tmp_path / 'restart.py'
    restarter.write_text(RESTART)
    for host, server in (('gb10-01', busy), ('gb10-02', stuck)):
        hostvars = inventory['vllm']['hosts'][host]
        hostvars['vllm_url'] = server['url']
        hostvars['vllm_watchdog_state_dir'] = str(tmp_path / 'state' / host)
        hostvars['vllm_watchdog_restart_command'] = [sys.executable, str(restarter), sim.base_url,
                                                     str(server['id'])]
    inventory['vllm']['vars'].update(vllm_watchdog_restart_method='command', vllm_watchdog_interval=1,
                                     vllm_watchdog_ready_delay=1, vllm_watchdog_ready_timeout=60,
                                     ansible_connection='local',
                                     ansible_python_interpreter=sys.executable)
    (tmp_path / 'inventory.yml').write_text(yaml.safe_dump(inventory))
    shutil.copytree(os.path.join(REPO, 'playbooks'), str(tmp_path / 'playbooks'))
    environ = env()
    environ['PATH'] = os.path.dirname(_bin('ansible-runner')) + os.pathsep + environ['PATH']
    proc = subprocess.run(['bash', '-e', '-c', found['awx-runner']], cwd=str(tmp_path), env=environ,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and proc.stdout.strip().endswith('successful'), proc.stdout[-3000:] + proc.stderr
    events = []
    for path in glob.glob(str(tmp_path / 'runner' / 'artifacts' / 'watchdog-1' / 'job_events' / '*.json')):
        with open(path) as handle:
            events.append(json.load(handle))
    stats = [e for e in events if e['event'] == 'playbook_on_stats']
    custom = stats[0]['event_data']['artifact_data']
    assert custom['vllm_watchdog_counts'] == {'busy': 1, 'stuck': 1}, custom
    assert custom['vllm_watchdog_restarted'] == ['gb10-02/vllm'], custom
    assert custom['vllm_watchdog_needs_human'] == [], custom
