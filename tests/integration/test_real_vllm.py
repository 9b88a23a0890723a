"""The vLLM facts the collection relies on, checked against a real vLLM 0.32 (CPU) server.

Each class is one server configuration (a start costs 20-40 s on 2 cores), stopped when the
class is done so that at most one runs at a time. /metrics is read with plain ``requests`` and
the tiny parser below (exact sample names), never with the collection's own code, so these
tests say what vLLM does, not what the collection believes.

Run: ``pytest -m vllm tests/integration/test_real_vllm.py -v``.
"""
from __future__ import annotations

import os
import re
import socket
import time

import pytest
import requests

from vllm_server import long_prompt  # tests/harness, put on sys.path by conftest.py

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

API_KEY = "secret"
LONG = 20000  # max_tokens that keeps a request decoding for tens of seconds (ignore_eos)
PREFILL_TOKENS = 16000  # ~12-15 s of prefill with --max-num-batched-tokens 4 on this machine

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?[ \t]+(\S+)(?:[ \t]+\S+)?$")


def parse(text: str) -> dict:
    """{(sample name, label string): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def total(samples: dict, name: str):
    """Sum of every sample of exactly ``name`` (over the ``engine`` label), or None if none."""
    vals = [v for (n, _labels), v in samples.items() if n == name]
    return sum(vals) if vals else None


def vllm_samples(samples: dict) -> dict:
    return {k: v for k, v in samples.items() if k[0].startswith("vllm:")}


def read(srv, timeout: float = 15) -> dict:
    r = requests.get(srv.url + "/metrics", headers={"Accept": "text/plain"}, timeout=timeout)
    assert r.status_code == 200, r.text[:300]
    return parse(r.text)


def running(s):
    return total(s, "vllm:num_requests_running")


def waiting(s):
    return total(s, "vllm:num_requests_waiting")


def steps(s):
    return total(s, "vllm:iteration_tokens_total_count")


def probe(srv, timeout: float = 30, **kw) -> requests.Response:
    """The one-token probe of the design: max_tokens 1, temperature 0."""
    return srv.completion("the river", max_tokens=1, temperature=0, timeout=timeout, **kw)


def assert_probe_ok(resp: requests.Response) -> None:
    assert resp.status_code == 200, resp.text[:300]
    body = resp.json()
    assert body["usage"]["completion_tokens"] >= 1, body
    assert body["choices"][0]["finish_reason"], body


def connection_refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) == 111  # ECONNREFUSED


# --------------------------------------------------------------------------------------------
# One default server (with --api-key): idle, busy, hangs, api key, then restart (last).

@pytest.fixture(scope="class")
def default_server(vllm_server_class):
    return vllm_server_class(api_key=API_KEY)


class TestDefaultServer:
    def test_idle_reads_zero_and_probe_answers(self, default_server):
        s = read(default_server)
        assert running(s) == 0
        assert waiting(s) == 0
        t0 = time.monotonic()
        resp = probe(default_server)
        print(f"probe on idle server: {time.monotonic() - t0:.3f} s")
        assert_probe_ok(resp)

    def test_long_prompt_has_the_asked_token_count(self, default_server):
        before = total(read(default_server), "vllm:prompt_tokens_total")
        prompt = long_prompt(3000, seed=1)
        assert default_server.count_tokens(prompt) == 3000
        resp = default_server.completion(prompt, max_tokens=1, timeout=60)
        assert resp.status_code == 200, resp.text[:300]
        assert resp.json()["usage"]["prompt_tokens"] == 3000
        after = total(read(default_server), "vllm:prompt_tokens_total")
        assert after - before == 3000

    def test_busy_three_running_and_steps_rise(self, default_server):
        with default_server.start_completions(3, LONG, ignore_eos=True) as load:
            default_server.wait_running(3, timeout=60)
            t0 = time.monotonic()
            a = read(default_server)
            time.sleep(1.5)
            b = read(default_server)
            dt = time.monotonic() - t0
            assert not load.done(), load.results
        assert running(a) == 3 and running(b) == 3
        assert waiting(a) == 0 and waiting(b) == 0
        assert steps(b) > steps(a), (steps(a), steps(b))
        gen = total(b, "vllm:generation_tokens_total") - total(a, "vllm:generation_tokens_total")
        assert gen > 0
        print(f"busy: {(steps(b) - steps(a)) / dt:.0f} steps/s, {gen / dt:.0f} tokens/s")
        default_server.wait_idle(timeout=60)  # cancelled requests are aborted by vLLM

    def test_hang_while_busy_freezes_every_vllm_series(self, default_server):
        with default_server.start_completions(3, LONG) as load:
            default_server.wait_running(3, timeout=60)
            default_server.hang()
            try:
                time.sleep(1)  # let the last stats the engine sent reach the API server
                a = read(default_server)
                time.sleep(2)
                t0 = time.monotonic()
                b = read(default_server)
                metrics_seconds = time.monotonic() - t0
                t0 = time.monotonic()
                health = requests.get(default_server.url + "/health", timeout=10)
                health_seconds = time.monotonic() - t0
                models = requests.get(default_server.url + "/v1/models",
                                      headers=default_server.headers(), timeout=10)
            finally:
                default_server.resume()
            assert not load.done(), load.results
        print(f"hung: /metrics {metrics_seconds * 1000:.1f} ms, /health "
              f"{health_seconds * 1000:.1f} ms")
        assert vllm_samples(a), "no vllm:* samples"
        assert vllm_samples(a) == vllm_samples(b), {
            k: (a.get(k), b.get(k)) for k in set(vllm_samples(a)) | set(vllm_samples(b))
            if a.get(k) != b.get(k)}
        assert running(b) == 3
        assert health.status_code == 200
        assert models.status_code == 200
        default_server.wait_idle(timeout=60)

    def test_hang_while_idle_reads_idle_and_probe_times_out(self, default_server):
        default_server.wait_idle(timeout=60)
        default_server.hang()
        try:
            time.sleep(0.5)
            a = read(default_server)
            t0 = time.monotonic()
            with pytest.raises(requests.Timeout):
                probe(default_server, timeout=5)
            waited = time.monotonic() - t0
            b = read(default_server)
            health = requests.get(default_server.url + "/health", timeout=10)
        finally:
            default_server.resume()
        assert running(a) == 0 and waiting(a) == 0
        # The probe that arrived during the hang raised neither gauge: it reads like idle.
        assert running(b) == 0 and waiting(b) == 0
        assert vllm_samples(a) == vllm_samples(b)
        assert health.status_code == 200
        assert 4.5 <= waited < 10
        # Once resumed the engine answers again.
        assert_probe_ok(probe(default_server, timeout=30))
        default_server.wait_idle(timeout=30)

    def test_api_key_guards_v1_but_not_metrics(self, default_server):
        url = default_server.url
        m = requests.get(url + "/metrics", timeout=10)
        assert m.status_code == 200 and "vllm:num_requests_running" in m.text
        assert requests.get(url + "/health", timeout=10).status_code == 200
        body = {"model": "tiny", "prompt": "the", "max_tokens": 1, "temperature": 0}
        assert requests.post(url + "/v1/completions", json=body, timeout=10).status_code == 401
        wrong = {"Authorization": "Bearer wrong"}
        assert requests.post(url + "/v1/completions", json=body, headers=wrong,
                             timeout=10).status_code == 401
        assert requests.get(url + "/v1/models", timeout=10).status_code == 401
        assert_probe_ok(probe(default_server))  # with the key

    def test_restart_new_start_time_and_counters_back_to_zero(self, default_server):
        assert_probe_ok(probe(default_server))
        a = read(default_server)
        assert total(a, "vllm:generation_tokens_total") > 0
        assert total(a, "vllm:request_success_total") > 0
        t0 = time.monotonic()
        default_server.restart()
        print(f"restart (stop + start + pin): {time.monotonic() - t0:.1f} s")
        b = read(default_server)
        assert b[("process_start_time_seconds", "")] > a[("process_start_time_seconds", "")]
        for name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total",
                     "vllm:request_success_total", "vllm:iteration_tokens_total_count",
                     "vllm:iteration_tokens_total_sum", "vllm:num_preemptions_total"):
            assert total(b, name) == 0, name
        created_a = {k: v for k, v in a.items() if k[0].endswith("_created")}
        created_b = {k: v for k, v in b.items() if k[0].endswith("_created")}
        assert created_a and created_b
        common = set(created_a) & set(created_b)
        assert common and all(created_b[k] > created_a[k] for k in common)
        assert_probe_ok(probe(default_server))


# --------------------------------------------------------------------------------------------
# --max-num-seqs 2 on the 65536-position model with 4-token prefill chunks.

@pytest.fixture(scope="class")
def small_batch_server(vllm_server_class):
    return vllm_server_class(
        max_model_len=65536,
        extra_args=["--max-num-seqs", "2", "--max-num-batched-tokens", "4"])


class TestSmallBatchServer:
    def test_full_batch_two_running_one_waiting(self, small_batch_server):
        with small_batch_server.start_completions(3, LONG) as load:
            small_batch_server.wait_running(2, 1, timeout=60)
            a = read(small_batch_server)
            time.sleep(1.5)
            b = read(small_batch_server)
            assert not load.done(), load.results
        for s in (a, b):
            assert running(s) == 2 and waiting(s) == 1
            assert s.get(("vllm:num_requests_waiting_by_reason",
                          '{engine="0",model_name="tiny",reason="capacity"}')) == 1
        assert steps(b) > steps(a)
        small_batch_server.wait_idle(timeout=60)

    def test_long_chunked_prefill_moves_only_the_kv_cache(self, small_batch_server):
        small_batch_server.wait_idle(timeout=60)
        prompt = long_prompt(PREFILL_TOKENS, seed=2)
        assert small_batch_server.count_tokens(prompt) == PREFILL_TOKENS
        before = read(small_batch_server)
        t0 = time.monotonic()
        with small_batch_server.start_completions(1, 1, prompt=prompt, timeout=300) as load:
            small_batch_server.wait_running(1, 0, timeout=30)
            reads = []
            for _read in range(3):
                time.sleep(1.5)
                reads.append(read(small_batch_server))
            assert not load.done(), "prefill ended before the third read"
            assert load.join(300), "prefill did not finish in 300 s"
            prefill_seconds = time.monotonic() - t0
        print(f"prefill of {PREFILL_TOKENS} tokens in 4-token chunks: {prefill_seconds:.1f} s")
        result = load.results[0]
        assert result.get("_status") == 200, result
        assert result["usage"]["prompt_tokens"] == PREFILL_TOKENS
        assert result["usage"]["completion_tokens"] == 1
        kv = [total(s, "vllm:kv_cache_usage_perc") for s in reads]
        for s in reads:
            assert running(s) == 1
            assert waiting(s) == 0
            for name in ("vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
                         "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                         "vllm:request_success_total"):
                assert total(s, name) == total(before, name), name
        assert kv[0] < kv[1] < kv[2], kv
        print(f"kv_cache_usage_perc during prefill: {kv}")
        after = read(small_batch_server)
        assert (total(after, "vllm:prompt_tokens_total")
                - total(before, "vllm:prompt_tokens_total")) == PREFILL_TOKENS
        assert steps(after) > steps(before)


# --------------------------------------------------------------------------------------------
# --api-server-count 2 (multiprocess Prometheus registry).

class TestTwoApiServers:
    def test_no_process_start_time_and_no_created_series(self, vllm_server):
        srv = vllm_server(api_server_count=2)
        fresh = requests.get(srv.url + "/metrics", timeout=15).text
        assert "# TYPE vllm:num_requests_running gauge" in fresh
        # A fresh multiprocess server has no running/waiting sample until the engine reports.
        assert running(parse(fresh)) is None and waiting(parse(fresh)) is None
        assert_probe_ok(probe(srv))
        text = requests.get(srv.url + "/metrics", timeout=15).text
        s = parse(text)
        assert running(s) == 0
        assert total(s, "vllm:generation_tokens_total") >= 1
        assert not [k for k in s if k[0] == "process_start_time_seconds"]
        assert not [k for k in s if k[0].endswith("_created")]
        assert not re.search(r"^process_start_time_seconds", text, re.M)


# --------------------------------------------------------------------------------------------
# --disable-log-stats, then the same server stopped.

@pytest.fixture(scope="class")
def no_stats_server(vllm_server_class):
    return vllm_server_class(extra_args=["--disable-log-stats"])


class TestNoStatsServer:
    def test_disable_log_stats_has_no_vllm_series(self, no_stats_server):
        assert_probe_ok(probe(no_stats_server))
        r = requests.get(no_stats_server.url + "/metrics", timeout=15)
        assert r.status_code == 200
        assert not vllm_samples(parse(r.text))
        assert "vllm:" not in r.text

    def test_stopped_server_refuses_connections(self, no_stats_server):
        port = no_stats_server.port
        pids = [no_stats_server.pid, *no_stats_server.engine_pids()]
        assert len(pids) >= 2, pids
        t0 = time.monotonic()
        no_stats_server.stop()
        print(f"stop: {time.monotonic() - t0:.1f} s")
        assert connection_refused(port)
        with pytest.raises(requests.ConnectionError):
            requests.get(no_stats_server.url + "/metrics", timeout=5)
        assert not [p for p in pids if os.path.exists(f"/proc/{p}")], pids
