"""A fleet of 100 simulated vLLM hosts, checked through ``ansible-playbook`` with default forks (5).

Every host is a simulated vLLM server of its own (tests/simulator, loopback 22200-22499), in an
inventory with ``ansible_connection: local`` and ``vllm_url`` per host. The mix: mostly busy (a few
of them in a long chunked prefill), some idle, a few hung with work in flight, one down
(``benchmarks/fleet.py`` builds it; the benchmark measures the same fleet).

* ``playbooks/fleet_check.yml`` from the controller (one task, one thread per server) judges every
  host right, with every host's first read within one interval of the others: the waits are paid once;
* the same playbook with ``vllm_check_from=host`` (an async task per host), with a proxy in group
  ``vllm_proxies`` and a host with two instances, and ``vllm_check_fail_states``;
* ``playbooks/watchdog.yml`` (the role: an async check per host) restarts exactly the stuck hosts,
  with the ``command`` method and a restart command that restarts the simulated server (last: it
  changes the fleet).

Wall times are printed (``-s`` shows them); they are measured properly in benchmarks/fleet.py. The
only bound asserted is a generous sanity cap.
"""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.fleet import (  # noqa: E402  pylint: disable=wrong-import-position
    WATCHDOG_PLAYBOOK,
    Fleet,
    check_fleet,
    run_fleet_playbook,
)
from nginx import nginx_proxies  # noqa: E402,F401  pylint: disable=wrong-import-position,import-error,unused-import

PORT_RANGE = '22200-22499'
FLEET_SIZE = 100
# The role's path is measured at 100 hosts in benchmarks/fleet.py; here 30 hosts prove it right (CI time).
ROLE_FLEET_SIZE = 30
SANITY_CAP = 150  # seconds, for the fleet check of 100 hosts; the real numbers are in benchmarks/fleet.py

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope='module')
def fleet(sim):
    built = Fleet(sim, FLEET_SIZE).build()
    yield built
    built.delete()


def report(label, seconds):
    line = '%s: %.1f s' % (label, seconds)
    print('\n' + line)
    return line


def wrong_lines(run, expected):
    return '\n'.join('%s: expected %s, got %s (%s)' % (host, want, got, reason)
                     for host, (want, got, reason) in sorted(run.wrong(expected).items()))


def test_fleet_check_from_the_controller_judges_100_hosts_paying_the_waits_once(fleet, tmp_path):
    fleet.reset()
    run = check_fleet(fleet, 'controller', workdir=tmp_path, interval=5, sample_memory=False)
    report('fleet check, %d hosts, from the controller (one task, one thread per server), forks 5, interval 5'
           % FLEET_SIZE, run.seconds)
    assert run.rc == 0, run
    assert not run.wrong(fleet.expected), wrong_lines(run, fleet.expected)
    counts = dict((state, list(fleet.expected.values()).count(state)) for state in set(fleet.expected.values()))
    assert counts == {'busy': 83, 'idle': 12, 'stuck': 4, 'down': 1}
    # One module run for the whole fleet: the check task ran once, on the controller.
    assert run.stdout.count('TASK [Controller | check every server of the play at once]') == 1
    assert 'vLLM fleet check (controller): 100 server(s):' in run.stdout
    # The waits were paid once: every server's first read within one interval of the others.
    firsts = [v['evidence']['reads'][0]['at'] for v in run.verdicts.values() if v['evidence'].get('reads')]
    assert len(firsts) == FLEET_SIZE - 1  # the down host has no read
    assert max(firsts) - min(firsts) < 5, 'the first reads spread over %.1f s' % (max(firsts) - min(firsts))
    # Busy hosts were never sent an inference request; hung ones neither (work in flight).
    for host, state in zip(fleet.hosts, fleet.states):
        verdict = run.verdicts[host]
        assert verdict['probe']['sent'] is (state == 'idle'), (host, verdict['reason'])
        assert run.checks[host] == {host: verdict}
    assert run.seconds < SANITY_CAP, report('over the sanity cap', run.seconds)


def test_fleet_check_on_each_host_with_a_proxy_and_instances(sim, nginx_proxies, tmp_path):
    """vllm_check_from=host: an async task per host. The inventory conventions: a proxy in
    vllm_proxies (vllm_kind: proxy, checked by GET /v1/models only), a host with two instances
    (vllm_instances), and vllm_check_fail_states failing the stuck and down hosts."""
    small = Fleet(sim, 10, prefix='small-').build()
    try:
        chat, embed = sim.create_each([{'name': 'multi-chat'}, {'name': 'multi-embed', 'model': 'embed'}])
        sim.start_load(chat['id'], concurrency=1, max_tokens=100000000)
        sim.wait_for(chat['id'], lambda s: s['totals']['running'] == 1)
        busy = [s for s, state in zip(small.servers, small.states) if state == 'busy']
        proxy = nginx_proxies(busy[:2])
        proxy.mark()
        run = check_fleet(small, 'async', workdir=tmp_path, interval=5, sample_memory=False,
                          args=['-e', json.dumps({'vllm_check_fail_states': ['stuck', 'down']})],
                          extra_groups={
                              'vllm_proxies': {'proxy-01': {'vllm_url': proxy.url, 'vllm_kind': 'proxy'}},
                              'vllm': {'multi-01': {'vllm_instances': [
                                  {'name': 'chat', 'url': chat['url']},
                                  {'name': 'embed', 'url': embed['url'], 'model': 'embed'}]}},
                          })
        report('fleet check, 10 hosts + a proxy + a host with 2 instances, on each host (async)', run.seconds)
        assert not run.wrong(small.expected), wrong_lines(run, small.expected)
        assert run.verdicts['proxy-01']['state'] == 'up', run.verdicts['proxy-01']
        assert run.verdicts['proxy-01']['kind'] == 'proxy'
        assert proxy.requests_seen() == ['GET /v1/models'], proxy.access_log()
        states = dict((name, r['state']) for name, r in run.checks['multi-01'].items())
        assert states == {'multi-01/chat': 'busy', 'multi-01/embed': 'idle'}, run.checks['multi-01']
        assert run.verdicts['multi-01']['name'] == 'multi-01/chat'
        # vllm_check_fail_states: exactly the stuck and the down host failed, the others did not.
        assert run.rc == 2, run
        failed = sorted(line.split()[0] for line in run.stdout.splitlines()
                        if ' failed=1 ' in line and line.split()[0] in run.verdicts)
        assert failed == sorted(h for h, s in small.expected.items() if s in ('stuck', 'down')), run.stdout[-3000:]
        assert 'vLLM fleet check (host): 13 server(s):' in run.stdout
    finally:
        small.delete()


WATCHDOG_PLAY = """
- name: The watchdog
  ansible.builtin.import_playbook: %s

- name: Save every host's results
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write them
      ansible.builtin.copy:
        content: "{{ dict(groups['vllm'] | zip(groups['vllm'] | map('extract', hostvars, 'vllm_watchdog_results'))) | to_json }}"
        dest: "{{ out_dir }}/results.json"
        mode: "0600"
"""


@pytest.fixture
def role_fleet(sim):
    built = Fleet(sim, ROLE_FLEET_SIZE, prefix='role-').build()
    yield built
    built.delete()


def test_watchdog_role_on_a_fleet_restarts_exactly_the_stuck_ones(sim, role_fleet, tmp_path):
    """playbooks/watchdog.yml (the role checks each host in one async task), restart method
    ``command``: the restart command asks the simulator to restart that host's server."""
    fleet = role_fleet
    state_dir = tmp_path / 'state'
    extra = {}
    for host, server in zip(fleet.hosts, fleet.servers):
        extra[host] = {
            'vllm_watchdog_restart_method': 'command',
            'vllm_watchdog_restart_command': [
                'curl', '-sSf', '-X', 'POST', '-H', 'Content-Type: application/json', '-d', '{"state": "restart"}',
                '%s/servers/%s/state' % (sim.base_url, server['id'])],
            'vllm_watchdog_state_dir': str(state_dir / host),  # every "host" is this machine
            'vllm_watchdog_ready_delay': 1,
        }
    inventory = fleet.inventory(tmp_path / 'inventory.json', extra_host_vars=extra)
    seconds, rc, stdout, stderr, outputs, memory = run_fleet_playbook(
        WATCHDOG_PLAY % WATCHDOG_PLAYBOOK, inventory, args=['-e', 'vllm_watchdog_interval=5'],
        workdir=tmp_path / 'run', sample_memory=False)
    report('watchdog role, %d hosts, forks 5, interval 5, restart method command' % ROLE_FLEET_SIZE, seconds)
    assert rc == 0, '%s\n%s' % (stdout[-4000:], stderr[-2000:])
    results = outputs['results.json']
    wrong = []
    for host, state, server in zip(fleet.hosts, fleet.states, fleet.servers):
        result = (results.get(host) or [{}])[0]
        restarts = sim.get(server['id'])['restarts']
        expected_action = 'restarted' if state == 'hung' else 'none'
        if result.get('state') != fleet.expected[host] or result.get('action') != expected_action \
                or restarts != (1 if state == 'hung' else 0):
            wrong.append('%s (%s): %s, action %s, %d restart(s): %s' % (
                host, state, result.get('state'), result.get('action'), restarts, result.get('decision')))
        if state == 'hung':
            assert result['after'] == 'idle', result  # checked again after the restart
            assert list((state_dir / host / 'evidence').glob('vllm-*.json')), 'no evidence kept for %s' % host
        elif state == 'down':
            assert 'cannot say' in result['decision'], result  # no status command: never restarted
    assert not wrong, '\n'.join(wrong)
    assert 'vLLM watchdog: %d instance(s):' % ROLE_FLEET_SIZE in stdout
