"""The pause API of a dev-mode server (VLLM_SERVER_DEV_MODE=1): POST /pause, POST /resume, GET /is_paused.

Semantics from vLLM 0.32 (``EngineCoreProc.pause_scheduler``, ``Scheduler.get_num_unfinished_requests``,
``EngineCore.has_work``): keep freezes every series with the requests in flight; wait drains, then no
step runs; abort aborts everything, then as wait.  ``/is_paused`` is a utility RPC to the engine cores,
so a hung engine never answers it.
"""

import threading
import time

import pytest
import requests

from tests.simulator.client import SimulatorError
from simhelpers import samples, scrape, value

BIG = 10_000_000


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

    def alive(self):
        return self.thread.is_alive()

    def join(self, timeout=15):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "background request still running"
        return self.result


def is_paused(server, timeout=5):
    return requests.get(server["url"] + "/is_paused", timeout=timeout)


def pause(server, mode=None, timeout=10):
    query = "" if mode is None else f"?mode={mode}"
    return requests.post(server["url"] + "/pause" + query, timeout=timeout)


def resume(server, timeout=10):
    return requests.post(server["url"] + "/resume", timeout=timeout)


def post_completion(server, max_tokens=2, timeout=10):
    return requests.post(server["url"] + "/v1/completions",
                         json={"model": "tiny", "prompt": "hello", "max_tokens": max_tokens}, timeout=timeout)


def test_without_dev_mode_the_routes_do_not_exist(sim):
    server = sim.create()
    for method, path in (("GET", "/is_paused"), ("POST", "/pause"), ("POST", "/pause?mode=keep"), ("POST", "/resume")):
        resp = requests.request(method, server["url"] + path, timeout=5)
        assert resp.status_code == 404 and resp.json() == {"detail": "Not Found"}, path
    assert value(scrape(server), "http_requests_total", handler="none", status="4xx") == 4.0
    sim.configure(server["id"], dev_mode=True)          # switched at run time, no restart
    assert is_paused(server).json() == {"is_paused": False}


def test_keep_freezes_every_series_with_requests_in_flight(sim):
    server = sim.create(dev_mode=True, step_rate=100.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=2, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 2 and engine0(s)["generation_tokens"] > 4)
    resp = pause(server, "keep")                         # returns with both requests still in flight
    assert resp.status_code == 200 and resp.json() == {"status": "paused"}
    assert is_paused(server).json() == {"is_paused": True}
    steps = engine0(sim.stats(sid))["steps"]
    a = vllm_samples(scrape(server))
    held = Background(lambda: post_completion(server, timeout=20))
    st = sim.wait_for(sid, lambda s: engine0(s)["waiting"] == 1)   # queued in the scheduler...
    time.sleep(0.3)                                      # (30 steps' time at this step rate)
    b = vllm_samples(scrape(server))
    assert a == b                                        # ...and not counted: every gauge and counter froze
    assert value(b, "vllm:num_requests_running") == 2.0 and value(b, "vllm:num_requests_waiting") == 0.0
    assert engine0(sim.stats(sid))["steps"] == steps == engine0(st)["steps"]
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200
    assert held.alive()
    resp = resume(server)
    assert resp.status_code == 200 and resp.json() == {"status": "resumed"}
    assert held.join().status_code == 200               # the held request is let in and served
    assert is_paused(server).json() == {"is_paused": False}
    assert value(scrape(server), "vllm:generation_tokens_total") > value(b, "vllm:generation_tokens_total")


def test_wait_returns_only_when_drained_then_holds_new_requests(sim):
    server = sim.create(dev_mode=True, step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=2, max_tokens=150)   # about 0.75 s of decoding left
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 2)
    resp = pause(server, "wait", timeout=20)
    assert resp.status_code == 200 and resp.json() == {"status": "paused"}
    text = scrape(server)
    # it returned once both requests had finished, and the drain's last step published running 0 waiting 0
    assert value(text, "vllm:request_success_total", finished_reason="length") == 2.0
    assert value(text, "vllm:num_requests_running") == 0.0 and value(text, "vllm:num_requests_waiting") == 0.0
    assert is_paused(server).json() == {"is_paused": True}
    steps = engine0(sim.stats(sid))["steps"]
    held = Background(lambda: post_completion(server, timeout=20))
    sim.wait_for(sid, lambda s: engine0(s)["waiting"] == 1)
    time.sleep(0.2)
    after = vllm_samples(scrape(server))
    assert after == vllm_samples(text)                   # held: neither running nor waiting, nothing moved
    assert engine0(sim.stats(sid))["steps"] == steps
    resume(server)
    assert held.join().status_code == 200


def test_wait_never_returns_while_a_request_keeps_decoding(sim):
    server = sim.create(dev_mode=True, step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 1)
    with pytest.raises(requests.exceptions.ReadTimeout):
        pause(server, "wait", timeout=1.0)               # vLLM's wait has no timeout
    # the pause holds although its caller left: it is draining, new requests are held
    assert is_paused(server).json() == {"is_paused": True}
    st = sim.stats(sid)
    assert engine0(st)["pause"] == "new" and engine0(st)["running"] == 1
    sim.set_state(sid, "normal")                          # normal ends a pause too
    assert is_paused(server).json() == {"is_paused": False}


def test_abort_aborts_in_flight_requests_then_holds(sim):
    server = sim.create(dev_mode=True, step_rate=200.0, max_num_seqs=2)
    sid = server["id"]
    sim.start_load(sid, concurrency=3, max_tokens=BIG)   # 2 running, 1 waiting
    inflight = Background(lambda: post_completion(server, max_tokens=30_000, timeout=20))
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 2 and engine0(s)["reported_waiting"] == 2)
    resp = pause(server)                                  # mode defaults to abort
    assert resp.status_code == 200 and resp.json() == {"status": "paused"}
    answer = inflight.join()
    assert answer.status_code == 200 and answer.json()["choices"][0]["finish_reason"] == "abort"
    after = scrape(server)
    assert value(after, "vllm:request_success_total", finished_reason="abort") == 4.0
    assert value(after, "vllm:num_requests_running") == 0.0 and value(after, "vllm:num_requests_waiting") == 0.0
    assert value(after, "vllm:kv_cache_usage_perc") == 0.0
    # the abort outputs came in one batch with outputs: the step histogram observed a 0 once,
    # beside one observation per step with output
    st = sim.stats(sid)
    assert value(after, "vllm:iteration_tokens_total_count") == engine0(st)["output_steps"] + 1
    assert value(after, "vllm:iteration_tokens_total_bucket", le="1.0") >= 1.0
    assert is_paused(server).json() == {"is_paused": True}
    # new requests are held (in the scheduler's queue, not counted)
    sim.start_load(sid, concurrency=3, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["waiting"] == 3)
    assert vllm_samples(scrape(server)) == vllm_samples(after)
    resume(server)
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 2)


def test_a_client_giving_up_during_keep_costs_one_step(sim):
    # vLLM steps whenever the scheduler has finished requests to clear: the step publishes the gauges
    server = sim.create(dev_mode=True, step_rate=200.0, max_num_seqs=4)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["reported_running"] == 1)
    pause(server, "keep")
    frozen = engine0(sim.stats(sid))
    with pytest.raises(requests.exceptions.ReadTimeout):
        post_completion(server, timeout=0.5)              # queued behind the pause, then given up
    st = sim.wait_for(sid, lambda s: engine0(s)["request_success"]["abort"] == 1.0)
    assert engine0(st)["steps"] == frozen["steps"] + 1
    assert engine0(st)["reported_running"] == 1 and engine0(st)["generation_tokens"] == frozen["generation_tokens"]
    text = scrape(server)
    assert value(text, "vllm:num_requests_waiting") == 0.0   # published after the abort was cleared
    resume(server)


def test_pause_validation_like_fastapi(sim):
    server = sim.create(dev_mode=True)
    bad = pause(server, "bogus")
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "mode"]
    assert is_paused(server).json() == {"is_paused": False}   # nothing happened
    assert requests.get(server["url"] + "/pause", timeout=5).status_code == 405
    assert requests.post(server["url"] + "/is_paused", timeout=5).status_code == 405


def test_is_paused_never_answers_while_an_engine_hangs(sim):
    server = sim.create(dev_mode=True, engines=2, step_rate=200.0)
    sid = server["id"]
    sim.set_state(sid, "hang", engine=1)                  # the RPC goes to every engine core
    with pytest.raises(requests.exceptions.ReadTimeout):
        is_paused(server, timeout=1.0)
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200
    waiting = Background(lambda: is_paused(server, timeout=20))
    time.sleep(0.3)
    assert waiting.alive()
    sim.set_state(sid, "resume", engine=1)                # the queued RPC is answered once the engine runs
    assert waiting.join().json() == {"is_paused": False}
    # an abandoned call was never answered, so the instrumentator counted only the answered one
    assert value(scrape(server), "http_requests_total", handler="/is_paused", status="2xx") == 1.0


def test_a_pause_sent_to_a_hung_engine_applies_when_it_runs_again(sim):
    server = sim.create(dev_mode=True, step_rate=200.0)
    sid = server["id"]
    sim.set_state(sid, "hang")
    with pytest.raises(requests.exceptions.ReadTimeout):
        pause(server, "keep", timeout=0.5)
    sim.set_state(sid, "resume")
    sim.wait_for(sid, lambda s: engine0(s)["pause"] == "all")
    assert is_paused(server).json() == {"is_paused": True}


def test_is_paused_is_true_while_asleep_and_500_when_dead(sim):
    server = sim.create(dev_mode=True)
    sid = server["id"]
    sim.set_state(sid, "sleep", level=1)
    assert is_paused(server).json() == {"is_paused": True}
    sim.set_state(sid, "wake")
    assert is_paused(server).json() == {"is_paused": False}
    sim.set_state(sid, "dead")
    dead = is_paused(server)
    assert dead.status_code == 500 and dead.json()["error"].startswith("Failed to fetch pause status: ")
    assert pause(server, "keep").status_code == 500
    assert resume(server).json()["error"].startswith("Failed to resume generation: ")


def test_pause_answer_overrides_until_normal(sim):
    server = sim.create(dev_mode=True)
    sid = server["id"]
    sim.set_state(sid, "pause_answer", status=200, body='{"is_paused": "yes"}')
    resp = is_paused(server)
    assert resp.status_code == 200 and resp.text == '{"is_paused": "yes"}'
    sim.set_state(sid, "pause_answer", status=500, body="<html>oops</html>", content_type="text/html")
    resp = is_paused(server)
    assert resp.status_code == 500 and resp.headers["content-type"] == "text/html" and resp.text == "<html>oops</html>"
    sim.set_state(sid, "hang")
    sim.set_state(sid, "pause_answer")                    # default: a confident true, even from a hung engine
    assert is_paused(server).json() == {"is_paused": True}
    sim.set_state(sid, "pause_answer", delay=2.0)
    with pytest.raises(requests.exceptions.ReadTimeout):
        is_paused(server, timeout=0.5)
    sim.set_state(sid, "normal")
    assert is_paused(server).json() == {"is_paused": False}


def test_pauses_apply_to_every_engine(sim):
    server = sim.create(dev_mode=True, engines=2, step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=BIG, engine=0)
    sim.start_load(sid, concurrency=1, max_tokens=BIG, engine=1)
    sim.wait_for(sid, lambda s: all(e["reported_running"] == 1 for e in s["engines"]))
    pause(server, "keep")
    a = vllm_samples(scrape(server))
    time.sleep(0.2)
    assert vllm_samples(scrape(server)) == a
    assert [e["mode"] for e in sim.stats(sid)["engines"]] == ["frozen", "frozen"]
    resume(server)
    sim.wait_for(sid, lambda s: all(e["mode"] == "run" for e in s["engines"]))


def test_restart_ends_a_pause(sim):
    server = sim.create(dev_mode=True)
    pause(server, "keep")
    sim.set_state(server["id"], "restart", load_seconds=0)
    assert is_paused(server).json() == {"is_paused": False}


def test_state_parameters_are_checked(sim):
    server = sim.create(dev_mode=True)
    with pytest.raises(SimulatorError) as err:
        sim.set_state(server["id"], "decode_stall", second=3)
    assert err.value.status == 400
