"""Field failures the simulator plays on cue: an RL weight transfer, decode stalls, a re-prefill loop.

* ``weight_update``: vLLM 0.32's ``WeightOperationMetrics`` (entrypoints/rl/online/metrics.py); the
  engine does not step while an operation is in flight.
* ``decode_stall``: vllm#45094 (decode deadlock while prefill runs at full speed; for ever) and
  vllm#54919 (decode starved for minutes, then fine: ``seconds``).
* ``reprefill_loop``: vllm#52520 (a request prefilled to 99 %, preempted, prefilled again, for ever).
"""

import time

import pytest
import requests

from tests.simulator.client import SimulatorError
from simhelpers import samples, scrape, value

BIG = 10_000_000


def engine0(stats):
    return stats["engines"][0]


def vllm_samples(text):
    return {k: v for k, v in samples(text).items() if k[0].startswith("vllm:")}


def finished_normally(text):
    return sum(value(text, "vllm:request_success_total", finished_reason=r) for r in ("stop", "length"))


# -- weight_update ----------------------------------------------------------------------------------

def test_weight_update_freezes_the_engine_while_in_flight(sim):
    server = sim.create(step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=2, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["generation_tokens"] > 4)
    sim.set_state(sid, "weight_update", operations={"update": 1})
    steps = engine0(sim.stats(sid))["steps"]
    a = scrape(server)
    time.sleep(0.3)
    b = scrape(server)
    assert vllm_samples(a) == vllm_samples(b)
    assert value(b, "vllm:rl_weight_update_operations_in_flight", operation="update") == 1.0
    assert value(b, "vllm:num_requests_running") == 2.0
    assert engine0(sim.stats(sid))["steps"] == steps
    assert sim.stats(sid)["state"]["weight_operations"] == {"update": 1}
    sim.set_state(sid, "weight_update", operations={})
    sim.wait_for(sid, lambda s: engine0(s)["steps"] > steps + 2)
    c = scrape(server)
    assert value(c, "vllm:rl_weight_update_operations_in_flight", operation="update") == 0.0
    assert value(c, "vllm:rl_weight_update_operation_duration_seconds_count", operation="update") == 1.0
    # it lasted at least the 0.3 s above
    assert value(c, "vllm:rl_weight_update_operation_duration_seconds_sum", operation="update") >= 0.3
    assert value(c, "vllm:generation_tokens_total") > value(b, "vllm:generation_tokens_total")


def test_weight_update_counts_each_operation(sim):
    server = sim.create()
    sid = server["id"]
    sim.set_state(sid, "weight_update", operations={"start": 1, "update": 2})
    sim.set_state(sid, "weight_update", operations={"update": 1})        # start ended, one update ended
    text = scrape(server)
    assert value(text, "vllm:rl_weight_update_operations_in_flight", operation="start") == 0.0
    assert value(text, "vllm:rl_weight_update_operations_in_flight", operation="update") == 1.0
    assert value(text, "vllm:rl_weight_update_operation_duration_seconds_count", operation="start") == 1.0
    assert value(text, "vllm:rl_weight_update_operation_duration_seconds_count", operation="update") == 1.0
    sim.set_state(sid, "normal")                                          # ends the one left
    text = scrape(server)
    assert value(text, "vllm:rl_weight_update_operations_in_flight") == 0.0
    for bad in ({"reload": 1}, {"update": -1}, {"update": 1.5}, ["update"]):
        with pytest.raises(SimulatorError) as err:
            sim.set_state(sid, "weight_update", operations=bad)
        assert err.value.status == 400


# -- decode_stall -----------------------------------------------------------------------------------

def test_decode_stall_prefills_and_aborts_but_never_generates(sim):
    # vllm#45094: steps and prompt tokens rise, the KV gauge moves, no token, no request finishes normally
    server = sim.create(step_rate=200.0, max_num_seqs=4, chunk_tokens=64, kv_num_blocks=512)
    sid = server["id"]
    sim.start_load(sid, concurrency=4, max_tokens=BIG, prompt_tokens=200)
    sim.wait_for(sid, lambda s: engine0(s)["generation_tokens"] >= 8)
    sim.set_state(sid, "decode_stall", abort_after=0.3)
    time.sleep(0.05)
    sim.start_load(sid, concurrency=4, max_tokens=BIG, prompt_tokens=200, repeat=True)   # replaces the aborted
    reads = []
    for dummy in range(8):
        reads.append(scrape(server))
        time.sleep(0.25)
    first, last = reads[1], reads[-1]
    assert value(last, "vllm:generation_tokens_total") == value(first, "vllm:generation_tokens_total")
    assert finished_normally(last) == finished_normally(first)
    assert value(last, "vllm:prompt_tokens_total") > value(first, "vllm:prompt_tokens_total")
    assert value(last, "vllm:iteration_tokens_total_count") > value(first, "vllm:iteration_tokens_total_count")
    assert (value(last, "vllm:request_success_total", finished_reason="abort")
            > value(first, "vllm:request_success_total", finished_reason="abort"))
    assert value(last, "vllm:time_to_first_token_seconds_count") == value(first, "vllm:time_to_first_token_seconds_count")
    assert all(value(r, "vllm:num_requests_running") > 0 for r in reads)
    assert len({value(r, "vllm:kv_cache_usage_perc") for r in reads}) > 1
    # each completed prefill was observed with its prompt tokens and no generated token
    st = engine0(sim.stats(sid))
    assert st["stall_aborts"] > 0
    assert requests.get(server["url"] + "/health", timeout=5).status_code == 200
    assert requests.get(server["url"] + "/v1/models", timeout=5).status_code == 200


def test_decode_stall_without_aborts_freezes_decoding_only(sim):
    server = sim.create(step_rate=200.0, chunk_tokens=32)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["generation_tokens"] >= 3)
    sim.set_state(sid, "decode_stall", abort_after=0)
    sim.start_load(sid, concurrency=1, max_tokens=BIG, prompt_tokens=300)   # 10 chunks, then no first token
    st = sim.wait_for(sid, lambda s: engine0(s)["prompt_tokens"] == 316.0)
    time.sleep(0.2)
    st2 = engine0(sim.stats(sid))
    assert st2["generation_tokens"] == engine0(st)["generation_tokens"]
    assert st2["steps"] > engine0(st)["steps"]          # it keeps stepping
    assert st2["request_success"]["abort"] == 0.0 and st2["running"] == 2


def test_decode_starvation_ends_by_itself(sim):
    # vllm#54919: a stall with `seconds` ends, decoding resumes; the prompt is never counted twice
    server = sim.create(step_rate=200.0, chunk_tokens=32)
    sid = server["id"]
    sim.set_state(sid, "decode_stall", seconds=1.0, abort_after=0)
    sim.start_load(sid, concurrency=1, max_tokens=5, prompt_tokens=100)
    stalled = sim.wait_for(sid, lambda s: engine0(s)["prompt_tokens"] == 100.0)
    assert engine0(stalled)["generation_tokens"] == 0.0 and engine0(stalled)["decode_stall"] is not None
    st = sim.wait_for(sid, lambda s: engine0(s)["request_success"]["length"] == 1.0, timeout=10)
    assert engine0(st)["decode_stall"] is None
    text = scrape(server)
    assert value(text, "vllm:prompt_tokens_total") == 100.0
    assert value(text, "vllm:generation_tokens_total") == 5.0
    assert value(text, "vllm:time_to_first_token_seconds_count") == 1.0
    assert value(text, "vllm:time_to_first_token_seconds_sum") >= 0.8       # the first token came after the stall
    # the prefill's observation (100) plus one per generated token
    assert value(text, "vllm:iteration_tokens_total_sum") == 105.0


def test_decode_stall_on_one_engine_of_two(sim):
    server = sim.create(engines=2, step_rate=200.0)
    sid = server["id"]
    sim.start_load(sid, concurrency=1, max_tokens=BIG, engine=0)
    sim.start_load(sid, concurrency=1, max_tokens=BIG, engine=1)
    sim.wait_for(sid, lambda s: all(e["generation_tokens"] > 2 for e in s["engines"]))
    sim.set_state(sid, "decode_stall", engine=1, abort_after=0)
    a = sim.stats(sid)["engines"]
    time.sleep(0.3)
    b = sim.stats(sid)["engines"]
    assert b[0]["generation_tokens"] > a[0]["generation_tokens"]
    assert b[1]["generation_tokens"] == a[1]["generation_tokens"]
    assert sim.stats(sid)["state"]["decode_stall_engines"] == [1]


def test_decode_stall_can_survive_a_restart(sim):
    # vllm#45094 survived `docker restart`
    server = sim.create(step_rate=200.0)
    sid = server["id"]
    sim.set_state(sid, "decode_stall", abort_after=0, after_restart=True)
    sim.set_state(sid, "restart", load_seconds=0)
    sim.start_load(sid, concurrency=1, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["prompt_tokens"] == 16.0)
    time.sleep(0.2)
    assert engine0(sim.stats(sid))["generation_tokens"] == 0.0
    sim.set_state(sid, "normal")
    sim.wait_for(sid, lambda s: engine0(s)["generation_tokens"] > 0)
    sim.set_state(sid, "restart", load_seconds=0)
    sim.start_load(sid, concurrency=1, max_tokens=BIG)
    sim.wait_for(sid, lambda s: engine0(s)["generation_tokens"] > 0)


# -- reprefill_loop ---------------------------------------------------------------------------------

def reprefill_server(sim, **options):
    # 1000-token prompt in 100-token chunks: 990 tokens (10 chunks), then the preempting step
    opts = dict(step_rate=100.0, chunk_tokens=100, kv_num_blocks=64, kv_block_size=16)
    opts.update(options)
    return sim.create(**opts)


def test_reprefill_loop_saw_tooths_the_kv_gauge_with_zero_output(sim):
    server = reprefill_server(sim)
    sid = server["id"]
    sim.set_state(sid, "reprefill_loop")
    sim.start_load(sid, concurrency=1, max_tokens=10, prompt_tokens=1000)
    kv = []
    waiting = []
    # At least 1.5 s of reads, then on until they have seen the saw-tooth's top (one step long), its bottom and a
    # requeue: a loaded machine can make reads miss the top for a while, not for 30 s.
    started = time.monotonic()
    while time.monotonic() < started + 30:
        text = scrape(server)
        kv.append(value(text, "vllm:kv_cache_usage_perc"))
        waiting.append(value(text, "vllm:num_requests_waiting_by_reason", reason="capacity"))
        if (time.monotonic() > started + 1.5 and 62 / 64 in [pytest.approx(x) for x in kv] and 0.0 in kv
                and 1.0 in waiting):
            break
        time.sleep(0.01)
    st = engine0(sim.stats(sid))
    assert st["reprefill_cycles"] >= 3
    before = engine0(sim.stats(sid))["reprefill_cycles"]
    text = scrape(server)
    after = engine0(sim.stats(sid))["reprefill_cycles"]
    assert before <= value(text, "vllm:num_preemptions_total") <= after      # one per cycle
    assert value(text, "vllm:prompt_tokens_total") == 0.0          # re-prefills are never credited
    assert value(text, "vllm:generation_tokens_total") == 0.0
    assert value(text, "vllm:iteration_tokens_total_count") == 0.0  # no output, so no observation
    assert finished_normally(text) == 0.0
    # 990 tokens = 62 of 64 blocks at the peak, 0 after each preemption
    assert max(kv) == pytest.approx(62 / 64) and min(kv) == 0.0
    assert 1.0 in waiting                                           # back in the queue after each preemption


def test_reprefill_loop_without_counting_preemptions(sim):
    # what a reading of the 0.33 code suggests: the PREEMPTED event never reaches IterationStats
    server = reprefill_server(sim)
    sid = server["id"]
    sim.set_state(sid, "reprefill_loop", count_preemptions=False)
    sim.start_load(sid, concurrency=1, max_tokens=10, prompt_tokens=1000)
    sim.wait_for(sid, lambda s: engine0(s)["reprefill_cycles"] >= 2)
    text = scrape(server)
    assert value(text, "vllm:num_preemptions_total") == 0.0
    assert value(text, "vllm:prompt_tokens_total") == 0.0


def test_reprefill_loop_blocks_the_queue_behind_it(sim):
    server = reprefill_server(sim, max_num_seqs=4)
    sid = server["id"]
    sim.set_state(sid, "reprefill_loop", requeue_seconds=0.2)
    sim.start_load(sid, concurrency=1, max_tokens=10, prompt_tokens=1000)
    sim.wait_for(sid, lambda s: engine0(s)["running"] == 1)
    sim.start_load(sid, concurrency=1, max_tokens=10, prompt_tokens=16)
    sim.wait_for(sid, lambda s: engine0(s)["reprefill_cycles"] >= 2, timeout=15)
    text = scrape(server)
    assert value(text, "vllm:num_requests_waiting_by_reason", reason="capacity") >= 1.0
    assert value(text, "vllm:generation_tokens_total") == 0.0       # the small one never got in either
    sim.set_state(sid, "normal")                                     # the loop ends: both complete
    st = sim.wait_for(sid, lambda s: engine0(s)["request_success"]["length"] == 2.0, timeout=15)
    assert engine0(st)["prompt_tokens"] == 1016.0                    # each prompt counted once


def test_reprefill_cycle_follows_prompt_chunk_and_step_rate(sim):
    # cycle = ceil(0.99 * prompt / chunk_tokens) + 1 steps: (10 + 1) / 20 steps/s = 0.55 s here
    server = reprefill_server(sim, step_rate=20.0)
    sid = server["id"]
    sim.set_state(sid, "reprefill_loop")
    sim.start_load(sid, concurrency=1, max_tokens=10, prompt_tokens=1000)
    a = sim.wait_for(sid, lambda s: engine0(s)["reprefill_cycles"] >= 1)
    b = sim.wait_for(sid, lambda s: engine0(s)["reprefill_cycles"] >= 3, timeout=15)
    # Counted between the ends of two cycles (the engine's own step count then), not between two polls: a poll late by
    # a step on a loaded machine would count part of a cycle.
    steps = engine0(b)["reprefill_steps_at"] - engine0(a)["reprefill_steps_at"]
    assert steps == 11 * (engine0(b)["reprefill_cycles"] - engine0(a)["reprefill_cycles"]), (engine0(a), engine0(b))
