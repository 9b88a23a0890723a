"""A freeze is proof of a hang only once it has lasted freeze_limit (issue 23): the Judge on scripted servers, and
the freeze's memory across checks (``_freeze``), which is trusted only where it cannot be from another life.

vLLM publishes its metrics only when an engine step returns, so one long step freezes every series. Each rule here
has its healthy look-alike: a long step (with work in flight, and with an idle-looking engine whose probes wait
behind it), a pause, a weight transfer ending mid-check, an engine idle for hours, a restart between checks."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _freeze
from ansible_collections.modelops.vllm.plugins.module_utils._freeze import DEFAULT_LIMIT, Freeze
from ansible_collections.modelops.vllm.plugins.module_utils._readings import highest_bucket, read_text
from ansible_collections.modelops.vllm.plugins.module_utils._settings import check_deadline
from ansible_collections.modelops.vllm.plugins.module_utils._stall import Window
from ansible_collections.modelops.vllm.plugins.module_utils._types import Fetched
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge

from fakes import NO_ANSWER, Clock, FakeServer, completion, engine, expo, timed

START = 1796004614.13
BOOT = 'boot-a'
# The checks' clock: a while after the process started.
T0 = 1796010000.0


def frozen(running=2, steps=500, kv=0.05, start=START, **kw):
    return expo({'0': engine(running=running, steps=steps, step_tokens=steps, gen=steps, kv=kv, **kw)}, start=start)


def idle(steps=500, kv=0.0, start=START):
    return expo({'0': engine(running=0, steps=steps, step_tokens=steps, gen=steps, kv=kv)}, start=start)


def judge(server, at=T0, limit=DEFAULT_LIMIT, wait=0.0, memory=None, boot=BOOT, remember=True, deadline=None,
          interval=5.0):
    """One check at ``at``; returns (result, the freezes to remember, the clock)."""
    clock = Clock(at)
    freeze = Freeze(memory, limit=limit, wait=wait, boot=boot, remember=remember)
    if deadline is None:
        deadline = check_deadline(interval, 30.0, 10.0, wait)
    result = Judge(timed(server, clock), interval=interval, sleep=clock.sleep, clock=clock, probe_timeout=30.0,
                   metrics_timeout=10.0, deadline=deadline, freeze=freeze).run()
    return result, freeze.memory(judged=result['state'] != 'unknown'), clock


# -- one check, the default limit -------------------------------------------------------------------------------

def test_work_in_flight_frozen_for_two_waits_is_frozen_not_stuck_and_sends_nothing():
    server = FakeServer([frozen()])
    result, kept, clock = judge(server)
    assert result['state'] == 'frozen', result['reason']
    assert result['frozen_for'] == 10.0
    assert 'for 10s' in result['reason'] and 'freeze_limit' in result['reason'] and '5m00s' in result['reason']
    assert server.count('probe') == 0
    assert clock.sleeps == [5.0, 5.0]  # no watch without freeze_wait
    assert kept['0']['since'] == T0 and kept['0']['values']['kv'] == 0.05
    assert result['evidence']['freeze']['engines']['0'] == {'since': T0, 'remembered': False, 'seconds': 10.0}


def test_the_same_freeze_at_the_next_check_past_the_limit_is_stuck():
    first, kept, dummy = judge(FakeServer([frozen()]), at=T0)
    second, kept2, dummy = judge(FakeServer([frozen()]), at=T0 + 300, memory=kept)
    assert first['state'] == 'frozen' and second['state'] == 'stuck', second['reason']
    assert second['frozen_for'] == 310.0 and second['stuck_engines'] == ['0']
    assert 'past freeze_limit (5m00s)' in second['reason'] and '5m10s' in second['reason']
    assert second['evidence']['freeze']['engines']['0']['remembered'] is True
    assert kept2['0']['since'] == T0


def test_a_freeze_shorter_than_the_limit_across_checks_is_still_frozen():
    dummy, kept, dummy = judge(FakeServer([frozen()]), at=T0)
    second, dummy, dummy = judge(FakeServer([frozen()]), at=T0 + 200, memory=kept)
    assert second['state'] == 'frozen' and second['frozen_for'] == 210.0


def test_any_movement_between_checks_ends_the_freeze():
    dummy, kept, dummy = judge(FakeServer([frozen(steps=500)]), at=T0)
    # One more step (a long step ended, the next began): the freeze begins again at this check.
    second, dummy, dummy = judge(FakeServer([frozen(steps=501)]), at=T0 + 400, memory=kept)
    assert second['state'] == 'frozen' and second['frozen_for'] == 10.0
    # Only the KV cache moved (a prefill chunk): movement too.
    third, dummy, dummy = judge(FakeServer([frozen(kv=0.06)]), at=T0 + 400, memory=kept)
    assert third['state'] == 'frozen' and third['frozen_for'] == 10.0


def test_a_check_that_saw_movement_forgets_the_freeze():
    dummy, kept, dummy = judge(FakeServer([frozen(steps=500)]), at=T0)
    busy, kept2, dummy = judge(FakeServer([frozen(steps=500), frozen(steps=510)]), at=T0 + 200, memory=kept)
    assert busy['state'] == 'busy' and kept2 == {}


def test_a_check_that_could_not_judge_keeps_the_freeze():
    dummy, kept, dummy = judge(FakeServer([frozen()]), at=T0)
    slow = Fetched(error='timeout', message='no answer in 10 s', seconds=10.0)
    unknown, kept2, dummy = judge(FakeServer([slow]), at=T0 + 200, memory=kept)
    assert unknown['state'] == 'unknown' and kept2 == kept
    third, dummy, dummy = judge(FakeServer([frozen()]), at=T0 + 400, memory=kept2)
    assert third['state'] == 'stuck' and third['frozen_for'] == 410.0


def test_an_engine_idle_for_hours_that_freezes_on_its_first_request_is_frozen_for_as_long_as_it_waited():
    answered, kept, dummy = judge(FakeServer([idle()], probe=completion()), at=T0)
    assert answered['state'] == 'idle' and kept == {}
    # Hours later a request arrives and the engine freezes with the same counters as when it was idle.
    later, kept2, dummy = judge(FakeServer([frozen(running=1, kv=0.0)]), at=T0 + 6 * 3600)
    assert later['state'] == 'frozen' and later['frozen_for'] == 10.0


# -- the watch: proof in this check, or the end of a long step ---------------------------------------------------

def test_with_freeze_wait_a_hang_is_proven_within_the_check_after_the_limit():
    server = FakeServer([frozen()])
    result, kept, clock = judge(server, wait=300.0)
    assert result['state'] == 'stuck', result['reason']
    assert DEFAULT_LIMIT <= result['frozen_for'] < DEFAULT_LIMIT + 5.0
    assert sum(clock.sleeps) == pytest.approx(result['frozen_for'])
    assert result['evidence']['freeze']['watched'] == pytest.approx(result['frozen_for'] - 10.0, abs=0.2)
    assert server.count('probe') == 0


def test_a_long_step_that_ends_during_the_watch_is_busy_and_never_stuck():
    # 66 s without movement (the real measured step), then the step returns and everything moves.
    reads = [frozen()] * 14 + [frozen(steps=501, kv=0.9)]
    server = FakeServer(reads)
    result, kept, clock = judge(server, wait=300.0)
    assert result['state'] == 'busy', result['reason']
    assert 'moved again after 1m05s without movement' in result['reason'] and 'not a hang' in result['reason']
    assert sum(clock.sleeps) == 70.0 and kept == {}


def test_the_watch_runs_only_when_the_limit_can_be_reached_in_it():
    result, dummy, clock = judge(FakeServer([frozen()]), wait=60.0)
    assert result['state'] == 'frozen' and clock.sleeps == [5.0, 5.0]
    dummy, kept, dummy = judge(FakeServer([frozen()]), at=T0)
    # 250 s remembered: 50 s left, within the 60 s it may watch.
    result, dummy, clock = judge(FakeServer([frozen()]), at=T0 + 240, wait=60.0, memory=kept)
    assert result['state'] == 'stuck' and result['frozen_for'] >= DEFAULT_LIMIT
    assert sum(clock.sleeps) == pytest.approx(60.0)


def test_the_watch_ends_within_the_overall_deadline_as_frozen():
    result, dummy, clock = judge(FakeServer([frozen()]), wait=300.0, deadline=100.0)
    assert result['state'] == 'frozen', result['reason']
    assert sum(clock.sleeps) <= 100.0


def test_a_dead_engine_is_down_at_once_not_a_freeze():
    server = FakeServer([frozen()], health=Fetched(status=503, text='', seconds=0.01))
    result, kept, clock = judge(server, wait=300.0)
    assert result['state'] == 'down' and clock.sleeps == [5.0, 5.0] and kept == {}


def test_a_pause_is_paused_never_a_freeze():
    server = FakeServer([frozen()], is_paused=Fetched(status=200, text='{"is_paused": true}', seconds=0.01))
    result, kept, dummy = judge(server, wait=300.0)
    assert result['state'] == 'paused' and kept == {}


def test_a_pause_that_begins_during_the_watch_is_paused():
    not_paused = Fetched(status=200, text='{"is_paused": false}', seconds=0.01)
    paused = Fetched(status=200, text='{"is_paused": true}', seconds=0.01)
    server = FakeServer([frozen()], is_paused=[not_paused, paused])
    result, dummy, dummy = judge(server, wait=300.0)
    assert result['state'] == 'paused', result['reason']


def test_one_engine_frozen_while_another_moves_is_frozen_naming_it():
    def two(n):
        return expo({'0': engine(running=2, steps=500, step_tokens=500, gen=500, kv=0.05),
                     '1': engine(running=2, steps=100 + n, step_tokens=100 + n, gen=100 + n, kv=0.05)})
    result, kept, dummy = judge(FakeServer([two(0), two(1), two(2)]))
    assert result['state'] == 'frozen' and 'engine(s) 0' in result['reason'] and list(kept) == ['0']


# -- an idle-looking engine: the freeze begins with the first probe ---------------------------------------------

def test_two_unanswered_probes_are_frozen_until_the_limit():
    server = FakeServer([idle()], probe=NO_ANSWER)
    result, kept, dummy = judge(server)
    assert result['state'] == 'frozen', result['reason']
    assert 'since the first probe' in result['reason'] and result['frozen_for'] == pytest.approx(60.0, abs=1)
    assert server.count('probe') == 2
    again, dummy, dummy = judge(FakeServer([idle()], probe=NO_ANSWER), at=T0 + 300, memory=kept)
    assert again['state'] == 'stuck' and 'an idle-looking hang' in again['reason']
    assert again['frozen_for'] >= DEFAULT_LIMIT


def test_probes_that_wait_behind_a_long_step_are_not_stuck():
    # The server looked idle, the long step holds both probes, then it returns and everything moves: the engine
    # is free again, and one more probe says it serves.
    reads = [idle(), idle(), idle()] + [idle()] * 2 + [idle(steps=501, kv=0.3)]
    server = FakeServer(reads, probe=[NO_ANSWER, NO_ANSWER, completion()])
    result, kept, dummy = judge(server, wait=300.0)
    assert result['state'] == 'idle', result['reason']
    assert 'the probes waited behind one long engine step' in result['reason'] and server.count('probe') == 3
    assert kept == {}
    # A third probe that is not answered either: not judged, and still no freeze (the engine moved).
    result, kept, dummy = judge(FakeServer(reads, probe=NO_ANSWER), wait=300.0)
    assert result['state'] == 'unknown', result['reason']
    assert 'moved again' in result['reason'] and 'the probe queued behind a long engine step' in result['reason']
    assert kept == {}


# -- the memory: trusted only where it cannot be from another life ------------------------------------------------

def remembered(**change):
    dummy, kept, dummy = judge(FakeServer([frozen()]), at=T0)
    entry = dict(kept['0'], **change)
    return {'0': entry}


@pytest.mark.parametrize('change, reason', [
    ({'start_time': START - 3600}, 'another process (its start time)'),
    ({'created': 'f00dfeedf00dfeed'}, 'another process (its *_created values)'),
    ({'boot': 'boot-b'}, 'another boot'),
    ({'since': T0 + 7 * 86400}, 'a start in the future'),
    ({'values': {'kv': 0.05}}, 'other series'),
])
def test_a_freeze_of_another_life_is_not_continued(change, reason):
    result, dummy, dummy = judge(FakeServer([frozen()]), at=T0 + 300, memory=remembered(**change))
    assert result['state'] == 'frozen', reason
    assert result['evidence']['freeze']['engines']['0']['remembered'] is False, reason


def test_a_freeze_that_began_before_the_process_started_is_not_continued():
    # A state dir carried over: the freeze is older than the process that shows it.
    memory = remembered(since=START - 100.0, start_time=None, created=None)
    result, dummy, dummy = judge(FakeServer([frozen(start=START)]), at=T0 + 300, memory=memory)
    assert result['state'] == 'frozen' and result['frozen_for'] == 10.0


@pytest.mark.parametrize('memory', [
    'not a dict', [1, 2], {'0': 'x'}, {'0': {'since': float('nan'), 'values': {'kv': 0.1}}},
    {'0': {'since': 10.0, 'values': {}}}, {'0': {'since': 10.0, 'values': {'kv': -1.0}}},
    {'0': {'since': 10.0, 'values': {'kv': 0.1}, 'boot': 7}},
    {'0': {'since': 10.0, 'values': dict(('s%d' % i, 1.0) for i in range(100))}},
    dict(('e%d' % i, {'since': 10.0, 'values': {'kv': 0.1}}) for i in range(1000)),
])
def test_a_memory_that_is_not_what_the_module_writes_is_left_out_and_said(memory):
    entries, note = _freeze.load(memory)
    assert entries == {} and note
    result, dummy, dummy = judge(FakeServer([frozen()]), at=T0 + 300, memory=memory)
    assert result['state'] == 'frozen' and result['evidence']['freeze']['note']


def test_without_a_memory_a_check_measures_within_itself_and_says_so():
    result, kept, dummy = judge(FakeServer([frozen()]), remember=False, memory=remembered())
    assert result['state'] == 'frozen' and result['frozen_for'] == 10.0
    assert result['evidence']['freeze']['memory'] is False


def test_a_clock_stepped_forward_is_no_freeze():
    # The wall clock jumped an hour between the checks; the monotonic clock (same boot) says 300 s... and the
    # module takes the smaller.
    memory = remembered(since_mono=1000.0)
    clock_at = T0 + 3600.0
    server = FakeServer([frozen()])
    clock = Clock(clock_at)
    freeze = Freeze(memory, limit=DEFAULT_LIMIT, boot=BOOT)
    mono = Clock(1100.0)
    mono.sleep = clock.sleep  # one sleep moves both

    def sleep(seconds):
        clock.sleep(seconds)
        mono.now += seconds

    result = Judge(timed(server, clock), interval=5.0, sleep=sleep, clock=clock, monotonic=mono, probe_timeout=30.0,
                   metrics_timeout=10.0, freeze=freeze).run()
    assert result['state'] == 'frozen' and result['frozen_for'] == pytest.approx(110.0)


# -- a deliberate freeze ending mid-check is no proof (issue 26) ---------------------------------------------------

def test_a_weight_transfer_that_ends_mid_check_keeps_the_waits_around_it_from_counting():
    reads = [expo({'0': engine(running=2, steps=500, step_tokens=500, gen=500, kv=0.05)}, start=START,
                  weight_updates={'update': 1.0}), frozen(), frozen()]
    for limit in (1.0, DEFAULT_LIMIT):
        result, dummy, dummy = judge(FakeServer(reads), limit=limit)
        assert result['state'] != 'stuck', (limit, result['reason'])


# -- the longest the server has shown, and the warning -------------------------------------------------------------

ITL = ('# TYPE vllm:inter_token_latency_seconds histogram\n' + ''.join(
    'vllm:inter_token_latency_seconds_bucket{engine="0",le="%s",model_name="tiny"} %s\n' % (le, count)
    for le, count in (('0.01', 90), ('1.0', 95), ('20.0', 98), ('40.0', 98), ('80.0', 99), ('+Inf', 99))))


def test_the_longest_step_is_read_from_the_histograms():
    reading = read_text(frozen() + ITL)
    assert reading.longest('inter_token_latency') == (40.0, 80.0)
    assert highest_bucket({0.5: 1.0, float('inf'): 3.0}) == (0.5, None)
    assert highest_bucket({0.5: 3.0, 1.0: 2.0}) is None  # a cumulative count that went down cannot be true
    assert highest_bucket({0.5: 0.0, 1.0: 0.0}) is None


@pytest.mark.parametrize('limit, warned', [(60.0, True), (79.0, True), (80.0, False), (300.0, False)])
def test_a_limit_not_well_above_the_longest_step_is_warned(limit, warned):
    result, dummy, dummy = judge(FakeServer([frozen() + ITL]), limit=limit)
    assert result['longest_step']['inter_token_latency'] == {'above': 40.0, 'at_most': 80.0}
    assert bool(result['config_warnings']) is warned, result['config_warnings']
    if warned:
        assert 'between 40s and 1m20s' in result['config_warnings'][0] and 'at least 1m20s' in result['config_warnings'][0]


def test_histograms_that_cannot_be_true_show_nothing():
    bad = ITL.replace('} 98\n', '} NaN\n', 1)
    result, dummy, dummy = judge(FakeServer([frozen() + bad]), limit=10.0)
    assert result['longest_step'] == {} and result['config_warnings'] == []


# -- realtime sessions: deferred-only work is a paused stream, not stranded ---------------------------------------

def test_deferred_only_work_with_realtime_sessions_open_is_never_stranded():
    def parked(sessions):
        text = expo({'0': engine(running=0, waiting=1, deferred=1, steps=500, step_tokens=500, gen=500, kv=0.05)})
        if sessions is not None:
            text += ('# TYPE vllm:websocket_connections_active gauge\n'
                     'vllm:websocket_connections_active %s\n' % sessions)
        return text
    for sessions, stranded in ((1.0, False), (None, True), (0.0, True)):
        memory, states = None, []
        for n in range(4):
            clock = Clock(T0 + 300.0 * n)
            window = Window(memory, 600.0, boot=BOOT)
            result = Judge(FakeServer([parked(sessions)]), interval=5.0, sleep=clock.sleep, clock=clock,
                           probe_timeout=30.0, metrics_timeout=10.0, window=window).run()
            memory = window.memory
            states.append(result['state'])
        assert (states[-1] == 'stuck') is stranded, (sessions, states)
        if sessions:
            assert 'realtime session' in result['reason']
