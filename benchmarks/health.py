#!/usr/bin/env python
"""Benchmark of modelops.vllm.health, measured side by side in one run.

1. Parse time of a real 50 KB /metrics capture: the collection's parser (full parse, and the
   reading the module makes) against prometheus_client's parser.
2. The cost of a `busy` verdict on a real vLLM server: wall time of one check (one wait plus two
   reads), through the module code and through ansible-playbook.
3. Inference requests a check sends to a busy server, counted by the server itself
   (http_requests_total): this collection's check against a chat-probe check (one chat request per
   check, max_tokens 1, as the watchdog of the incident did), and the chat probe's latency on a
   server whose batch is full (--max-num-seqs 2, 2 long requests running, 1 waiting).

Run: .venv/bin/python benchmarks/health.py [--json out.json]   (starts and stops real vLLM servers)
"""

import argparse
import json
import os
import statistics
import sys
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:  # run as a script: the repository root, for tests.support
    sys.path.insert(0, REPO)

from tests.support import paths as modelops_paths  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.ansible_run import health as run_health  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.ports import block  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.modelops.vllm.plugins.module_utils._http import Client  # noqa: E402
from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import parse  # noqa: E402
from ansible_collections.modelops.vllm.plugins.module_utils._readings import read_text  # noqa: E402
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge  # noqa: E402


def bench_parse(repeat=7, number=50):
    from prometheus_client.parser import text_string_to_metric_families
    path = os.path.join(modelops_paths.FIXTURES, 'busy_1.prom')
    with open(path) as handle:
        text = handle.read()

    def best(func):
        return min(timeit.repeat(func, repeat=repeat, number=number)) / number

    ours = best(lambda: parse(text))
    reading = best(lambda: read_text(text))
    oracle = best(lambda: list(text_string_to_metric_families(text)))
    return {
        'capture': os.path.basename(path), 'bytes': len(text.encode()), 'lines': text.count('\n'),
        'ours_full_ms': round(ours * 1000, 3), 'ours_reading_ms': round(reading * 1000, 3),
        'prometheus_client_ms': round(oracle * 1000, 3),
        'speedup_full': round(oracle / ours, 2), 'speedup_reading': round(oracle / reading, 2),
    }


def inference_requests(server, handlers=('/v1/completions', '/v1/chat/completions')):
    """The server's own count of answered POSTs to ``handlers`` (http_requests_total)."""
    import re
    text = server.metrics_text()
    total = 0.0
    for labels, value in re.findall(r'^http_requests_total\{([^}]*)\}\s+(\S+)', text, re.M):
        if 'method="POST"' in labels and any('handler="%s"' % h in labels for h in handlers):
            total += float(value)
    return total


def chat_probe(url, timeout=45.0):
    """What the incident's watchdog did: one real chat request per check."""
    import requests
    started = time.monotonic()
    try:
        response = requests.post(url + '/v1/chat/completions', timeout=timeout, json={
            'model': 'tiny', 'max_tokens': 1, 'temperature': 0,
            'messages': [{'role': 'user', 'content': 'are you there?'}]})
        ok = response.status_code == 200
    except requests.RequestException:
        ok = False
    return ok, time.monotonic() - started


def bench_real(checks=5, interval=1.0):
    from tests.harness import vllm_server as harness
    harness.ensure_installed()
    harness.ensure_model(32768)
    out = {}
    port = block('health-bench')[0]
    server = harness.VllmServer(port, extra_args=['--max-num-seqs', '2'])
    try:
        server.start()
        out['server_start_seconds'] = round(server.start_seconds, 1)
        # Fresh long requests for each part, so that none of them finishes (and is counted) during it.
        with server.start_completions(3, 30000) as load:
            server.wait_running(2, 1)
            # This collection's check, in-process (module code) and through ansible-playbook.
            walls, sent = [], 0.0
            for dummy in range(checks):
                before = inference_requests(server)
                started = time.monotonic()
                result = Judge(Client(server.url), interval=interval, sleep=time.sleep, clock=time.time,
                               probe_timeout=30, metrics_timeout=10).run()
                walls.append(time.monotonic() - started)
                sent += inference_requests(server) - before
                assert result['state'] == 'busy', result
            playbook_walls = []
            for dummy in range(2):
                before = inference_requests(server)
                result, run = run_health({'url': server.url, 'interval': interval})
                playbook_walls.append(run.seconds)
                sent += inference_requests(server) - before
                assert result['state'] == 'busy', result
            assert not load.done()
            out['busy_check'] = {
                'interval_s': interval, 'checks': checks + 2,
                'module_wall_s_median': round(statistics.median(walls), 3),
                'module_overhead_s_median': round(statistics.median(walls) - interval, 3),
                'ansible_playbook_wall_s_median': round(statistics.median(playbook_walls), 3),
                'inference_requests_sent': sent,
            }
            out['metrics_read_s'] = round(Client(server.url).metrics().seconds, 4)
        server.wait_idle(timeout=120)
        # The chat-probe check against the same full batch: one chat request per check, 45 s timeout.
        with server.start_completions(3, 30000) as load:
            server.wait_running(2, 1)
            latencies, oks = [], 0
            before = inference_requests(server, ('/v1/chat/completions',))
            for dummy in range(2):
                ok, seconds = chat_probe(server.url)
                latencies.append(seconds)
                oks += ok
            answered = inference_requests(server, ('/v1/chat/completions',)) - before
            out['chat_probe_check'] = {
                'checks': 2, 'inference_requests_sent': 2, 'answered_within_45s': oks,
                'answered_by_server_count': answered,
                'latency_s': [round(x, 2) for x in latencies],
                'batch_still_full': not load.done(),
            }
    finally:
        server.stop()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument('--json', help='write the results here too')
    parser.add_argument('--parse-only', action='store_true', help='skip the real-server part')
    args = parser.parse_args()
    results = {'parse': bench_parse()}
    print('parse %(capture)s (%(bytes)d bytes, %(lines)d lines): ours %(ours_full_ms)s ms full, '
          '%(ours_reading_ms)s ms reading; prometheus_client %(prometheus_client_ms)s ms; '
          'speedup %(speedup_full)sx / %(speedup_reading)sx' % results['parse'])
    if not args.parse_only:
        results.update(bench_real())
        print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, 'w') as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
