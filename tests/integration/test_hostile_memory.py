"""The hostile-input tier (issue 8), class 6: bounded memory and time whatever arrives within
``metrics_max_bytes``.

``plugins/modules/health.py`` runs as a process, exactly as Ansible runs it on the host (an args
file, ``PYTHONPATH`` = the collections root), against a raw loopback server that sends the input.
The peak RSS of that process comes from ``os.wait4``. For every input:

* peak RSS < 200 MB;
* the result (the module's JSON) < 1 MB;
* the check ends within ``2*interval + 2*probe_timeout + 8*metrics_timeout`` (+15 s start-up);
* no traceback, and never ``stuck``.
"""

import json
import os
import threading

import pytest

from tests.support.paths import COLLECTIONS

from tests.support import hostile as h

INTERVAL, PROBE_TIMEOUT, METRICS_TIMEOUT = 0.5, 2.0, 2.0
DEADLINE = 2 * INTERVAL + 2 * PROBE_TIMEOUT + 8 * METRICS_TIMEOUT
STARTUP = 15.0
MAX_RSS = 200 * 1000 * 1000
MAX_RESULT = 1024 * 1024
CAP = 16 * 1024 * 1024  # metrics_max_bytes, the default
BIG = 15 * 1000 * 1000


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)


def _idle_head():
    return h.vllm_text({'0': h.engine_numbers(running=0)}, start=1796000000.0)


def huge_label(series='vllm:num_requests_running{engine="0",model_name="tiny",x="%s"} 0\n', char='a'):
    return _idle_head().replace('vllm:num_requests_running{engine="0",model_name="tiny"} 0.0\n', '') + \
        series % (char * BIG)


def many_engines(count=100000):
    lines = ['# TYPE vllm:num_requests_running gauge']
    lines += ['vllm:num_requests_running{engine="%d",model_name="tiny"} 0' % i for i in range(count)]
    lines += ['# TYPE vllm:generation_tokens counter']
    lines += ['vllm:generation_tokens_total{engine="%d",model_name="tiny"} %d' % (i, i) for i in range(count)]
    return '\n'.join(lines) + '\n'


def tiny_lines(size=CAP - 64 * 1024):
    head = _idle_head()
    return head + 'a 1\n' * ((size - len(head)) // 4)


def many_labels(count=200000):
    pairs = ','.join('l%d="v"' % i for i in range(count))
    return _idle_head() + 'python_info{%s} 1\n' % pairs


def escapes():
    return _idle_head() + 'python_info{version="%s"} 1\n' % ('\\"\\n\\\\' * (BIG // 6))


def big_json_list(count=350000):
    """About 15 MB of JSON (under the cap) in 700,000 small objects (a probe or /v1/models answer)."""
    return json.dumps({'object': 'list', 'data': [{'id': 'm%d' % i} for i in range(count)],
                       'choices': [{'finish_reason': None}] * count})


def nan_gauges(count=300000):
    """One engine, 300,000 running samples (distinct labels), every one NaN."""
    return _idle_head() + ''.join('vllm:num_requests_running{engine="0",x="%d"} NaN\n' % i for i in range(count))


def near_max_lines(count=240, width=65000):
    """240 engines, each running line padded to just under a 64 KB line (about 15.6 MB)."""
    return ''.join('vllm:num_requests_running{engine="%d",model_name="tiny",pad="%s"} 0\n' % (i, 'p' * width)
                   for i in range(count))


def gzip_bomb_over_cap():
    return h.gzip_bytes(b'a 1\n' * ((CAP * 4) // 4))


CASES = [
    # (name, routes of the vLLM-like server; built when the case runs, to keep this process small)
    ('one 15 MB label value on the running gauge', lambda: dict(metrics=huge_label())),
    ('one 15 MB label value, gzip (15 KB on the wire)', lambda: dict(metrics=h.respond_gzip(huge_label()))),
    ('one 15 MB label value on a series the check does not use',
     lambda: dict(metrics=huge_label('python_info{version="%s"} 1\n'))),
    ('one 15 MB model_name label value',
     lambda: dict(metrics=huge_label('vllm:num_requests_waiting{engine="0",model_name="%s"} 0\n'))),
    ('one 15 MB label value of escapes (\\" \\n \\\\)', lambda: dict(metrics=escapes())),
    ('100,000 engine label values', lambda: dict(metrics=many_engines())),
    ('100,000 engine label values, gzip', lambda: dict(metrics=h.respond_gzip(many_engines()))),
    ('4 million one-sample lines (16 MB)', lambda: dict(metrics=tiny_lines())),
    ('300,000 NaN running samples on one engine', lambda: dict(metrics=nan_gauges())),
    ('240 engines, each line padded to 65,000 characters', lambda: dict(metrics=near_max_lines())),
    ('200,000 labels on one line', lambda: dict(metrics=many_labels())),
    ('a gzip body that inflates past the cap', lambda: dict(metrics=h.respond(
        200, gzip_bomb_over_cap(), 'text/plain; version=0.0.4', headers=[('Content-Encoding', 'gzip')]))),
    ('a 15 MB probe answer of 700,000 small objects',
     lambda: dict(metrics=_idle_head(), probe=h.respond(200, big_json_list(), 'application/json'))),
    ('a 15 MB /v1/models answer (no model_name label)',
     lambda: dict(metrics=h.vllm_text({'0': h.engine_numbers(running=0)}, start=1796000000.0, model=None),
                  models=h.respond(200, big_json_list(), 'application/json'))),
    ('a 15 MB /version answer',
     lambda: dict(version=h.respond(200, json.dumps({'version': '0.32.0', 'x': 'a' * BIG}), 'application/json'))),
]


def _measure(make_routes, tmp_path, env):
    with h.vllm_server(name='memory', **make_routes()) as server:
        return h.run_module('health', {'url': server.url, 'interval': INTERVAL, 'probe_timeout': PROBE_TIMEOUT,
                                       'metrics_timeout': METRICS_TIMEOUT}, str(tmp_path), env=env,
                            timeout=DEADLINE + STARTUP)


def _problems(run, baseline):
    result = run.result if isinstance(run.result, dict) else {}
    problems = []
    if run.timed_out:
        problems.append('did not end within %.0f s (the deadline %.0f s + %.0f s start-up): killed'
                        % (DEADLINE + STARTUP, DEADLINE, STARTUP))
    if run.max_rss_bytes >= MAX_RSS:
        problems.append('peak RSS %.0f MB (limit 200 MB; a healthy check takes %.0f MB)'
                        % (run.max_rss_bytes / 1e6, baseline.max_rss_bytes / 1e6))
    if len(run.stdout) >= MAX_RESULT:
        problems.append('the result is %.1f MB (limit 1 MB)' % (len(run.stdout) / 1e6))
    marker = h.traceback_in(run.stdout, run.stderr)
    if marker or h.has_exception_key(result) or 'MemoryError' in run.stderr:
        problems.append('a traceback (%s): %s' % (marker or 'exception', (run.stderr or run.stdout)[-300:]))
    if not run.timed_out and not result:
        problems.append('no JSON result (rc %s): %s' % (run.returncode, (run.stderr or run.stdout)[-300:]))
    if result.get('state') == 'stuck':
        problems.append('stuck: %s' % result.get('reason'))
    if result.get('failed') and not result.get('msg'):
        problems.append('failed without a message')
    return problems


def test_memory_and_time_are_bounded_whatever_arrives(tmp_path):
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    for name in ('HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'http_proxy', 'https_proxy', 'all_proxy'):
        env.pop(name, None)
    baseline = _measure(dict, tmp_path, env)
    assert (baseline.result or {}).get('state') == 'idle', baseline
    assert baseline.max_rss_bytes < MAX_RSS, baseline
    runs = [None] * len(CASES)

    def work(indexes):
        for index in indexes:
            runs[index] = _measure(CASES[index][1], tmp_path, env)

    # Two at a time (2 cores): each module is its own process, so its peak RSS is its own.
    threads = [threading.Thread(target=work, args=(range(i, len(CASES), 2),)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    violations = h.Violations()
    for (name, dummy), run in zip(CASES, runs):
        violations.check(6, name, _problems(run, baseline) if run is not None else ['the case did not run'])
    violations.assert_none()
