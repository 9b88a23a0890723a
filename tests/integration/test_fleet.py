"""A fleet of simulated vLLM hosts reached over real SSH, checked through ``ansible-playbook`` with default forks (5).

Every inventory host has its own loopback address, reached through a real sshd, and its own simulated
vLLM server on that address (``tests/support/sshfleet.py``; ``benchmarks/fleet.py`` builds the fleet
and measures the same paths). The mix: mostly busy (a few of them in a long chunked prefill), some
idle, a few hung with work in flight, one down.

* ``playbooks/fleet_check.yml`` from the controller (one task, one thread per server) judges every
  host right, with every host's first read within one interval of the others: the waits are paid once;
* the same playbook with ``vllm_check_from=host`` (an async task on each host, over SSH), with a proxy
  in group ``vllm_proxies`` and a host with two instances, and ``vllm_check_fail_states``;
* ``playbooks/watchdog.yml`` (the role) over SSH restarts exactly the stuck hosts, with the
  ``command`` method and a restart command that restarts the simulated server, in both of its paths:
  the checks on each host (two module runs per host), and from the controller (one); the module runs
  per host are counted.

Wall times are printed (``-s`` shows them); they are measured properly in benchmarks/fleet.py. The
only bound asserted is a generous sanity cap.
"""

import json

import pytest

from benchmarks.fleet import Fleet, check_fleet
from tests.harness.nginx import nginx_proxies  # noqa: F401  pylint: disable=import-error,unused-import
from tests.support.ports import block

FLEET_SIZE = 100
# The role's path is measured at 100 hosts in benchmarks/fleet.py; here 20 hosts prove it right (CI time).
ROLE_FLEET_SIZE = 20

pytestmark = pytest.mark.timeout(1200)


def ssh_fleet(size, index, **kwargs):
    """A fleet of this module: its own sshd port, address block and simulator ports."""
    first = block('fleet')[0] + 100 * index
    return Fleet(size, ssh_port=block('fleet-sshd')[0] + index, first_address='127.0.%d.2' % (31 + index),
                 sim_port_range='%d-%d' % (first, first + 99), **kwargs)


@pytest.fixture(scope='module')
def fleet():
    built = ssh_fleet(FLEET_SIZE, 0).build()
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
    assert set(run.verdicts) == set(fleet.hosts) and set(fleet.expected.values()) == {'busy', 'idle', 'stuck', 'down'}
    # One module run for the whole fleet: the check task ran once, on the controller; no host was visited.
    assert run.stdout.count('TASK [Controller | check every server of the play at once]') == 1
    assert run.sessions['connections'] == 0, run.sessions
    assert 'vLLM fleet check (controller): 100 server(s):' in run.stdout
    # The waits were paid once: the servers were checked side by side, so every server's first read
    # came before the last read of any busy or stuck server, which waits an interval between its reads
    # (one after another, each check would end before the next one started). An idle server's reads
    # are milliseconds apart, around its probe.
    reads = [v['evidence']['reads'] for v in run.verdicts.values() if v['evidence'].get('reads')]
    assert len(reads) == FLEET_SIZE - 1  # the down host has no read
    firsts = [r[0]['at'] for r in reads]
    lasts = [v['evidence']['reads'][-1]['at'] for v in run.verdicts.values() if v['state'] in ('busy', 'stuck')]
    assert len(lasts) >= FLEET_SIZE // 2
    assert max(firsts) < min(lasts), 'checked one after another: last first read %.1f s after the first last read' \
        % (max(firsts) - min(lasts))
    # Busy hosts were never sent an inference request; hung ones neither (work in flight).
    for host, state in zip(fleet.hosts, fleet.states):
        verdict = run.verdicts[host]
        assert verdict['probe']['sent'] is (state == 'idle'), (host, verdict['reason'])
        assert run.checks[host] == {host: verdict}


def test_fleet_check_on_each_host_with_a_proxy_and_instances(nginx_proxies, tmp_path):
    """vllm_check_from=host: an async task per host, over SSH. The inventory conventions: a proxy in
    vllm_proxies (vllm_kind: proxy, checked by GET /v1/models only), a host with two instances
    (vllm_instances), and vllm_check_fail_states failing the stuck and down hosts."""
    small = ssh_fleet(10, 1).build()
    sim = small.sim
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


@pytest.fixture
def role_fleet():
    """A fresh fleet for each run of the role (a run restarts the hung servers)."""
    built = ssh_fleet(ROLE_FLEET_SIZE, 2).build()
    yield built
    built.delete()


@pytest.mark.parametrize('path', ['role', 'role-ctrl'])
def test_watchdog_role_over_ssh_restarts_exactly_the_stuck_ones(role_fleet, tmp_path, path):
    """playbooks/watchdog.yml over SSH, restart method ``command`` (the command asks the simulator to
    restart that host's server). ``role``: the checks on each host; ``role-ctrl``: from the controller."""
    fleet = role_fleet
    run = check_fleet(fleet, path, workdir=tmp_path / 'run', interval=5, sample_memory=False)
    report('watchdog role (%s), %d hosts over SSH, forks 5, interval 5, restart method command'
           % (path, ROLE_FLEET_SIZE), run.seconds)
    assert run.rc == 0, run
    wrong = []
    for host, state, server in zip(fleet.hosts, fleet.states, fleet.servers):
        result = (run.results.get(host) or [{}])[0]
        restarts = fleet.sim.get(server['id'])['restarts']
        expected_action = 'restarted' if state == 'hung' else 'none'
        if result.get('state') != fleet.expected[host] or result.get('action') != expected_action \
                or restarts != (1 if state == 'hung' else 0):
            wrong.append('%s (%s): %s, action %s, %d restart(s): %s' % (
                host, state, result.get('state'), result.get('action'), restarts, result.get('decision')))
        if state == 'hung':
            assert result['after'] == 'idle', result  # checked again after the restart
            assert result['evidence_file'], result
        elif state == 'down':
            assert 'cannot say' in result['decision'], result  # no status command: never restarted
    assert not wrong, '\n'.join(wrong)
    assert 'vLLM watchdog: %d instance(s):' % ROLE_FLEET_SIZE in run.stdout
    # The work done per healthy host: one gate run (and the background check when it runs on the host).
    healthy = [h for h, s in zip(fleet.hosts, fleet.states) if s in ('busy', 'prefill', 'idle')]
    per_host = set(run.module_runs.get(h) for h in healthy)
    assert per_host == ({2} if path == 'role' else {1}), run.module_runs
    # Every host was reached over SSH at its own address.
    assert sorted(run.sessions['by_server']) == sorted(fleet.ssh.addresses), run.sessions
    # No retry noise in a healthy pass.
    assert 'FAILED - RETRYING' not in run.stdout
