"""The hostile-input tier (issue 26), class 29: an alert's host is still a pattern past the event source.

The collection's event source refuses ``all``, groups and patterns (test_hostile_eda.py, test_eda.py), but an
event can reach the rulebook's rule another way: a source without ``vllm_eda_inventory`` (it cannot know a group's
name), a source of one's own or ansible.eda's, which put any label in ``meta.hosts``. Whatever the alert's
``vllm_host`` says, what must hold:

* the rule and the playbook (``vllm_watchdog_one_host``) accept one inventory host by its exact name and nothing
  else: for ``all``, a group, a pattern (``gb10-*``, ``gb10-01:gb10-02``, ``!x``, ``~regex``, ``all,!x``,
  ``vllm[0]``), a name with a space or a line break around it or in another case, no server is read, no state is
  written, nothing is restarted, and a run that starts is red, in one line per host, never silently green;
* an exact name, also one with dots and dashes or an address, checks that host and no other;
* never a traceback.

Two ways in: ``ansible-playbook`` with ``-e vllm_watchdog_hosts=... -e vllm_watchdog_one_host=true`` (what the rule
runs), against an inventory of four hosts in three groups; and a real ansible-rulebook running the shipped rulebook's
rules on events of its own ``eda.builtin.generic`` source (they never passed the collection's source).

Each host is a raw vLLM-like server of its own (tests/support/hostile.py) that records every request, with a state
directory of its own and a restart command that only appends to a file.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from tests.support import ansible_run
from tests.support import eda
from tests.support import hostile as h
from tests.support import prometheus as prom

pytestmark = pytest.mark.timeout(1200)

CLASS = 29
RULEBOOK_FILE = eda.RULEBOOK_FILE

# The inventory: four hosts, one with dots and dashes, one an address; the groups vllm (all of them), rack1 (two)
# and gb10 (a group named like the hosts' prefix).
HOSTS = ('gb10-01', 'gb10-02', 'gb10.rack-1.example', '10.0.0.5')
GROUPS = {'vllm': HOSTS, 'rack1': ('gb10-01', 'gb10-02'), 'gb10': ('gb10.rack-1.example',)}

# Every spelling that is not one inventory host's exact name.
PATTERNS = (
    'all', 'ungrouped', 'vllm', 'rack1', 'gb10',                   # every host, groups
    'gb10-*', 'gb10-0?', 'gb10-0[1:2]', '*.example',               # wildcards, a range
    'gb10-01:gb10-02', 'gb10-01,gb10-02', 'gb10-01,',              # lists (a one-host list, too)
    '!gb10-01', 'all,!gb10-01', 'rack1:&vllm', 'rack1:!gb10-02',   # exclusions, intersections
    '~gb10-01', '~^gb10\\.',                                       # regular expressions that match one host
    'vllm[0]', 'vllm[0:1]', 'vllm[-1]',                            # subscripts
    'GB10-01', ' gb10-01', 'gb10-01 ', 'gb10-01\n', 'gb10-01\t',   # the name, not exactly
    '{{ "all" }}', 'localhost', '',                                # a template, the implicit localhost, nothing
)
EXACT = ('gb10-01', 'gb10.rack-1.example', '10.0.0.5')


def _inventory(tmp_path, pool, marks):
    servers, hosts = {}, {}
    for name in HOSTS:
        servers[name] = pool.vllm(name=name, metrics=h.with_start_time(h.IDLE, time.time() - 7200))
        hosts[name] = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                       'vllm_url': servers[name].url, 'vllm_watchdog_state_dir': str(tmp_path / 'state' / name),
                       'vllm_watchdog_restart_method': 'command',
                       'vllm_watchdog_restart_command': ['sh', '-c', 'echo restart >> "$0"', str(marks)]}
    children = {'vllm': {'hosts': hosts, 'vars': dict(eda.FAST, vllm_watchdog_become=False)}}
    for group, members in GROUPS.items():
        if group != 'vllm':
            children[group] = {'hosts': dict((name, {}) for name in members)}
    inventory = tmp_path / 'inventory.yml'
    inventory.write_text(yaml.safe_dump({'all': {'children': children}}))
    return servers, inventory


def _checked(servers):
    """The hosts whose server got any request."""
    return sorted(name for name, server in servers.items() if server.seen())


def _state(tmp_path):
    root = tmp_path / 'state'
    return sorted(os.listdir(root)) if root.exists() else []


class _Baseline(object):
    """What the servers had seen, the state dirs and the restarts before one run: what the run added."""

    def __init__(self, tmp_path, servers, marks):
        self.tmp_path, self.servers, self.marks = tmp_path, servers, marks
        self.seen = dict((name, len(server.seen())) for name, server in servers.items())
        self.state = _state(tmp_path)
        self.restarts = marks.read_text().count('restart') if marks.exists() else 0

    def checked(self):
        return sorted(name for name, server in self.servers.items() if len(server.seen()) > self.seen[name])

    def new_state(self):
        return sorted(set(_state(self.tmp_path)) - set(self.state))

    def new_restarts(self):
        return (self.marks.read_text().count('restart') if self.marks.exists() else 0) - self.restarts


def _play(inventory, hosts, env):
    extra = json.dumps({'vllm_watchdog_hosts': hosts, 'vllm_watchdog_one_host': True})
    return subprocess.run([ansible_run._bin('ansible-playbook'), '-i', str(inventory),  # pylint: disable=protected-access
                           'modelops.vllm.watchdog', '-e', extra], capture_output=True, text=True, env=env,
                          timeout=300, stdin=subprocess.DEVNULL, check=False)


def test_the_playbook_for_one_host_checks_nothing_for_a_pattern_and_exactly_the_host_for_its_name(tmp_path):
    marks = tmp_path / 'restarts'
    env = ansible_run.env({'ANSIBLE_STDOUT_CALLBACK': 'modelops.vllm.oneline', 'ANSIBLE_DEPRECATION_WARNINGS': 'False',
                           'ANSIBLE_ASYNC_DIR': str(tmp_path / 'async')})
    violations = h.Violations()
    with h.Servers() as pool:
        servers, inventory = _inventory(tmp_path, pool, marks)
        for pattern in PATTERNS:
            before = _Baseline(tmp_path, servers, marks)
            proc = _play(inventory, pattern, env)
            text = proc.stdout + proc.stderr
            problems = []
            if proc.returncode == 0:
                problems.append('the run is green (rc 0): a refused host must be red')
            if before.checked():
                problems.append('servers read: %s' % before.checked())
            if before.new_state() or before.new_restarts():
                problems.append('state written %s, restarts %d' % (before.new_state(), before.new_restarts()))
            # (an empty name leaves the play without hosts: Ansible refuses it before any play starts, and says so)
            why = ('which is not one inventory host', 'No host to watch', "Keyword 'hosts' is required")
            if not any(words in text for words in why):
                problems.append('no line says why: %s' % text[-600:])
            if h.traceback_in(text):
                problems.append('a traceback: %s' % text[-600:])
            violations.check(CLASS, 'playbook, one host: %r' % pattern, problems)
        for name in EXACT:
            before = _Baseline(tmp_path, servers, marks)
            proc = _play(inventory, name, env)
            problems = []
            if proc.returncode != 0:
                problems.append('rc %d: %s' % (proc.returncode, (proc.stdout + proc.stderr)[-600:]))
            if before.checked() != [name] or before.new_state() != [name]:
                problems.append('checked %s, state %s: only %s may be' % (before.checked(), before.new_state(), name))
            if before.new_restarts():
                problems.append('an idle server was restarted')
            if not proc.stdout.strip().endswith('1 host(s): 1 ok, 0 changed, 0 failed, 0 unreachable'):
                problems.append('the total is not one host: %s' % proc.stdout[-300:])
            violations.check(CLASS, 'playbook, one host: the exact name %r' % name, problems)
        assert sorted(_checked(servers)) == sorted(EXACT)  # the fourth host was never read
    violations.assert_none()


# ------------------------------------------------------------------------------------- the rule, past the source

# The events, as a source that does not check hosts makes them (ansible.eda.alertmanager with data_host_path puts
# the label in meta.hosts as it is; a source may also put none). Not strings too.
EVENT_HOSTS = ('all', 'ungrouped', 'vllm', 'rack1', 'gb10', 'gb10-*', 'gb10-01,gb10-02', 'gb10-01:gb10-02',
               '!gb10-01', 'all,!gb10-01', '~gb10-01', 'vllm[0]', 'GB10-01', ' gb10-01', 'gb10-01\n',
               'gb10-01:8000', 'localhost', '{{ "all" }}', ['gb10-01'], 7) + EXACT


def _event(host, meta=True):
    event = {'alert': {'status': 'firing', 'labels': {'alertname': eda.STUCK, 'vllm_host': host,
                                                      'instance': '10.0.0.1:8000', 'engine': '0'}}}
    if meta and isinstance(host, str):
        event['meta'] = {'hosts': host}
    return event


def _rulebook(path):
    """The shipped rulebook's rules, fed by ansible-rulebook's generic source, then a shutdown once every event
    before it was handled (the rule set runs its actions one after the other)."""
    shipped = yaml.safe_load(RULEBOOK_FILE.read_text())[0]
    events = [_event(host) for host in EVENT_HOSTS] + [_event('all', meta=False), _event('vllm', meta=False)]
    ruleset = {
        'name': 'The shipped rules, events from elsewhere',
        'hosts': 'all',
        'execution_strategy': 'sequential',
        'sources': [{'name': 'events', 'eda.builtin.generic': {
            'payload': events + [{'done': True}], 'event_delay': 0.2, 'shutdown_after': 3600}}],
        'rules': shipped['rules'] + [{'name': 'done', 'condition': 'event.done == true',
                                      'action': {'shutdown': {'delay': 0, 'message': 'every event handled'}}}],
    }
    path.write_text(yaml.safe_dump([ruleset]))
    return str(path)


class _GenericRulebook(eda.Rulebook):
    """ansible-rulebook with a rulebook whose source is ansible-rulebook's own: no webhook to wait for."""

    def _ready(self):
        return True


def test_the_rule_runs_the_watchdog_for_an_exact_host_only_whatever_reached_it(tmp_path, rulebook_tools):
    del rulebook_tools
    marks = tmp_path / 'restarts'
    env = ansible_run.env({'ANSIBLE_ASYNC_DIR': str(tmp_path / 'async')})
    violations = h.Violations()
    with h.Servers() as pool:
        servers, inventory = _inventory(tmp_path, pool, marks)
        rulebook = _GenericRulebook(tmp_path / 'rulebook', 0, inventory, env,
                                    rulebook=_rulebook(tmp_path / 'rulebook.yml'))
        with rulebook:
            prom.wait_until(lambda: not rulebook.running(), 'the rulebook to handle every event and shut down',
                            timeout=900, interval=1.0, describe=rulebook.summary)
        text = rulebook.text()
        recaps = rulebook.recaps()
        problems = []
        if 'every event handled' not in text:
            problems.append('the rulebook did not reach its last event: %s' % rulebook.summary())
        if _checked(servers) != sorted(EXACT):
            problems.append('servers read: %s, only %s may be' % (_checked(servers), sorted(EXACT)))
        if _state(tmp_path) != sorted(EXACT):
            problems.append('state written for %s' % _state(tmp_path))
        if marks.exists():
            problems.append('a restart: %s' % marks.read_text())
        # A run is green on one exact host, or red on every host it has (a refused pattern: never half of it).
        green = [recap for recap in recaps if not any(counts.get('failed') for counts in recap.values())]
        if sorted(host for recap in green for host in recap) != sorted(EXACT) or any(len(r) != 1 for r in green):
            problems.append('green runs: %s, one per exact name expected' % green)
        for recap in recaps:
            if recap not in green and not all(counts.get('failed') for counts in recap.values()):
                problems.append('a refused run is not red on every host: %s' % recap)
        if 'which is not one inventory host' not in text:
            problems.append('a group reached the playbook, which did not say why it ran nothing')
        for word in ('all', 'ungrouped'):  # the rule itself refuses what every inventory has
            if '"vllm_watchdog_hosts": "%s"' % word in text or 'vllm_watchdog_hosts is "%s"' % word in text:
                problems.append('the rule ran the playbook for %s' % word)
        if 'Traceback' in text:
            problems.append('a traceback: %s' % rulebook.log_tail())
        violations.check(CLASS, 'rulebook: events from another source (%d spellings)' % len(EVENT_HOSTS), problems)
    violations.assert_none()


@pytest.fixture(scope='module')
def rulebook_tools():
    """ansible-rulebook and its Java."""
    return eda.java_version(), eda.rulebook_bin()


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)
