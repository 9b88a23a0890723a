"""The window rule (useful progress across checks), table by table: field signatures that must be
caught and their healthy look-alikes that must not, on generated vLLM-0.32-shaped expositions."""

import json

from hypothesis import given, settings, strategies as st

from ansible_collections.modelops.vllm.plugins.module_utils import _readings as readings
from ansible_collections.modelops.vllm.plugins.module_utils import _stall as stall

from fakes import engine, expo

WINDOW = 600.0
# The process the readings come from started before the checks (at 1000 s and later): a streak cannot begin
# before its process started (test_a_streak_of_another_life_is_never_continued).
START = 500.0


def reading(at, mono=None, start=START, created=1796004644.44, engines=None, **one):
    """A Reading at wall time ``at`` (and monotonic ``mono``, default the same) of one engine's numbers."""
    found = readings.read_text(expo(engines or {'0': engine(**one)}, start=start, created=created), at=at)
    found.mono = at if mono is None else mono
    return found


class Series(object):
    """Checks over time: each ``check`` is two reads 5 s apart, and the memory carried between them."""

    def __init__(self, window=WINDOW, boot='boot-1'):
        self.memory = None
        self.window = window
        self.boot = boot
        self.findings = []

    def check(self, at, state='busy', reads=None, **one):
        reads = reads or [reading(at, **one), reading(at + 5, **_later(one))]
        self.memory, finding, summary = stall.observe(self.memory, reads, state, self.window, self.boot)
        json.dumps(self.memory)  # what is kept is plain JSON
        self.findings.append(finding)
        return finding, summary


def _later(one):
    """The second read of a check: the same numbers (the caller moves them between checks)."""
    return dict(one)


def run_signature(step, checks, every=300.0, window=WINDOW):
    """``step(i)`` gives the engine's numbers at check i; returns the index of the first finding, or None."""
    series = Series(window=window)
    for i in range(checks):
        finding, dummy = series.check(1000.0 + i * every, **step(i))
        if finding:
            return i, finding, series
    return None, None, series


# -- field signatures that must be caught ----------------------------------------------------------

def test_decode_deadlock_45094_is_caught_once_past_the_window():
    # vllm#45094: prefill at full speed (prompt tokens and steps rise, the KV cache moves), no generated
    # token and no finished request, work in flight at every read.
    def step(i):
        return dict(running=4, waiting=2, steps=100 + 40 * i, prompt=5000 + 9000 * i, gen=300, success=12,
                    kv=0.2 + 0.01 * (i % 5))
    index, finding, dummy = run_signature(step, 10)
    assert finding['kind'] == 'livelock' and finding['engines'] == ['0']
    # checks every 300 s, the streak starts at check 0: 600 s reached at check 2
    assert index == 2
    assert finding['prompt'] == 2 * 9000 and finding['steps'] == 80 and finding['seconds'] >= WINDOW


def test_decode_deadlock_with_clients_aborting_is_still_caught():
    # The clients give up; the still-stepping engine processes their aborts: no useful completion.
    def step(i):
        return dict(running=4, steps=100 + 40 * i, prompt=5000 + 9000 * i, gen=300, success=12, aborted=3 * i)
    index, finding, dummy = run_signature(step, 10)
    assert index == 2 and finding['kind'] == 'livelock'


def test_reprefill_loop_52520_counted_as_preemptions_is_caught():
    # vllm#52520 as its reporter saw it on main: preemptions rise, one request waits for capacity, no token.
    def step(i):
        return dict(running=0, waiting=1, preempt=6 * i, gen=0, success=0, kv=0.98 if i % 2 else 0.4)
    index, finding, dummy = run_signature(step, 10)
    assert index == 2 and finding['preemptions'] == 12


def test_reprefill_loop_52520_seen_only_as_kv_sawtooth_is_caught():
    # The same loop as vLLM 0.33's code counts it: no counter moves at all (re-prefills credit no prompt
    # tokens, the preemption is never reported), the KV cache saw-tooths to ~100 % and back.
    series = Series()
    finding = None
    kv = [0.4, 0.99, 0.3, 0.97, 0.35, 0.98, 0.2, 0.96]
    for i in range(8):
        at = 1000.0 + 150 * i
        reads = [reading(at, running=1, gen=0, success=0, kv=kv[i]),
                 reading(at + 5, running=1, gen=0, success=0, kv=kv[i] + 0.001)]
        finding, dummy = series.check(at, reads=reads)
        if finding:
            break
    assert finding and finding['kind'] == 'livelock'
    assert finding['kv_drops'] >= stall.MIN_KV_DROPS and finding['seconds'] >= WINDOW


def test_stranded_deferred_work_45388_is_caught_past_the_window():
    # vllm#45388: only deferred requests wait and nothing moves; the check alone says unknown (deferred).
    series = Series()
    results = [series.check(1000.0 + 300 * i, state='deferred', running=0, waiting=3, deferred=3, gen=50, success=5,
                            kv=0.1)[0] for i in range(4)]
    assert results[:2] == [None, None]
    assert results[2]['kind'] == 'stranded'


# -- healthy look-alikes that must never be caught ---------------------------------------------------

def test_decode_starvation_shorter_than_the_window_54919_is_never_caught():
    # vllm#54919: decode starved by prefill for 3-7 minutes (prompt tokens and steps move, no token), then
    # the tokens come again; over and over.
    def step(i):
        starved = i % 3 != 2  # two checks (5 min) starved, then a check where decode caught up
        gen = 300 + 500 * (i // 3) + (500 if not starved else 0)
        return dict(running=4, steps=100 + 40 * i, prompt=5000 + 9000 * i, gen=gen, success=12 + (i // 3))
    series = Series(window=420.0)  # 7 minutes: longer than any starved stretch here (5 min + 5 s)
    for i in range(30):
        finding, dummy = series.check(1000.0 + 150 * i, **step(i))
        assert finding is None


def test_a_long_prefill_is_never_caught_however_long_it_runs():
    # One prompt in chunked prefill: only the KV cache fills, nothing completes, for 10x the window.
    series = Series()
    for i in range(40):
        finding, dummy = series.check(1000.0 + 150 * i, running=1, gen=7, success=1, steps=3, prompt=40,
                                      kv=min(0.01 + 0.02 * i, 1.0))
        assert finding is None


def test_a_long_prefill_after_a_stretch_without_tokens_is_not_caught_once_it_runs_alone():
    # Prompts completed without a token for a while (activity), then one long prefill runs for longer than
    # the window: no activity since the check before, so no finding while it runs.
    series = Series()
    for i in range(3):
        assert series.check(1000.0 + 100 * i, running=2, prompt=100 * i, steps=10 * i, gen=5, success=1)[0] is None
    for i in range(3, 20):
        finding, dummy = series.check(1000.0 + 100 * i, running=2, prompt=200, steps=20, gen=5, success=1,
                                      kv=0.01 * i)
        assert finding is None


def test_a_pooling_server_that_never_generates_is_never_caught():
    # Embeddings: prompts complete and requests finish with no generated token.
    def step(i):
        return dict(running=8, steps=100 + 40 * i, prompt=5000 + 9000 * i, gen=0, success=30 * i)
    assert run_signature(step, 20)[0] is None


def test_a_prefill_only_instance_is_never_caught():
    # A prefill/decode split: the prefill instance finishes each request after its first token.
    def step(i):
        return dict(running=3, steps=100 + 40 * i, prompt=5000 + 9000 * i, gen=20 * i, success=20 * i)
    assert run_signature(step, 20)[0] is None


def test_deferred_work_that_moves_is_not_stranded():
    series = Series()
    for i in range(6):
        finding, dummy = series.check(1000.0 + 300 * i, state='deferred', running=0, waiting=3, deferred=3, gen=50,
                                      success=5, kv=0.1 + 0.01 * i)
        assert finding is None


# -- what ends a streak ---------------------------------------------------------------------------------

def deadlock(i, **extra):
    values = dict(running=4, steps=100 + 40 * i, prompt=5000 + 9000 * i, gen=300, success=12)
    values.update(extra)
    return values


def test_nothing_in_flight_at_one_read_ends_the_streak():
    series = Series()
    series.check(1000.0, **deadlock(0))
    series.check(1300.0, **deadlock(1, running=0))      # idle for a moment
    assert series.check(1600.0, **deadlock(2))[0] is None  # a new streak, 0 s old
    assert series.check(2200.0, **deadlock(3))[0] is not None  # 600 s later


def test_another_process_ends_every_streak():
    series = Series()
    series.check(1000.0, **deadlock(0))
    series.check(1300.0, **deadlock(1))
    # The next check sees another process (a new start time): counters are not compared across it.
    finding, summary = series.check(1600.0, reads=[reading(1600.0, start=START + 1000, created=START + 1001,
                                                           **deadlock(2)),
                                                   reading(1605.0, start=START + 1000, created=START + 1001,
                                                           **deadlock(2))])
    assert finding is None and 'another process' in summary['note']
    assert series.memory['engines']['0']['since'] == 1600.0


def test_a_counter_that_went_down_is_another_process():
    series = Series()
    series.check(1000.0, **deadlock(5))
    finding, summary = series.check(1900.0, reads=[reading(1900.0, start=None, created=None, **deadlock(1)),
                                                   reading(1905.0, start=None, created=None, **deadlock(1))])
    assert finding is None and 'another process' in summary['note']


def test_a_clock_that_went_back_restarts_the_streak():
    series = Series()
    series.check(5000.0, **deadlock(0))
    series.check(2000.0, **deadlock(1))  # the wall clock went back
    assert series.memory['engines']['0']['since'] == 2000.0


def test_a_wall_clock_stepped_forward_is_no_evidence_on_the_same_boot():
    series = Series()
    series.check(1000.0, reads=[reading(1000.0, mono=50.0, **deadlock(0)), reading(1005.0, mono=55.0, **deadlock(0))])
    # An hour later by the wall clock, 60 s later by the monotonic one.
    finding, dummy = series.check(4600.0, reads=[reading(4600.0, mono=110.0, **deadlock(1)),
                                                 reading(4605.0, mono=115.0, **deadlock(1))])
    assert finding is None


def test_a_streak_of_another_life_is_never_continued():
    """Issue 26: a streak kept on another boot, or one that began before the process that shows it started (a state
    dir carried over), is never continued: an untrusted memory may only delay a finding."""
    for change in ({'boot': 'boot-2'}, {'start': 1200.0}):
        series = Series()
        series.check(1000.0, **deadlock(0))
        series.check(1300.0, **deadlock(1))
        start = change.get('start', START)
        series.boot = change.get('boot', series.boot)
        # Past the window since the kept streak began, with the signature: no finding, the streak begins again.
        finding, dummy = series.check(1700.0, reads=[reading(1700.0, start=start, **deadlock(2)),
                                                     reading(1705.0, start=start, **deadlock(2))])
        assert finding is None, change
        assert series.memory['engines']['0']['since'] == 1700.0, change
    # The same memory on the same boot and process is caught, as it should be.
    series = Series()
    for i in range(3):
        finding, dummy = series.check(1000.0 + 350 * i, **deadlock(i))
    assert finding is not None


def test_unknown_and_down_checks_change_nothing():
    series = Series()
    series.check(1000.0, **deadlock(0))
    kept = json.dumps(series.memory, sort_keys=True)
    for state in ('unknown', 'down', 'up'):
        finding, dummy = series.check(1300.0, state=state, **deadlock(1))
        assert finding is None and json.dumps(series.memory, sort_keys=True) == kept


def test_a_pause_or_sleep_ends_every_streak():
    for state in ('paused', 'sleeping', 'restarted', 'starting'):
        series = Series()
        series.check(1000.0, **deadlock(0))
        finding, summary = series.check(1300.0, state=state, **deadlock(1))
        assert finding is None and series.memory['engines'] == {} and state in summary['note']


def test_a_stuck_or_idle_check_is_never_upgraded_but_keeps_the_memory_true():
    series = Series()
    for i in range(3):
        series.check(1000.0 + 300 * i, **deadlock(i))
    assert series.check(2200.0, state='stuck', **deadlock(4))[0] is None  # stuck already: nothing to add
    assert series.check(2500.0, state='idle', running=0, gen=300, success=12)[0] is None
    assert series.memory['engines'] == {}


def test_missing_usefulness_counters_start_no_streak():
    text = expo({'0': engine(running=4, steps=10, prompt=100, gen=5)}).replace('vllm:generation_tokens_total',
                                                                               'vllm:other_total')
    found = readings.read_text(text, at=1000.0)
    found.mono = 1000.0
    memory, finding, dummy = stall.observe(None, [found], 'busy', WINDOW)
    assert memory['engines'] == {} and finding is None


def test_one_engine_of_two_livelocked_is_named():
    def step(i):
        return dict(engines={'0': engine(running=2, steps=10 * i, gen=100 * i, success=i),
                             '1': engine(running=2, steps=10 * i, prompt=900 * i, gen=50, success=3)})
    series = Series()
    found = [series.check(1000.0 + 300 * i, **step(i))[0] for i in range(4)]
    assert found[2]['engines'] == ['1']


# -- the memory is untrusted -------------------------------------------------------------------------------

def test_a_memory_that_is_not_what_observe_writes_is_fresh_and_finds_nothing():
    good = Series()
    for i in range(3):
        good.check(1000.0 + 300 * i, **deadlock(i))
    forged = []
    memory = json.loads(json.dumps(good.memory))
    for broken in ('garbage', [1, 2], {'version': 99}, {'version': 1, 'engines': [], 'process': None},
                   dict(memory, engines={'0': dict(memory['engines']['0'], since='yesterday')}),
                   dict(memory, engines={'0': dict(memory['engines']['0'], kv_drops=-1)}),
                   dict(memory, engines={'0': dict(memory['engines']['0'], base={'generation': float('nan')})}),
                   dict(memory, process=dict(memory['process'], created='x'))):
        result, finding, summary = stall.observe(broken, [reading(2000.0, **deadlock(4))], 'busy', WINDOW)
        forged.append(finding)
        assert 'afresh' in summary['note']
    assert forged == [None] * len(forged)


def test_a_forged_streak_start_cannot_fake_a_stall_when_tokens_flow():
    # Someone wrote since=0 into the memory: the counters anchor the streak, and tokens flowed.
    series = Series()
    series.check(1000.0, **deadlock(0))
    series.memory['engines']['0']['since'] = 0.0
    finding, dummy = series.check(1300.0, **deadlock(1, gen=900))
    assert finding is None and series.memory['engines']['0']['since'] == 1300.0


def test_the_memory_stays_small_with_every_engine():
    engines = dict((str(k), engine(running=1, steps=k, prompt=k, gen=1, success=1)) for k in range(300))
    text = expo(engines)
    try:
        found = readings.read_text(text, at=1000.0)
    except readings.ReadingError:
        engines = dict(list(engines.items())[:readings.MAX_ENGINES])
        found = readings.read_text(expo(engines), at=1000.0)
    found.mono = 1000.0
    memory, dummy, summary = stall.observe(None, [found], 'busy', WINDOW)
    assert len(memory['engines']) <= stall.MAX_ENGINES
    assert len(json.dumps(memory)) < 200 * 1024
    assert len(summary['engines']) <= readings.EVIDENCE_ENGINES


# -- properties ---------------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans(), st.integers(0, 3)), min_size=2, max_size=30),
       st.floats(60, 3600))
def test_tokens_at_least_every_half_window_never_give_a_finding(steps, window):
    """Whatever else moves, an engine that generates a token at least every half window is never stalled."""
    series = Series(window=window)
    gen = 0
    every = window / 2.0
    for i, (kv, more, prompt) in enumerate(steps):
        gen += 1
        finding, dummy = series.check(1000.0 + every * i, running=1 + int(more), gen=gen, success=1, prompt=prompt * i,
                                      steps=i, kv=kv, preempt=i)
        assert finding is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 0.05), min_size=2, max_size=40), st.floats(60, 3600))
def test_a_kv_cache_that_only_fills_never_gives_a_finding(increments, window):
    """A prefill: the KV cache only grows (or stays), nothing else moves: never stalled."""
    series = Series(window=window)
    kv = 0.0
    for i, step in enumerate(increments):
        kv = min(kv + step, 1.0)
        finding, dummy = series.check(1000.0 + window / 3.0 * i, running=2, gen=3, success=0, kv=kv)
        assert finding is None
