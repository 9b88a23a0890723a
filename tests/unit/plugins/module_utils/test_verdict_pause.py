"""A paused engine is not stuck, a hung one does not hide behind the pause API, and the window rule
turns a busy check into stuck only on its signature: the Judge on scripted servers."""

from ansible_collections.modelops.vllm.plugins.module_utils._stall import Window
from ansible_collections.modelops.vllm.plugins.module_utils._types import Fetched
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import pause_answer

from fakes import NO_ANSWER, NOT_FOUND, NOT_PAUSED, PAUSED, Clock, FakeServer, capture, engine, expo, timed, two_waits

HUNG_RPC = Fetched(error='timeout', message='no answer in 10.0 s', seconds=10.0)


def judge(server, window=None, **kwargs):
    clock = Clock()
    kwargs.setdefault('freeze', two_waits())
    result = Judge(timed(server, clock), interval=5.0, sleep=clock.sleep, clock=clock, probe_timeout=30.0, metrics_timeout=10.0,
                   window=window, **kwargs).run()
    result['_sleeps'] = clock.sleeps
    return result


def frozen(running=2, waiting=0, **kw):
    return expo({'0': engine(running=running, waiting=waiting, steps=500, step_tokens=500, gen=500, kv=0.05, **kw)})


IDLE = capture('idle_after_load.prom')


# -- the pause API ------------------------------------------------------------------------------------

def test_pause_keep_with_requests_in_flight_is_paused_not_stuck():
    # POST /pause?mode=keep: requests stay in flight and every counter freezes, on purpose.
    server = FakeServer([frozen()], is_paused=PAUSED)
    result = judge(server)
    assert result['state'] == 'paused'
    assert server.count('probe') == 0 and result['probe']['sent'] is False
    assert server.count('is_paused') == 1
    assert result['evidence']['is_paused'] == ['HTTP 200 {"is_paused": true}']
    assert result['_sleeps'] == [5.0, 5.0]  # judged by its counters first: asked only before "stuck"


def test_pause_wait_looks_idle_and_is_asked_before_the_probe():
    # POST /pause?mode=wait: held requests are counted neither running nor waiting; a probe would wait.
    server = FakeServer([IDLE], probe=NO_ANSWER, is_paused=PAUSED)
    result = judge(server)
    assert result['state'] == 'paused'
    assert server.count('probe') == 0


def test_a_busy_server_is_never_asked_whether_it_is_paused():
    server = FakeServer([frozen(), expo({'0': engine(running=2, steps=600, step_tokens=600, gen=600, kv=0.06)})], is_paused=PAUSED)
    assert judge(server)['state'] == 'busy'
    assert server.count('is_paused') == 0


def test_a_hung_engine_with_dev_mode_on_is_still_stuck():
    # /is_paused is an RPC to the engine core: a SIGSTOPped engine leaves it unanswered.
    server = FakeServer([frozen()], is_paused=HUNG_RPC)
    result = judge(server)
    assert result['state'] == 'stuck'
    assert result['evidence']['is_paused'] == ['timeout (no answer in 10.0 s)']


def test_an_idle_looking_hang_with_dev_mode_on_is_still_stuck_and_asks_once():
    server = FakeServer([IDLE], probe=NO_ANSWER, is_paused=HUNG_RPC)
    result = judge(server)
    assert result['state'] == 'stuck'
    assert server.count('probe') == 2
    assert server.count('is_paused') == 1  # no answer once: not asked again in this check


def test_dev_mode_off_is_asked_once_and_changes_nothing():
    server = FakeServer([IDLE], probe=NO_ANSWER, is_paused=NOT_FOUND)
    result = judge(server)
    assert result['state'] == 'stuck' and server.count('is_paused') == 1


def test_a_definite_not_paused_is_asked_again_before_each_probe_and_before_stuck():
    server = FakeServer([IDLE], probe=NO_ANSWER, is_paused=NOT_PAUSED)
    result = judge(server)
    assert result['state'] == 'stuck'
    assert server.count('is_paused') == 3  # before probe 1, before probe 2, before "stuck"


def test_a_pause_that_begins_between_the_probes_is_paused():
    server = FakeServer([IDLE], probe=NO_ANSWER, is_paused=[NOT_PAUSED, PAUSED])
    result = judge(server)
    assert result['state'] == 'paused' and server.count('probe') == 1


def test_answers_that_are_not_exactly_true_are_no_proof():
    for body, status in (('{"is_paused":"true"}', 200), ('{"is_paused":1}', 200), ('true', 200),
                         ('{"is_paused":true}', 500), ('{"is_paused":true}', 404), ('<html>paused</html>', 200),
                         ('{"error":"Failed to fetch pause status"}', 500), ('', 200), ('[true]', 200)):
        fetched = Fetched(status=status, text=body, seconds=0.01)
        assert pause_answer(fetched) is False, body
        result = judge(FakeServer([frozen()], is_paused=fetched))
        assert result['state'] == 'stuck', body
    assert pause_answer(Fetched(error='dropped', message='reset')) is False
    assert pause_answer(PAUSED) is True


def test_a_weight_transfer_in_flight_is_a_deliberate_freeze():
    server = FakeServer([expo({'0': engine(running=2, steps=500, gen=500, kv=0.05)}, weight_updates={'update': 1})])
    result = judge(server)
    assert result['state'] == 'paused' and 'weight update' in result['reason']
    assert server.count('is_paused') == 0 and server.count('probe') == 0


def test_a_weight_gauge_that_cannot_be_true_is_no_pause():
    for value in (float('nan'), float('inf'), -1.0):
        server = FakeServer([expo({'0': engine(running=2, steps=500, gen=500, kv=0.05)},
                                  weight_updates={'update': value})])
        result = judge(server)
        assert result['state'] == 'stuck'
        assert any('rl_weight_update' in problem for read in result['evidence']['reads']
                   for problem in read.get('problems', []))


def test_idle_weight_gauges_at_zero_change_nothing():
    server = FakeServer([expo({'0': engine(running=2, steps=500, gen=500, kv=0.05)},
                              weight_updates={'update': 0, 'init': 0})])
    assert judge(server)['state'] == 'stuck'


# -- the window rule inside a check ----------------------------------------------------------------------

def deadlock(i):
    return expo({'0': engine(running=4, steps=100 + 40 * i, step_tokens=100, prompt=5000 + 9000 * i, gen=300,
                             success=12, kv=0.2)})


def checks(window_seconds, texts_per_check, is_paused=NOT_FOUND, start=1796010000.0, every=300.0):
    """Run one check per list of texts, carrying the memory; returns the results. ``start``: after the expositions'
    process started (fakes.expo), as a real check is."""
    memory = None
    results = []
    for n, texts in enumerate(texts_per_check):
        clock = Clock(start + every * n)
        window = Window(memory, window_seconds, boot='b')
        result = Judge(FakeServer(texts, is_paused=is_paused), interval=5.0, sleep=clock.sleep, clock=clock,
                       probe_timeout=30.0, metrics_timeout=10.0, window=window).run()
        memory = window.memory
        results.append(result)
    return results


def test_the_window_turns_a_livelocked_busy_check_into_stuck_naming_the_signature():
    results = checks(600.0, [[deadlock(2 * n), deadlock(2 * n + 1)] for n in range(4)])
    assert [r['state'] for r in results] == ['busy', 'busy', 'stuck', 'stuck']
    reason = results[2]['reason']
    assert 'no token generated and no request completed' in reason and 'prompt tokens +' in reason
    assert results[2]['stuck_engines'] == ['0']
    progress = results[2]['evidence']['progress']
    assert progress['window'] == 600.0 and progress['engines']['0']['seconds'] >= 600.0
    assert results[2]['probe']['sent'] is False


def test_a_paused_server_is_not_made_stuck_by_the_window_and_its_streak_ends():
    texts = [[deadlock(2 * n), deadlock(2 * n + 1)] for n in range(3)]
    results = checks(600.0, texts, is_paused=PAUSED)
    assert [r['state'] for r in results] == ['busy', 'busy', 'paused']
    assert results[2]['evidence']['progress']['engines'] == {}


def test_without_a_memory_the_rule_is_off_and_the_evidence_says_so():
    window = Window(None, 600.0, off='no state_dir: the rule needs a memory across checks')
    result = judge(FakeServer([deadlock(0), deadlock(1)]), window=window)
    assert result['state'] == 'busy'
    off = 'no state_dir: the rule needs a memory across checks'
    assert result['evidence']['progress'] == {'window': 600.0, 'off': off}


def test_stranded_deferred_work_becomes_stuck_past_the_window():
    stranded = expo({'0': engine(running=0, waiting=3, deferred=3, steps=5, gen=5, success=1, kv=0.1)})
    results = checks(600.0, [[stranded]] * 4)
    assert [r['state'] for r in results] == ['unknown', 'unknown', 'stuck', 'stuck']
    assert 'stranded' in results[2]['reason']
