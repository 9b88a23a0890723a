"""modelops.vllm.health through ansible-playbook, against real vLLM (CPU) servers.

Every verdict here is reached by the module on a real server in the state named by the test:
idle, busy, a long chunked prefill, a full batch, stuck (SIGSTOP of the engine) with and without
work in flight, a restart between reads, --api-server-count 2, --disable-log-stats, --api-key,
and a stopped server. The server's own http_requests_total proves what the check sent.
"""

import os
import re
import signal
import threading
import time

import pytest

import vllm_server as harness
from ansible_run import health

pytestmark = pytest.mark.vllm

LONG = 30000  # tokens: a request that stays in flight for the length of a test


def requests_total(server, handler, method='POST'):
    """The server's own count of answered requests to ``handler`` (all statuses)."""
    text = server.metrics_text()
    pattern = re.compile(r'^http_requests_total\{([^}]*)\}\s+(\S+)', re.M)
    total = 0.0
    for labels, value in pattern.findall(text):
        if 'handler="%s"' % handler in labels and 'method="%s"' % method in labels:
            total += float(value)
    return total


def signal_module(marker, signum):
    """Send a signal to the running Ansible module processes whose command line has ``marker``."""
    hit = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            try:
                os.kill(int(pid), signum)
                hit.append(int(pid))
            except ProcessLookupError:
                pass
    return hit


def metrics_reads(server):
    """GET /metrics requests in the server's access log (vLLM does not count them in its metrics)."""
    with open(server.log_path, errors='replace') as handle:
        return handle.read().count('"GET /metrics HTTP/1.1"')


def inference_requests(server):
    return requests_total(server, '/v1/completions') + requests_total(server, '/v1/chat/completions')


@pytest.fixture(scope='class')
def default_server(vllm_server_class):
    return vllm_server_class()


class TestDefaultServer(object):
    """One default server, taken through idle, busy, hangs, a restart and a stop."""

    def test_idle(self, default_server):
        before = inference_requests(default_server)
        result, run = health({'url': default_server.url, 'interval': 1})
        assert result['state'] == 'idle', result['reason']
        assert result['probe']['sent'] is True and result['probe']['ok'] is True
        assert result['model'] == 'tiny' and result['version'] == '0.32.0'
        assert result['ansible_facts']['vllm_health']['state'] == 'idle'
        assert inference_requests(default_server) == before + 1  # exactly the one probe

    def test_busy_sends_no_inference_request(self, default_server):
        with default_server.start_completions(3, LONG) as load:
            default_server.wait_running(3)
            before = inference_requests(default_server)
            result, run = health({'url': default_server.url, 'interval': 2})
            after = inference_requests(default_server)
            assert not load.done()
        assert result['state'] == 'busy', result['reason']
        assert result['probe']['sent'] is False
        assert result['running'] == 3
        assert result['steps_per_second'] > 0 and result['generation_tokens_per_second'] > 0
        assert after == before, 'the check sent an inference request to a busy server'
        assert len(result['evidence']['reads']) == 2

    def test_check_mode_busy(self, default_server):
        with default_server.start_completions(2, LONG):
            default_server.wait_running(2)
            result, run = health({'url': default_server.url, 'interval': 2}, args=['--check'])
        assert run.rc == 0
        assert result['state'] == 'busy' and result['changed'] is False

    def test_stuck_with_work_in_flight(self, default_server):
        with default_server.start_completions(2, LONG):
            default_server.wait_running(2)
            default_server.hang()
            try:
                before = inference_requests(default_server)
                result, run = health({'url': default_server.url, 'interval': 2})
                after = inference_requests(default_server)
            finally:
                default_server.resume()
        assert result['state'] == 'stuck', result['reason']
        assert result['probe']['sent'] is False and after == before
        assert result['stuck_engines'] == ['0']
        assert result['evidence']['moved'] == [{'0': {}}, {'0': {}}]
        assert result['evidence']['health'] == 'HTTP 200'  # /health stays 200 during a hang

    def test_stuck_while_idle(self, default_server):
        default_server.wait_running(0, 0)
        default_server.hang()
        try:
            result, run = health({'url': default_server.url, 'interval': 1, 'probe_timeout': 3})
        finally:
            default_server.resume()
        assert result['state'] == 'stuck', result['reason']
        assert result['probe']['attempts'] == 2 and result['probe']['ok'] is False
        assert result['running'] == 0

    def test_restart_between_reads(self, default_server):
        with default_server.start_completions(2, LONG):
            default_server.wait_running(2)
            outcome = {}

            def check():
                outcome['result'], outcome['run'] = health({'url': default_server.url, 'interval': 5,
                                                            'probe_timeout': 20})

            # The first read sees work in flight. Then the check is paused (SIGSTOP) while the
            # server restarts, however long that takes here, and resumed: its wait is over and its
            # next read meets the new process.
            reads_before = metrics_reads(default_server)
            thread = threading.Thread(target=check)
            thread.start()
            deadline = time.monotonic() + 120
            while metrics_reads(default_server) <= reads_before and time.monotonic() < deadline:
                time.sleep(0.1)
            assert metrics_reads(default_server) > reads_before, 'the check never read /metrics'
            paused = signal_module('AnsiballZ_health', signal.SIGSTOP)
            try:
                assert paused, 'no running health module found'
                default_server.restart()
            finally:
                signal_module('AnsiballZ_health', signal.SIGCONT)
            thread.join(240)
        result = outcome['result']
        assert result['state'] == 'restarted', result['reason']
        assert result['restarted'] is True
        assert 'process_start_time_seconds changed' in result['reason']
        assert result['probe']['ok'] is True

    def test_stopped_server_is_down(self, default_server):
        default_server.stop()
        result, run = health({'url': default_server.url})
        assert result['state'] == 'down', result['reason']
        assert 'connection refused' in result['reason']


class TestLongPrefill(object):
    def test_prefill_with_frozen_step_counter_is_busy(self, vllm_server_class):
        server = vllm_server_class(65536, extra_args=['--max-num-batched-tokens', '4',
                                                      '--max-num-seqs', '1'])
        prompt = harness.long_prompt(30000)
        load = harness.CompletionLoad(server.url, 1, 1, prompt, ignore_eos=False)
        try:
            server.wait_running(1)
            result, run = health({'url': server.url, 'interval': 2})
            prefilling = not load.done()
        finally:
            load.cancel()
        assert prefilling, 'the prefill ended before the check: make the prompt longer'
        assert result['state'] == 'busy', result['reason']
        moved = result['evidence']['moved'][0]['0']
        assert 'vllm:kv_cache_usage_perc' in moved
        assert 'vllm:iteration_tokens_total_count' not in moved, 'the step counter moved during a prefill'
        assert result['probe']['sent'] is False


class TestFullBatch(object):
    def test_full_batch_with_a_queue_is_busy_without_probe(self, vllm_server_class):
        server = vllm_server_class(extra_args=['--max-num-seqs', '2'])
        with server.start_completions(3, LONG):
            server.wait_running(2, 1)
            before = inference_requests(server)
            result, run = health({'url': server.url, 'interval': 2})
            after = inference_requests(server)
        assert result['state'] == 'busy', result['reason']
        assert result['running'] == 2 and result['waiting'] == 1
        assert result['probe']['sent'] is False and after == before


class TestApiServerCount2(object):
    def test_multiprocess_metrics_idle_and_busy(self, vllm_server_class):
        server = vllm_server_class(api_server_count=2)
        assert 'process_start_time_seconds' not in server.metrics_text()
        idle, run = health({'url': server.url, 'interval': 1})
        assert idle['state'] == 'idle', idle['reason']
        assert all(read['process_start_time'] is None for read in idle['evidence']['reads'])
        with server.start_completions(2, LONG):
            server.wait_running(2)
            busy, run = health({'url': server.url, 'interval': 2})
        assert busy['state'] == 'busy', busy['reason']


class TestDisableLogStats(object):
    def test_no_vllm_series_is_up_by_probe(self, vllm_server_class):
        server = vllm_server_class(extra_args=['--disable-log-stats'])
        assert 'vllm:' not in server.metrics_text()
        result, run = health({'url': server.url})
        assert result['state'] == 'up', result['reason']
        assert result['probe']['ok'] is True
        assert 'no vllm: series' in result['reason']


class TestApiKey(object):
    KEY = 'sk-modelops-test-0123456789'

    def test_probe_uses_the_key_and_never_shows_it(self, vllm_server_class):
        server = vllm_server_class(api_key=self.KEY)
        result, run = health({'url': server.url, 'api_key': self.KEY}, args=['-vvv'])
        assert result['state'] == 'idle', result['reason']
        assert result['probe']['status'] == 200
        assert self.KEY not in run.stdout and self.KEY not in run.stderr
        assert 'VALUE_SPECIFIED_IN_NO_LOG_PARAMETER' in run.stdout

    def test_without_the_key_the_probe_is_rejected_not_stuck(self, vllm_server_class):
        server = vllm_server_class.servers[0]
        result, run = health({'url': server.url})
        assert result['state'] == 'unknown', result['reason']
        assert 'api_key' in result['reason'] and result['probe']['status'] == 401
