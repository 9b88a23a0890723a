"""Real vLLM 0.32 (CPU) servers: the vLLM facts the collection relies on, and the verdicts of
``modelops.vllm.health`` run through ``ansible-playbook`` exactly as users run it.

Each class is one server configuration (a start costs 20-40 s on 2 cores), stopped when the
class is done so that at most one runs at a time. The plain tests read /metrics with
plain ``requests`` and the tiny parser below (exact sample names), never with the collection's own
code, so they say what vLLM does, not what the collection believes. The ``test_module_*`` tests
drive the module in the same states and check its verdict; the server's own http_requests_total
proves what the check sent.

Run: ``pytest -m vllm tests/integration/test_real_vllm.py -v``.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time

import pytest
import requests

from tests.harness.vllm_server import descendants, long_prompt
from tests.support.ansible_run import health  # runs ansible-playbook with this checkout

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

API_KEY = "sk-modelops-test-0123456789"  # long enough that finding it in output is no coincidence
LONG = 20000  # max_tokens that keeps a request decoding for tens of seconds (ignore_eos)
PREFILL_TOKENS = 16000  # ~12-15 s of prefill with --max-num-batched-tokens 4 on this machine
# A prefill a check must land inside (a whole ansible-playbook run): over three times longer, never waited for (the
# request is dropped when the test ends), since 16000 tokens once ended before a check on a loaded CI machine.
BUSY_PREFILL_TOKENS = 50000

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


def inference_requests(srv) -> float:
    """The server's own count of answered /v1/completions and /v1/chat/completions requests."""
    text = requests.get(srv.url + "/metrics", timeout=15).text
    found = 0.0
    for labels, value in re.findall(r'^http_requests_total\{([^}]*)\}\s+(\S+)', text, re.M):
        if 'method="POST"' in labels and ('handler="/v1/completions"' in labels
                                          or 'handler="/v1/chat/completions"' in labels):
            found += float(value)
    return found


def metrics_reads(srv) -> int:
    """GET /metrics requests in the server's access log (vLLM does not count them in its metrics)."""
    with open(srv.log_path, errors="replace") as handle:
        return handle.read().count('"GET /metrics HTTP/1.1"')


def signal_module(marker: str, signum) -> list:
    """Signal the running Ansible module processes whose command line holds ``marker``, this test's own only
    (tests running beside it, and other test runs on the machine, have theirs)."""
    hit = []
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
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

    # -- modelops.vllm.health on this server ----------------------------------------------

    def test_module_idle_probes_with_the_key_and_never_shows_it(self, default_server):
        before = inference_requests(default_server)
        result, run = health({"url": default_server.url, "api_key": API_KEY, "interval": 1}, args=["-vvv"])
        assert result["state"] == "idle", result["reason"]
        assert result["probe"]["sent"] is True and result["probe"]["ok"] is True
        assert result["model"] == "tiny" and result["version"] == "0.32.0"
        assert result["ansible_facts"]["vllm_health"]["state"] == "idle"
        assert inference_requests(default_server) == before + 1  # exactly the one probe
        assert API_KEY not in run.stdout + run.stderr
        assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" in run.stdout

    def test_module_without_the_key_the_probe_is_rejected_not_stuck(self, default_server):
        result, run = health({"url": default_server.url})
        assert result["state"] == "unknown", result["reason"]
        assert "api_key" in result["reason"] and result["probe"]["status"] == 401

    def test_module_busy_sends_no_inference_request(self, default_server):
        with default_server.start_completions(3, LONG) as load:
            default_server.wait_running(3)
            before = inference_requests(default_server)
            result, run = health({"url": default_server.url, "api_key": API_KEY, "interval": 2})
            after = inference_requests(default_server)
            assert not load.done()
        assert result["state"] == "busy", result["reason"]
        assert result["probe"]["sent"] is False
        assert result["running"] == 3
        assert result["steps_per_second"] > 0 and result["generation_tokens_per_second"] > 0
        assert after == before, "the check sent an inference request to a busy server"
        assert len(result["evidence"]["reads"]) == 2
        default_server.wait_idle(timeout=60)

    def test_module_check_mode_busy(self, default_server):
        with default_server.start_completions(2, LONG):
            default_server.wait_running(2)
            result, run = health({"url": default_server.url, "api_key": API_KEY, "interval": 2},
                                 args=["--check"])
        assert run.rc == 0
        assert result["state"] == "busy" and result["changed"] is False
        default_server.wait_idle(timeout=60)

    def test_module_stuck_with_work_in_flight(self, default_server):
        with default_server.start_completions(2, LONG):
            default_server.wait_running(2)
            default_server.hang()
            try:
                before = inference_requests(default_server)
                # freeze_limit 4: the two waits are the proof (the default, 300 s, is test_long_step.py's).
                result, run = health({"url": default_server.url, "api_key": API_KEY, "interval": 2,
                                      "freeze_limit": 4})
                after = inference_requests(default_server)
            finally:
                default_server.resume()
        assert result["state"] == "stuck", result["reason"]
        assert result["probe"]["sent"] is False and after == before
        assert result["stuck_engines"] == ["0"]
        assert result["evidence"]["moved"] == [{"0": {}}, {"0": {}}]
        assert result["evidence"]["health"] == "HTTP 200"  # /health stays 200 during a hang
        default_server.wait_idle(timeout=60)

    def test_module_stuck_while_idle(self, default_server):
        default_server.wait_idle(timeout=60)
        default_server.hang()
        try:
            result, run = health({"url": default_server.url, "api_key": API_KEY, "interval": 1,
                                  "probe_timeout": 3, "freeze_limit": 2})
        finally:
            default_server.resume()
        assert result["state"] == "stuck", result["reason"]
        assert result["probe"]["attempts"] == 2 and result["probe"]["ok"] is False
        assert result["running"] == 0
        default_server.wait_idle(timeout=60)

    def test_module_restart_between_reads(self, default_server):
        """Two reads of one check straddle a real restart: `restarted`. The restart itself, read while the check is
        held: a new process start time, every counter back to zero, every _created series newer (one restart for
        both: this test took over test_restart_new_start_time_and_counters_back_to_zero's assertions, read at the
        same moment of the same kind of restart, and a real restart costs minutes of the real-vLLM group)."""
        assert_probe_ok(probe(default_server))
        a = read(default_server)
        assert total(a, "vllm:generation_tokens_total") > 0
        assert total(a, "vllm:request_success_total") > 0
        with default_server.start_completions(2, LONG):
            default_server.wait_running(2)
            outcome = {}

            def check():
                # A probe of 60 s: the new process's first completion, on a loaded machine, can outlast 20 s
                # (the verdict is then an honest `starting`, not the `restarted` asserted here).
                outcome["result"], outcome["run"] = health(
                    {"url": default_server.url, "api_key": API_KEY, "interval": 5, "probe_timeout": 60})

            # The first read sees work in flight. Then the check is paused (SIGSTOP) while the
            # server restarts, however long that takes here, and resumed: its wait is over and its
            # next read meets the new process.
            reads_before = metrics_reads(default_server)
            thread = threading.Thread(target=check)
            thread.start()
            deadline = time.monotonic() + 120
            while metrics_reads(default_server) <= reads_before and time.monotonic() < deadline:
                time.sleep(0.1)
            assert metrics_reads(default_server) > reads_before, "the check never read /metrics"
            paused = signal_module("AnsiballZ_health", signal.SIGSTOP)
            try:
                assert paused, "no running health module found"
                t0 = time.monotonic()
                default_server.restart()
                print(f"restart (stop + start + pin): {time.monotonic() - t0:.1f} s")
                b = read(default_server)  # before the check's probe: nothing has run on the new process yet
            finally:
                signal_module("AnsiballZ_health", signal.SIGCONT)
            thread.join(240)
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
        assert "result" in outcome, "the check did not end within 240 s of the restart"
        result = outcome["result"]
        assert result["state"] == "restarted", result
        assert result["restarted"] is True
        assert "process_start_time_seconds changed" in result["reason"], result
        assert result["probe"]["ok"] is True, result

    def test_module_stopped_server_is_down(self, default_server):
        default_server.stop()
        result, run = health({"url": default_server.url})
        assert result["state"] == "down", result["reason"]
        assert "connection refused" in result["reason"]


# --------------------------------------------------------------------------------------------
# --max-num-seqs 2 on the 65536-position model with 4-token prefill chunks.

@pytest.fixture(scope="class")
def small_batch_server(vllm_server_class):
    return vllm_server_class(
        max_model_len=65536,
        extra_args=["--max-num-seqs", "2", "--max-num-batched-tokens", "4"])


class TestSmallBatchServer:
    def test_full_batch_two_running_one_waiting(self, small_batch_server):
        # On a loaded 2-core machine the API server (pinned away from the reniced engine) can be slow to
        # admit the three requests, and the engine slow or fast to decode: the requests are long enough
        # (60,000 tokens: minutes of decoding) that the full batch lasts far longer than the wait for it.
        with small_batch_server.start_completions(3, 60000) as load:
            small_batch_server.wait_running(2, 1, timeout=240)
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

    def test_module_full_batch_with_a_queue_is_busy_without_probe(self, small_batch_server):
        small_batch_server.wait_idle(timeout=60)
        with small_batch_server.start_completions(3, LONG):
            small_batch_server.wait_running(2, 1, timeout=60)
            before = inference_requests(small_batch_server)
            result, run = health({"url": small_batch_server.url, "interval": 2})
            after = inference_requests(small_batch_server)
        assert result["state"] == "busy", result["reason"]
        assert result["running"] == 2 and result["waiting"] == 1
        assert result["probe"]["sent"] is False and after == before
        small_batch_server.wait_idle(timeout=60)

    def test_module_prefill_with_frozen_step_counter_is_busy(self, small_batch_server):
        small_batch_server.wait_idle(timeout=60)
        prompt = long_prompt(BUSY_PREFILL_TOKENS, seed=3)
        with small_batch_server.start_completions(1, 1, prompt=prompt, timeout=300) as load:
            small_batch_server.wait_running(1, 0, timeout=30)
            result, run = health({"url": small_batch_server.url, "interval": 2})
            prefilling = not load.done()
        assert prefilling, "the prefill ended before the check: make BUSY_PREFILL_TOKENS larger"
        assert result["state"] == "busy", result["reason"]
        # What moved in any wait of the check (on a loaded machine one 4-token step can outlast the first wait).
        moved = set(name for wait in result["evidence"]["moved"] for name in (wait.get("0") or {}))
        assert "vllm:kv_cache_usage_perc" in moved, result["evidence"]["moved"]
        assert "vllm:iteration_tokens_total_count" not in moved, "the step counter moved during a prefill"
        assert result["probe"]["sent"] is False


# --------------------------------------------------------------------------------------------
# --api-server-count 2 (multiprocess Prometheus registry).

@pytest.fixture(scope="class")
def two_api_servers(vllm_server_class):
    return vllm_server_class(api_server_count=2)


class TestTwoApiServers:
    def test_no_process_start_time_and_no_created_series(self, two_api_servers):
        srv = two_api_servers
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

    def test_module_idle_and_busy_without_start_time(self, two_api_servers):
        idle, run = health({"url": two_api_servers.url, "interval": 1})
        assert idle["state"] == "idle", idle["reason"]
        assert all(r["process_start_time"] is None for r in idle["evidence"]["reads"])
        with two_api_servers.start_completions(2, LONG):
            two_api_servers.wait_running(2)
            busy, run = health({"url": two_api_servers.url, "interval": 2})
        assert busy["state"] == "busy", busy["reason"]


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

    def test_module_no_vllm_series_is_up_by_probe(self, no_stats_server):
        result, run = health({"url": no_stats_server.url})
        assert result["state"] == "up", result["reason"]
        assert result["probe"]["ok"] is True
        assert "no vllm: series" in result["reason"]

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
