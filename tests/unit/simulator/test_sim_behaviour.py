"""Behaviour of the simulated servers: queueing, progress, prefill, hangs, restarts, counting."""

import threading
import time

import pytest
import requests

from simhelpers import progress_view, samples, scrape, value, worker_port_range
from tests.support.ports import block

BIG = 10_000_000  # max_tokens that never finish during a test (load generator)
LONG_HTTP = 30_000  # the same over HTTP, within max_model_len


def vllm_samples(text):
    return {k: v for k, v in samples(text).items() if k[0].startswith("vllm:")}


def engine0(stats):
    return stats["engines"][0]


class Background:
    """A request sent from a thread; ``result`` is the response or the exception."""

    def __init__(self, fn):
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except requests.RequestException as exc:
            self.result = exc

    def join(self, timeout=15):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "background request still running"
        return self.result


def post_completion(server, max_tokens=1, timeout=10, prompt="hello", **extra):
    return requests.post(server["url"] + "/v1/completions",
                         json=dict({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                                   **extra), timeout=timeout)


def test_queue_at_max_num_seqs(sim):
    server = sim.create(max_num_seqs=2, step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=5, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 2 and engine0(s)["reported_waiting"] == 3)
    text = scrape(server)
    assert value(text, "vllm:num_requests_running") == 2.0
    assert value(text, "vllm:num_requests_waiting") == 3.0
    assert value(text, "vllm:num_requests_waiting_by_reason", reason="capacity") == 3.0
    assert value(text, "vllm:num_requests_waiting_by_reason", reason="deferred") == 0.0
    # a probe joins the queue (FIFO, behind the three) and waits there until it gives up
    probe = Background(lambda: post_completion(server, timeout=1.5))
    sim.wait_for(sid, lambda s: engine0(s)["reported_waiting"] == 4)
    assert isinstance(probe.join(), requests.exceptions.ReadTimeout)
    # the client went away: the engine drops it at its next step (counted as an abort)
    st = sim.wait_for(sid, lambda s: engine0(s)["reported_waiting"] == 3)
    assert engine0(st)["request_success"]["abort"] == 1.0


def test_queued_request_is_served_when_a_slot_frees(sim):
    server = sim.create(max_num_seqs=1, step_rate=400.0)
    sim.start_load(server["id"], concurrency=1, max_tokens=200)
    sim.wait_for(server["id"], lambda s: engine0(s)["reported_running"] == 1)
    resp = post_completion(server, max_tokens=2)
    assert resp.status_code == 200
    st = sim.stats(server["id"])
    assert engine0(st)["request_success"]["length"] == 2.0  # the load request finished first (FIFO)


def test_steps_and_tokens_rise_while_busy(sim):
    server = sim.create(step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=3, max_tokens=BIG, prompt_tokens=7)
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 3 and engine0(s)["generation_tokens"] >= 6)
    a = samples(scrape(server))
    st = sim.stats(sid)          # taken after the scrape: every step counted below is between a and b
    sim.wait_for(sid, lambda s: engine0(s)["output_steps"] >= engine0(st)["output_steps"] + 10)
    b = samples(scrape(server))

    def v(smp, name):
        return value(smp, name)
    d_count = v(b, "vllm:iteration_tokens_total_count") - v(a, "vllm:iteration_tokens_total_count")
    d_sum = v(b, "vllm:iteration_tokens_total_sum") - v(a, "vllm:iteration_tokens_total_sum")
    d_gen = v(b, "vllm:generation_tokens_total") - v(a, "vllm:generation_tokens_total")
    assert d_count >= 10
    assert d_sum == 3 * d_count == d_gen  # three running requests, one token each per step
    assert v(b, "vllm:prompt_tokens_total") == v(a, "vllm:prompt_tokens_total") == 21.0
    assert value(b, "vllm:iteration_tokens_total_bucket", le="+Inf") == v(b, "vllm:iteration_tokens_total_count")
    assert value(b, "vllm:kv_cache_usage_perc") > 0


def test_token_rate_is_bounded_by_step_rate(sim):
    server = sim.create(step_rate=50.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=BIG)
    st0 = sim.wait_for(sid, lambda s: engine0(s)["generation_tokens"] >= 1)
    t0 = time.monotonic()
    time.sleep(0.4)
    st1 = sim.stats(sid)
    elapsed = time.monotonic() - t0
    made = engine0(st1)["generation_tokens"] - engine0(st0)["generation_tokens"]
    assert 0 < made <= elapsed * 50.0 + 2


def test_long_prefill_moves_only_the_kv_cache(sim):
    # 30,000 prompt tokens in 64-token chunks: about 470 silent steps
    server = sim.create(step_rate=400.0, chunk_tokens=64, max_model_len=32768)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=1, prompt_tokens=30000)
    sim.wait_for(sid, lambda s: engine0(s)["prefilling"] == 1 and engine0(s)["steps"] >= 2
                 and engine0(s)["reported_running"] == 1)
    a = scrape(server)
    st = sim.stats(sid)
    sim.wait_for(sid, lambda s: engine0(s)["steps"] >= engine0(st)["steps"] + 10)
    b = scrape(server)
    assert engine0(sim.stats(sid))["prefilling"] == 1, "the prefill ended too soon for this test"
    before, after = progress_view(a), progress_view(b)
    moved = {k for k in before if before[k] != after[k]}
    assert moved == {("vllm:kv_cache_usage_perc", (("engine", "0"), ("model_name", "tiny")))}
    assert value(b, "vllm:kv_cache_usage_perc") > value(a, "vllm:kv_cache_usage_perc")
    assert value(b, "vllm:num_requests_running") == 1.0
    assert value(b, "vllm:iteration_tokens_total_count") == 0.0
    assert value(b, "vllm:prompt_tokens_total") == 0.0
    # when the first token comes out, the whole prompt is counted in one step
    sim.wait_for(sid, lambda s: engine0(s)["request_success"]["length"] == 1.0)
    c = scrape(server)
    assert value(c, "vllm:prompt_tokens_total") == 30000.0
    assert value(c, "vllm:iteration_tokens_total_count") == 1.0
    assert value(c, "vllm:iteration_tokens_total_sum") == 30001.0
    assert value(c, "vllm:kv_cache_usage_perc") == 0.0


def test_hang_freezes_everything_but_health(sim):
    server = sim.create(max_num_seqs=2, step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=3, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 2 and engine0(s)["generation_tokens"] > 4)
    sim.set_state(sid, "hang")
    steps = engine0(sim.stats(sid))["steps"]
    a = vllm_samples(scrape(server))
    probe = Background(lambda: post_completion(server, timeout=1.5))
    st = sim.wait_for(sid, lambda s: engine0(s)["inbox"] == 1)   # arrived, but the engine never saw it
    assert engine0(st)["steps"] == steps
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200
    assert requests.get(server["url"] + "/v1/models", timeout=5).status_code == 200
    b = vllm_samples(scrape(server))
    assert a == b                                               # counters and gauges alike
    assert value(b, "vllm:num_requests_running") == 2.0
    assert value(b, "vllm:num_requests_waiting") == 1.0         # the probe did not raise waiting
    assert isinstance(probe.join(), requests.exceptions.ReadTimeout)
    assert engine0(sim.stats(sid))["steps"] == steps
    sim.set_state(sid, "resume")
    sim.wait_for(sid, lambda s: engine0(s)["output_steps"] > 0 and engine0(s)["steps"] >= steps + 3)
    c = vllm_samples(scrape(server))
    assert value(c, "vllm:iteration_tokens_total_count") > value(a, "vllm:iteration_tokens_total_count")


def test_hang_while_idle_reads_like_idle(sim):
    server = sim.create(step_rate=400.0)
    sid = server["id"]
    assert post_completion(server).status_code == 200
    sim.set_state(sid, "hang")
    a = vllm_samples(scrape(server))
    with pytest.raises(requests.exceptions.ReadTimeout):
        post_completion(server, timeout=0.5)
    b = vllm_samples(scrape(server))
    assert a == b
    assert value(b, "vllm:num_requests_running") == 0.0 and value(b, "vllm:num_requests_waiting") == 0.0
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200
    sim.set_state(sid, "resume")
    assert post_completion(server).status_code == 200


def test_restart_resets_counters_and_start_time(sim):
    server = sim.create(step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=2, max_tokens=BIG)
    inflight = Background(lambda: post_completion(server, max_tokens=LONG_HTTP, timeout=20))
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 3)
    before = samples(scrape(server))
    assert value(before, "vllm:generation_tokens_total") > 0
    info = sim.set_state(sid, "restart", load_seconds=60)
    assert info["status"] == "loading"
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(server["url"] + "/health", timeout=2)      # the port does not listen while loading
    result = inflight.join()
    assert isinstance(result, requests.Response) and result.status_code == 500
    sim.set_state(sid, "restart", load_seconds=0)                # (a second restart, to skip the wait)
    after = samples(scrape(server))
    assert value(after, "process_start_time_seconds") > value(before, "process_start_time_seconds")
    assert value(after, "vllm:generation_tokens_created") > value(before, "vllm:generation_tokens_created")
    assert value(after, "vllm:iteration_tokens_total_count") == 0.0
    assert value(after, "vllm:generation_tokens_total") == 0.0
    assert value(after, "vllm:request_success_total") == 0.0
    assert value(after, "http_requests_total") is None
    load = sim.stats(sid)["load"][0]
    assert load["failed"] == 2 and load["active"] == 0


def test_restart_listens_again_after_load_time(sim):
    server = sim.create(load_seconds=0.3)
    sid = server["id"]
    start = value(scrape(server), "process_start_time_seconds")
    assert sim.set_state(sid, "restart")["status"] == "loading"
    sim.wait_for(sid, lambda s: s["status"] == "listening")
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200
    assert value(scrape(server), "process_start_time_seconds") > start


def test_restart_can_close_connections_instead(sim):
    server = sim.create(step_rate=200.0, restart_inflight="close")
    inflight = Background(lambda: post_completion(server, max_tokens=LONG_HTTP, timeout=20))
    sim.wait_for(server["id"], lambda s: engine0(s)["reported_running"] == 1)
    sim.set_state(server["id"], "restart", load_seconds=0)
    assert isinstance(inflight.join(), requests.exceptions.ConnectionError)


def test_repeating_load_comes_back_after_restart(sim):
    server = sim.create(step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=2, max_tokens=20, repeat=True)
    sim.wait_for(sid, lambda s: engine0(s)["request_success"]["length"] >= 2)
    sim.set_state(sid, "restart", load_seconds=0)
    sim.wait_for(sid, lambda s: engine0(s)["request_success"]["length"] >= 1)
    sim.stop_load(sid)
    st = sim.wait_for(sid, lambda s: engine0(s)["running"] == 0 and engine0(s)["waiting"] == 0)
    assert st["restarts"] == 1


def test_request_counting(sim):
    server = sim.create(step_rate=400.0)
    sid = server["id"]
    url = server["url"]
    sim.start_load(sid, concurrency=2, max_tokens=3)     # not counted: it does not come over HTTP
    requests.get(url + "/metrics", headers={"Accept": "text/plain"}, timeout=5)
    requests.get(url + "/metrics", timeout=5)
    requests.get(url + "/health", timeout=5)
    requests.get(url + "/v1/models?x=1", timeout=5)
    post_completion(server)
    requests.get(url + "/nowhere", timeout=5)
    assert sim.request_counts(sid) == {"GET /metrics": 2, "GET /health": 1, "GET /v1/models": 1,
                                       "POST /v1/completions": 1, "GET /nowhere": 1}
    log = sim.requests(sid)
    assert [e["path"] for e in log] == ["/metrics", "/metrics", "/health", "/v1/models", "/v1/completions", "/nowhere"]
    assert log[0]["headers"]["accept"] == "text/plain"
    assert log[3]["query"] == "x=1"
    assert '"max_tokens": 1' in log[4]["body"] and log[4]["status"] == 200
    assert sim.stats(sid)["responses"]["GET /nowhere 404"] == 1
    sim.reset_counts(sid)
    assert sim.request_counts(sid) == {}
    # the unmatched path is what the instrumentator calls handler "none"
    assert value(scrape(server), "http_requests_total", handler="none", status="4xx") == 1.0


def test_dead_engine(sim):
    server = sim.create(step_rate=200.0)
    sid = server["id"]
    inflight = Background(lambda: post_completion(server, max_tokens=LONG_HTTP, timeout=20))
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 1)
    sim.set_state(sid, "dead")
    assert inflight.join().status_code == 500
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 503
    assert post_completion(server).status_code == 500
    text = scrape(server)
    assert value(text, "http_requests_total", handler="/v1/completions", status="5xx") == 2.0
    sim.set_state(sid, "dead", exit_after=0.1)
    sim.wait_for(sid, lambda s: s["status"] == "exited")
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(server["url"] + "/health", timeout=2)
    sim.set_state(sid, "restart", load_seconds=0)
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200


def test_stop_closes_the_port(sim):
    server = sim.create()
    sim.set_state(server["id"], "stop")
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(server["url"] + "/health", timeout=2)
    sim.set_state(server["id"], "restart", load_seconds=0)
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200


def test_sleep_and_wake(sim):
    server = sim.create(step_rate=400.0)
    sid = server["id"]
    sim.set_state(sid, "sleep", level=1)
    text = scrape(server)
    assert value(text, "vllm:engine_sleep_state", sleep_state="awake") == 0.0
    assert value(text, "vllm:engine_sleep_state", sleep_state="weights_offloaded") == 1.0
    sim.set_state(sid, "sleep", level=2)
    assert value(scrape(server), "vllm:engine_sleep_state", sleep_state="discard_all") == 1.0
    sim.set_state(sid, "wake")
    assert value(scrape(server), "vllm:engine_sleep_state", sleep_state="awake") == 1.0
    assert post_completion(server).status_code == 200


def test_one_hung_engine_of_two(sim):
    server = sim.create(engines=2, step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=BIG, engine=0)
    sim.start_load(sid, concurrency=1, max_tokens=BIG, engine=1)
    sim.wait_for(sid, lambda s: all(e["reported_running"] == 1 and e["generation_tokens"] > 1 for e in s["engines"]))
    sim.set_state(sid, "hang", engine=1)
    a = scrape(server)
    st = sim.stats(sid)
    sim.wait_for(sid, lambda s: s["engines"][0]["output_steps"] >= st["engines"][0]["output_steps"] + 5)
    b = scrape(server)
    assert progress_view(a, engine=1) == progress_view(b, engine=1)
    assert progress_view(a, engine=0) != progress_view(b, engine=0)
    assert sim.get(sid)["state"]["hung_engines"] == [1]


def test_v0_idle_ticks(sim):
    server = sim.create(v0_idle_ticks=0.05, flavor="v0")
    sim.wait_for(server["id"], lambda s: engine0(s)["iteration_tokens_count"] >= 2)
    text = scrape(server)
    assert value(text, "vllm:iteration_tokens_total_count") >= 2
    assert value(text, "vllm:iteration_tokens_total_sum") == 0.0
    assert value(text, "vllm:generation_tokens_total") == 0.0
    assert value(text, "vllm:num_requests_running") == 0.0


def test_deferred_requests_wait_without_steps(sim):
    server = sim.create(step_rate=400.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=2, deferred_seconds=0.5)
    st = sim.wait_for(sid, lambda s: engine0(s)["reported_waiting"] == 1)
    text = scrape(server)
    assert value(text, "vllm:num_requests_waiting_by_reason", reason="deferred") == 1.0
    assert value(text, "vllm:num_requests_waiting_by_reason", reason="capacity") == 0.0
    assert engine0(st)["steps"] == 0
    sim.wait_for(sid, lambda s: engine0(s)["request_success"]["length"] == 1.0)


def test_preemption_when_the_kv_cache_is_full(sim):
    server = sim.create(step_rate=400.0, kv_block_size=16, kv_num_blocks=8)
    sid = server["id"]
    sim.start_load(sid, concurrency=2, max_tokens=200, prompt_tokens=16)
    sim.wait_for(sid, lambda s: engine0(s)["preemptions"] >= 1)
    assert value(scrape(server), "vllm:num_preemptions_total") >= 1.0


def test_mfu_counters_move_during_prefill(sim):
    server = sim.create(step_rate=400.0, chunk_tokens=64, mfu_metrics=True)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=1, prompt_tokens=30000)
    sim.wait_for(sid, lambda s: engine0(s)["prefilling"] == 1 and engine0(s)["steps"] >= 1)
    a = scrape(server)
    st = sim.stats(sid)
    sim.wait_for(sid, lambda s: engine0(s)["steps"] >= engine0(st)["steps"] + 3)
    b = scrape(server)
    assert value(b, "vllm:estimated_flops_per_gpu_total") > value(a, "vllm:estimated_flops_per_gpu_total")
    assert value(b, "vllm:iteration_tokens_total_count") == 0.0


def test_each_xdist_worker_has_ports_no_other_worker_takes():
    """A restarting server frees its port for a moment: no other worker's simulator may take it."""
    first, last = block("simulator-tests")
    for count in (1, 2, 3, 4):
        ranges = [worker_port_range(environ={"PYTEST_XDIST_WORKER": "gw%d" % i, "PYTEST_XDIST_WORKER_COUNT": str(count)})
                  for i in range(count)]
        ports = [set(range(int(r.split("-")[0]), int(r.split("-")[1]) + 1)) for r in ranges]
        assert all(first <= min(p) and max(p) <= last and len(p) >= 100 for p in ports), ranges
        assert sum(len(p) for p in ports) == len(set().union(*ports)), ranges   # disjoint
    assert worker_port_range(environ={}) == "%d-%d" % (first, last)   # without xdist: all of it
