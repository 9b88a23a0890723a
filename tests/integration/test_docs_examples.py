"""The copy-paste examples of the docs that are not commands of the sandbox, run against simulated
vLLM servers.

A fenced block right after a ``<!-- example: NAME -->`` line in docs/*.md is an example; the
tests below take it from the doc as it is written, so the docs and what works cannot drift apart.
The commands written against ``make try``'s sandbox (``<!-- try -->``) are run by test_try.py,
the README's install instructions by test_install.py.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

from tests.support.ansible_run import _bin, env
from tests.support.paths import REPO
from tests.support.ports import span

PORT_RANGE = span('docs-examples')  # the simulator of this module (the `sim` fixture of conftest.py)
EXAMPLE = re.compile(r'<!-- example: ([\w-]+) -->\s*\n```\w*\n(.*?)\n```', re.S)


def examples(doc):
    with open(os.path.join(REPO, 'docs', doc)) as handle:
        return dict(EXAMPLE.findall(handle.read()))


RESTART = '''import json, sys, urllib.request
control, server = sys.argv[1:3]
req = urllib.request.Request(control + "/servers/" + server + "/state", method="POST",
                             data=json.dumps({"state": "restart", "load_seconds": 1}).encode(),
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
'''


def busy_and_stuck(sim):
    """Two simulated servers with two requests each in flight: one busy, one hung (up for two hours: past
    the start-up grace)."""
    busy = sim.create(step_rate=50)
    stuck = sim.create(step_rate=50, process_age=7200)
    for server in (busy, stuck):
        sim.start_load(server['id'], concurrency=2, max_tokens=10 ** 8)
        sim.wait_for(server['id'], lambda s: sum(e['reported_running'] for e in s['engines']) == 2)
    sim.set_state(stuck['id'], 'hang')
    return busy, stuck


def test_awx_example_under_ansible_runner(sim, tmp_path):
    """docs/awx.md's inventory, verbatim, under ansible-runner with the collection's watchdog playbook
    (what an AWX job runs), against a busy and a stuck server. Only the URLs, the restart method (a
    command that restarts the simulated server instead of systemctl) and short waits are set for
    this machine."""
    busy, stuck = busy_and_stuck(sim)
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
                                     vllm_watchdog_freeze_limit=2,  # proof within the run's two waits
                                     vllm_watchdog_assume_url_is_service=True,
                                     vllm_watchdog_ready_delay=1, vllm_watchdog_ready_timeout=60,
                                     ansible_connection='local', vllm_watchdog_become=False,
                                     ansible_python_interpreter=sys.executable)
    (tmp_path / 'inventory.yml').write_text(yaml.safe_dump(inventory))
    shutil.copytree(os.path.join(REPO, 'playbooks'), str(tmp_path / 'playbooks'))
    environ = env()
    environ['PATH'] = os.path.dirname(_bin('ansible-runner')) + os.pathsep + environ['PATH']
    (tmp_path / 'runner' / 'project').mkdir(parents=True)
    (tmp_path / 'runner' / 'inventory').mkdir()
    shutil.copy(str(tmp_path / 'inventory.yml'), str(tmp_path / 'runner' / 'inventory' / 'hosts.yml'))
    shutil.copy(str(tmp_path / 'playbooks' / 'watchdog.yml'), str(tmp_path / 'runner' / 'project' / 'watchdog.yml'))
    proc = subprocess.run(['bash', '-e', '-c', 'ansible-runner run runner -p watchdog.yml --ident watchdog-1\n'
                           'cat runner/artifacts/watchdog-1/status'], cwd=str(tmp_path), env=environ,
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


def test_watchdog_results_example_reads_the_fact_without_injected_facts(sim, tmp_path):
    """docs/watchdog.md's play after the watchdog, verbatim, with INJECT_FACTS_AS_VARS=False (the 2.24
    default): it reads every host's results through ansible_facts, so the busy host's line and the restarted
    host are there, and no warning is printed. Written with the bare vllm_watchdog_results it would fail here."""
    busy, stuck = busy_and_stuck(sim)
    restarter = tmp_path / 'restart.py'
    restarter.write_text(RESTART)
    hosts = {}
    for host, server in (('gb10-01', busy), ('gb10-02', stuck)):
        hosts[host] = {'vllm_url': server['url'], 'vllm_watchdog_state_dir': str(tmp_path / 'state' / host),
                       'vllm_watchdog_restart_command': [sys.executable, str(restarter), sim.base_url,
                                                         str(server['id'])]}
    inventory = {'vllm': {'hosts': hosts, 'vars': {
        'vllm_watchdog_restart_method': 'command', 'vllm_watchdog_assume_url_is_service': True,
        'vllm_watchdog_interval': 1, 'vllm_watchdog_ready_delay': 1,
        'vllm_watchdog_freeze_limit': 2,  # proof within the run's two waits
        'vllm_watchdog_ready_timeout': 60, 'vllm_watchdog_become': False, 'ansible_connection': 'local',
        'ansible_python_interpreter': sys.executable}}}
    (tmp_path / 'inventory.yml').write_text(yaml.safe_dump(inventory))
    (tmp_path / 'play.yml').write_text(examples('watchdog.md')['watchdog-results'] + '\n')
    proc = subprocess.run([_bin('ansible-playbook'), '-i', str(tmp_path / 'inventory.yml'), str(tmp_path / 'play.yml')],
                          cwd=str(tmp_path), env=env({'ANSIBLE_INJECT_FACT_VARS': 'False'}), capture_output=True,
                          text=True, timeout=600, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert 'gb10-01/vllm: busy - watchdog: no action' in output, output[-4000:]
    assert '"msg": "restarted: [\'gb10-02\']"' in output, output[-4000:]
    assert '[WARNING]' not in output and '[DEPRECATION WARNING]' not in output, output[-4000:]
