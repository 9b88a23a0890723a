"""The copy-paste examples of the docs, run verbatim against simulated vLLM servers.

A fenced block right after a ``<!-- example: NAME -->`` line in docs/*.md is an example; the
tests below take it from the doc as it is written, so the docs and what works cannot drift apart.
"""

import os
import re
import shlex
import subprocess

import pytest
import yaml

from ansible_run import _bin, env
from modelops_paths import REPO
from tests.simulator.client import run_simulator

EXAMPLE = re.compile(r'<!-- example: ([\w-]+) -->\s*\n```\w*\n(.*?)\n```', re.S)


def examples(doc):
    with open(os.path.join(REPO, 'docs', doc)) as handle:
        return dict(EXAMPLE.findall(handle.read()))


@pytest.fixture(scope='module')
def sim():
    with run_simulator(port_range='19700-19799') as client:
        yield client


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
