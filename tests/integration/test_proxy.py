"""A real nginx (least_conn) in front of vLLM backends, checked through ``ansible-playbook``.

The rule: a proxy is checked by ``GET /v1/models`` only; its backends are checked directly. nginx's
own access log (method, URI, status, upstream address) proves what went through the proxy, and the
simulator's per-server request counts (or the real server's ``http_requests_total``) agree.

Backends are simulated vLLM servers (tests/simulator, loopback 22000-22199), plus one real vLLM
(CPU) server in the last test. nginx listens on 22800-22999 (tests/harness/nginx.py).
"""

import collections
import re
import time

import pytest

from tests.support.ansible_run import health
from tests.harness.nginx import nginx_proxies  # noqa: E402,F401  pylint: disable=wrong-import-position,import-error,unused-import
from tests.support.ports import span

PORT_RANGE = span('proxy')
LOAD = {'concurrency': 2, 'max_tokens': 100000000}
LB_WORDS = 'looks like a load balancer'


# ------------------------------------------------------------------------------------------- fixtures

@pytest.fixture
def sim(simulator):
    """The simulator; every server a test created is deleted after it."""
    yield simulator
    simulator.delete_all()


def backends(sim, count, busy=0, **options):
    """``count`` simulated backends, one after the other so that their start times differ
    (``process_start_time_seconds`` has a 10 ms resolution); the first ``busy`` get work in flight."""
    servers = []
    for dummy in range(count):
        servers.append(sim.create(**options))
        time.sleep(0.03)
    for server in servers[:busy]:
        sim.start_load(server['id'], **LOAD)
    for server in servers[:busy]:
        sim.wait_for(server['id'], lambda s: s['totals']['running'] == LOAD['concurrency']
                     and s['totals']['generation_tokens'] > 0)
    if not options.get('multiprocess'):
        starts = [sim.stats(s['id'])['process_start_time_seconds'] for s in servers]
        assert len(set(starts)) == len(starts), 'the backends must have different start times: %s' % starts
    for server in servers:
        sim.reset_counts(server['id'])
    return servers


def counts_by_port(sim, servers):
    """``{"127.0.0.1:PORT": {"GET /v1/models": n, ...}}``: what each backend received."""
    return dict(('127.0.0.1:%d' % s['port'], sim.request_counts(s['id'])) for s in servers)


def upstream_counts(entries):
    """``{"127.0.0.1:PORT": {"GET /v1/models": n}}`` from nginx's access log (the upstream that answered)."""
    out = collections.defaultdict(collections.Counter)
    for entry in entries:
        if entry['upstreams']:
            out[entry['upstreams'][-1]]['%s %s' % (entry['method'], entry['uri'])] += 1
    return dict((k, dict(v)) for k, v in out.items())


# ------------------------------------------------------------------------------------------- kind: proxy

def test_proxy_is_up_and_checked_by_v1_models_only(sim, nginx_proxies):
    servers = backends(sim, 3, busy=2)
    proxy = nginx_proxies(servers)
    proxy.mark()
    results = []
    for dummy in range(3):  # least_conn rotates: every backend answers once
        result, run = health({'url': proxy.url, 'kind': 'proxy'})
        assert run.rc == 0, run
        results.append(result)
    for result in results:
        assert result['state'] == 'up', result['reason']
        assert result['models'] == ['tiny'] and result['model'] == 'tiny'
        assert result['kind'] == 'proxy'
        assert result['probe']['sent'] is False
        assert result['running'] is None and result['restarted'] is False
    entries = proxy.wait_logged(3)
    assert proxy.requests_seen() == ['GET /v1/models'] * 3, entries
    assert all(e['status'] == 200 for e in entries)
    # The simulator saw exactly what nginx says it sent to each backend, and nothing else.
    seen = counts_by_port(sim, servers)
    assert upstream_counts(entries) == dict((k, v) for k, v in seen.items() if v), (entries, seen)
    assert sum(sum(v.values()) for v in seen.values()) == 3
    assert all(set(v) <= {'GET /v1/models'} for v in seen.values()), seen


def test_proxy_with_every_backend_gone_is_down(sim, nginx_proxies):
    servers = backends(sim, 3, busy=1)
    proxy = nginx_proxies(servers)
    for server in servers:
        sim.set_state(server['id'], 'stop')
    proxy.mark()
    stopped, run = health({'url': proxy.url, 'kind': 'proxy'})
    assert stopped['state'] == 'down', stopped['reason']
    assert '502' in stopped['reason']
    # Restarting, loading weights for a long time: the ports do not listen either.
    for server in servers:
        sim.set_state(server['id'], 'restart', load_seconds=600)
    loading, run = health({'url': proxy.url, 'kind': 'proxy'})
    assert loading['state'] == 'down', loading['reason']
    entries = proxy.wait_logged(2)
    assert proxy.requests_seen() == ['GET /v1/models'] * 2, entries
    assert [e['status'] for e in entries] == [502, 502]
    assert set(entries[0]['upstreams']) <= set('127.0.0.1:%d' % s['port'] for s in servers)


def test_one_dead_backend_proxy_up_backend_down_in_one_task(sim, nginx_proxies):
    busy, idle, dead = backends(sim, 3, busy=1)
    proxy = nginx_proxies([busy, idle, dead])
    sim.set_state(dead['id'], 'stop')
    proxy.mark()
    result, run = health({'servers': [
        {'name': 'proxy', 'url': proxy.url, 'kind': 'proxy'},
        {'name': 'busy', 'url': busy['url']},
        {'name': 'idle', 'url': idle['url']},
        {'name': 'dead', 'url': dead['url']},
    ], 'interval': 2})
    assert run.rc == 0, run
    assert result['states'] == {'proxy': 'up', 'busy': 'busy', 'idle': 'idle', 'dead': 'down'}, result['states']
    by_name = dict((r['name'], r) for r in result['servers'])
    assert by_name['proxy']['models'] == ['tiny']
    assert 'connection refused' in by_name['dead']['reason']
    assert set(result['ansible_facts']['vllm_health_servers']) == {'proxy', 'busy', 'idle', 'dead'}
    # Through the proxy: one GET /v1/models. The busy backend got no inference request; the idle one
    # got exactly its one-token probe, sent to it directly.
    assert proxy.requests_seen() == ['GET /v1/models'], proxy.access_log()
    assert proxy.access_log()[0]['status'] == 200
    assert 'POST /v1/completions' not in sim.request_counts(busy['id'])
    assert sim.request_counts(idle['id']).get('POST /v1/completions') == 1


# ------------------------------------------------------------------------------------------- a backend check at a proxy

def check_through_proxy(proxy, runs, **options):
    """Run a *backend* check at the proxy ``runs`` times; returns [(result, access log of that run)]."""
    out = []
    for dummy in range(runs):
        proxy.mark()
        result, run = health(dict({'url': proxy.url, 'interval': 1, 'probe_timeout': 5}, **options))
        assert run.rc == 0, run
        time.sleep(0.2)
        out.append((result, proxy.access_log()))
    return out


def describe(outcomes):
    return '\n'.join('%s: %s | %s' % (r['state'], r['reason'], [(e['uri'], e['upstream']) for e in log])
                     for r, log in outcomes)


def test_backend_check_at_a_proxy_of_busy_backends_says_load_balancer(sim, nginx_proxies):
    servers = backends(sim, 3, busy=3)
    proxy = nginx_proxies(servers)
    outcomes = check_through_proxy(proxy, 4)
    for result, log in outcomes:
        assert result['state'] not in ('restarted', 'stuck', 'starting'), describe(outcomes)
        assert result['state'] == 'unknown' and LB_WORDS in result['reason'], describe(outcomes)
        assert result['restarted'] is False
        assert result['probe']['sent'] is False
        # busy backends: the check sent no inference request through the proxy
        assert set(e['uri'] for e in log) <= {'/version', '/metrics'}, describe(outcomes)
        assert len(set(e['upstream'] for e in log if e['uri'] == '/metrics')) >= 2, describe(outcomes)


def test_backend_check_at_a_proxy_of_two_busy_backends(sim, nginx_proxies):
    servers = backends(sim, 2, busy=2)
    proxy = nginx_proxies(servers)
    outcomes = check_through_proxy(proxy, 3)
    for result, log in outcomes:
        assert result['state'] == 'unknown' and LB_WORDS in result['reason'], describe(outcomes)


def test_backend_check_at_a_proxy_of_idle_backends_is_never_alarming(sim, nginx_proxies):
    """With idle backends the check reads /metrics, sends its probe, and reads /metrics again to
    make sure the probe was answered by the process it read. Behind a proxy the reads land on
    different backends: the verdict is 'unknown' (a load balancer), never restarted, stuck or down;
    only when both reads happen to land on the same backend is it 'idle'.

    Idle backends behind least_conn are taken in turn, and the two /metrics reads are three
    requests apart (/metrics, /is_paused, the probe, /metrics): with three backends they always
    land on the same one. Two backends make them land on different ones, as a real proxy would."""
    servers = backends(sim, 2)
    proxy = nginx_proxies(servers)
    outcomes = check_through_proxy(proxy, 3)
    for result, log in outcomes:
        assert result['state'] in ('idle', 'unknown'), describe(outcomes)
        assert result['restarted'] is False
        reads = [e['upstream'] for e in log if e['uri'] == '/metrics']
        if len(set(reads[:2])) > 1:
            assert result['state'] == 'unknown' and LB_WORDS in result['reason'], describe(outcomes)
    assert any(r['state'] == 'unknown' for r, log in outcomes), describe(outcomes)


def test_backend_check_at_a_proxy_of_four_busy_backends_says_load_balancer(sim, nginx_proxies):
    servers = backends(sim, 4, busy=4)
    proxy = nginx_proxies(servers)
    outcomes = check_through_proxy(proxy, 4)
    for result, log in outcomes:
        assert result['state'] == 'unknown' and LB_WORDS in result['reason'], describe(outcomes)


def test_backend_check_at_a_proxy_of_multiprocess_backends_says_load_balancer(sim, nginx_proxies):
    servers = []
    for dummy in range(3):  # loads started seconds apart: the counters of the backends differ
        server = sim.create(multiprocess=True)
        sim.start_load(server['id'], **LOAD)
        servers.append(server)
        time.sleep(2)
    proxy = nginx_proxies(servers)
    outcomes = check_through_proxy(proxy, 3)
    for result, log in outcomes:
        assert result['state'] == 'unknown' and LB_WORDS in result['reason'], describe(outcomes)


# ------------------------------------------------------------------------------------------- a real vLLM behind nginx

def http_requests(server, handler, method):
    """The real server's own count of answered requests (``http_requests_total``)."""
    total = 0.0
    for labels, value in re.findall(r'^http_requests_total\{([^}]*)\}\s+(\S+)', server.metrics_text(), re.M):
        if 'handler="%s"' % handler in labels and 'method="%s"' % method in labels:
            total += float(value)
    return total


@pytest.mark.vllm
def test_real_vllm_and_a_simulated_backend_behind_nginx(sim, nginx_proxies, vllm_server):
    real = vllm_server()
    simulated = backends(sim, 1)[0]
    proxy = nginx_proxies([real.url, simulated])
    models_before = http_requests(real, '/v1/models', 'GET')
    completions_before = http_requests(real, '/v1/completions', 'POST')
    proxy.mark()
    results = [health({'url': proxy.url, 'kind': 'proxy'})[0] for dummy in range(2)]
    for result in results:
        assert result['state'] == 'up', result['reason']
        assert result['models'] == ['tiny']
    entries = proxy.wait_logged(2)
    assert proxy.requests_seen() == ['GET /v1/models'] * 2, entries
    assert all(e['status'] == 200 for e in entries)
    real_address = real.url.split('://', 1)[1]
    answered_by = [e['upstreams'][-1] for e in entries]
    assert sorted(answered_by) == sorted([real_address, '127.0.0.1:%d' % simulated['port']]), entries
    # The real server's own counters agree: one GET /v1/models, no inference request.
    assert http_requests(real, '/v1/models', 'GET') == models_before + 1
    assert http_requests(real, '/v1/completions', 'POST') == completions_before
    assert sim.request_counts(simulated['id']) == {'GET /v1/models': 1}
