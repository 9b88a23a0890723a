"""Simulated vLLM servers in the states the tests, benchmarks, demo and sandbox need: one way each.

Every function takes the simulator's client (``tests/simulator/client.py``) and a server id, and
returns once the server is in that state for real (work decoding before a hang, so the frozen
counters are those of a working engine). ``create(sim, state, **options)`` creates a server and
puts it in ``state``.

Servers are created "up for two hours" (``process_age``: their own ``process_start_time_seconds``),
past the watchdog's start-up grace, unless the caller says otherwise: a server that just started is,
rightly, never restarted by the watchdog.
"""

# Two long requests decoding: minutes of work at the simulator's default step rate.
LOAD = {"concurrency": 2, "max_tokens": 100_000_000, "prompt_tokens": 16}
# A long chunked prefill: 4 prompt tokens a step (chunk_tokens 4), 30,000 tokens: the step counter
# stays frozen for minutes and only the KV-cache gauge moves (docs/vllm-facts.md).
PREFILL = {"concurrency": 1, "max_tokens": 1, "prompt_tokens": 30_000}
PREFILL_OPTIONS = {"chunk_tokens": 4}
UP_TWO_HOURS = {"process_age": 7200}
STATES = ("idle", "busy", "prefill", "stuck", "down")


def busy(sim, sid, load=None):
    """Requests decoding: running and the counters moving."""
    load = dict(LOAD, **(load or {}))
    sim.start_load(sid, **load)
    sim.wait_for(sid, lambda s: s["totals"]["running"] >= min(load["concurrency"], 1)
                 and s["totals"]["generation_tokens"] > 0)


def stuck(sim, sid, load=None):
    """Requests in flight, then the engine hangs: running stays, nothing moves. On a server already busy, the new
    requests run beside the old ones: the wait counts from what ran before (it waited for exactly the new load's
    count, which a busy server's first poll could meet before the new requests arrived, and never after)."""
    load = dict(LOAD, **(load or {}))
    before = sim.stats(sid)["totals"]["running"]
    sim.start_load(sid, **load)
    sim.wait_for(sid, lambda s: s["totals"]["running"] >= before + load["concurrency"]
                 and s["totals"]["generation_tokens"] > 0)
    sim.set_state(sid, "hang")


def prefill(sim, sid):
    """One long prompt in 4-token chunks: running 1, only the KV-cache gauge moves."""
    sim.configure(sid, **PREFILL_OPTIONS)
    sim.start_load(sid, **PREFILL)
    sim.wait_for(sid, lambda s: s["totals"]["running"] >= 1)


def down(sim, sid):
    """The process is gone: nothing listens."""
    sim.set_state(sid, "stop")


def put(sim, sid, state):
    """Put a fresh (idle) server in ``state`` (one of STATES)."""
    if state not in STATES:
        raise ValueError("state %r: one of %s" % (state, ", ".join(STATES)))
    if state != "idle":
        {"busy": busy, "prefill": prefill, "stuck": stuck, "down": down}[state](sim, sid)


def create(sim, state="idle", **options):
    """A new server (up for two hours unless ``process_age`` is given) in ``state``; returns its info."""
    info = sim.create(**dict(UP_TWO_HOURS, **options))
    put(sim, info["id"], state)
    return info
