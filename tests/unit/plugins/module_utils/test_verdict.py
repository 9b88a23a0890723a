"""Every row of the verdict table, on scripted reads: no server, no sleeping."""

import json

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError, Fetched
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import (
    Judge,
    check_proxy,
    probe_outcome,
)
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import parse_version

from fakes import (
    timed,
    two_waits,
    HEALTH_OK,
    MODELS,
    NO_ANSWER,
    REFUSED,
    Clock,
    FakeServer,
    capture,
    completion,
    engine,
    expo,
)


def judge(server, interval=5.0, **kwargs):
    clock = Clock()
    kwargs.setdefault('freeze', two_waits())
    result = Judge(timed(server, clock), interval=interval, sleep=clock.sleep, clock=clock, probe_timeout=30.0,
                   metrics_timeout=10.0, **kwargs).run()
    result['_sleeps'] = clock.sleeps
    return result


def busy(steps, gen=None, kv=0.01, running=3, waiting=0, start=1796004614.13, **kw):
    return expo({'0': engine(running=running, waiting=waiting, steps=steps, step_tokens=steps,
                             gen=steps if gen is None else gen, kv=kv, **kw)}, start=start)


# -- idle --------------------------------------------------------------------

def test_idle_real_capture_probe_answered():
    server = FakeServer([capture('idle_after_load.prom')])
    result = judge(server)
    assert result['state'] == 'idle'
    assert result['probe']['sent'] is True and result['probe']['ok'] is True
    assert result['probe']['model'] == 'tiny'
    assert result['_sleeps'] == []
    assert server.count('metrics') == 2  # before the probe, and after it: same process
    assert server.count('models') == 0  # the model name came from the metrics labels
    assert result['version'] == '0.32.0' and result['model'] == 'tiny'


def test_idle_without_model_label_asks_v1_models():
    text = capture('idle_after_start.prom').replace('model_name="tiny"', 'model_name=""')
    server = FakeServer([text])
    result = judge(server)
    assert result['state'] == 'idle'
    assert server.count('models') == 1
    assert result['probe']['model'] == 'tiny' and result['models'] == ['tiny']


def test_idle_reports_the_reading_it_rests_on_not_work_that_arrived_after_the_probe():
    server = FakeServer([busy(10, running=0, kv=0.0), busy(12, running=3, kv=0.01)])
    result = judge(server)
    assert result['state'] == 'idle'
    assert result['running'] == 0 and result['waiting'] == 0
    assert len(result['evidence']['reads']) == 2  # the later read is kept as evidence


def test_given_model_is_used_for_the_probe():
    server = FakeServer([capture('idle_after_load.prom')])
    assert judge(server, model='other')['probe']['model'] == 'other'


def test_first_probe_lost_second_answers_is_idle():
    server = FakeServer([capture('idle_after_load.prom')], probe=[NO_ANSWER, completion()])
    result = judge(server)
    assert result['state'] == 'idle'
    assert result['probe']['attempts'] == 2
    assert 'second answered' in result['reason']


# -- busy --------------------------------------------------------------------

def test_busy_real_captures_no_probe_one_wait():
    server = FakeServer([capture('busy_1.prom'), capture('busy_2.prom')])
    result = judge(server)
    assert result['state'] == 'busy'
    assert result['probe']['sent'] is False
    assert server.count('probe') == 0
    assert result['_sleeps'] == [5.0]
    assert result['running'] == 3
    assert result['steps_per_second'] == round((10556 - 4438) / 5.0, 3)
    assert result['generation_tokens_per_second'] > 0
    assert result['evidence']['moved'][0]['0']['vllm:iteration_tokens_total_count'] == 10556 - 4438


def test_long_prefill_kv_moves_step_counter_frozen_is_busy():
    server = FakeServer([busy(10, running=1, kv=0.0026), busy(10, running=1, kv=0.0045)])
    result = judge(server)
    assert result['state'] == 'busy'
    assert result['evidence']['moved'][0] == {'0': {'vllm:kv_cache_usage_perc': 0.0019}}
    assert result['steps_per_second'] == 0.0
    assert server.count('probe') == 0


def test_full_batch_with_queue_is_busy_without_probe():
    server = FakeServer([busy(100, running=2, waiting=1), busy(180, running=2, waiting=1)])
    result = judge(server)
    assert result['state'] == 'busy' and result['waiting'] == 1
    assert server.count('probe') == 0


def test_stalled_first_wait_then_moving_is_busy():
    server = FakeServer([busy(100), busy(100), busy(150)])
    result = judge(server)
    assert result['state'] == 'busy'
    assert result['_sleeps'] == [5.0, 5.0]


def test_work_finished_between_reads_is_busy():
    server = FakeServer([busy(100, success=0), busy(160, running=0, success=3)])
    assert judge(server)['state'] == 'busy'


# -- stuck -------------------------------------------------------------------

def test_stuck_real_captures_two_waits():
    server = FakeServer([capture('stuck_1.prom'), capture('stuck_2.prom')])
    result = judge(server)
    assert result['state'] == 'stuck'
    assert result['_sleeps'] == [5.0, 5.0]
    assert server.count('metrics') == 3
    assert server.count('probe') == 0
    assert result['evidence']['moved'] == [{'0': {}}, {'0': {}}]
    assert result['evidence']['health'] == 'HTTP 200'
    assert result['stuck_engines'] == ['0']


def test_stuck_but_health_dead_is_down():
    server = FakeServer([capture('stuck_1.prom')], health=Fetched(status=503, text=''))
    assert judge(server)['state'] == 'down'


def test_one_wait_without_movement_is_not_enough():
    # Nothing moved on the first wait, something on the second: never stuck on one wait.
    server = FakeServer([busy(100), busy(100), busy(100, kv=0.02)])
    assert judge(server)['state'] == 'busy'


def test_idle_hang_two_lost_probes_nothing_moved_is_stuck():
    server = FakeServer([capture('idle_after_load.prom')], probe=NO_ANSWER)
    result = judge(server)
    assert result['state'] == 'stuck'
    assert result['probe']['attempts'] == 2
    assert 'idle-looking hang' in result['reason']


def test_lost_probe_but_engine_moved_is_not_stuck():
    server = FakeServer([busy(0, running=0), busy(50, running=2)], probe=NO_ANSWER)
    result = judge(server)
    assert result['state'] == 'busy'
    assert 'queued' in result['reason']


def test_lost_probe_then_others_requests_in_flight_are_judged_by_progress():
    # The probe got no answer, nothing moved yet, but work is now in flight.
    server = FakeServer([busy(0, running=0), busy(0, running=2), busy(30, running=2)], probe=NO_ANSWER)
    result = judge(server)
    assert result['state'] == 'busy'
    assert result['probe']['attempts'] == 1


def test_data_parallel_one_engine_stuck_other_moving():
    def two(steps0, steps1):
        return expo({'0': engine(running=2, steps=steps0, gen=steps0), '1': engine(running=2, steps=steps1,
                                                                                   gen=steps1)})
    server = FakeServer([two(100, 50), two(200, 50), two(300, 50)])
    result = judge(server)
    assert result['state'] == 'stuck'
    assert result['stuck_engines'] == ['1']
    assert 'on engine(s) 1 (engine(s) 0 moved)' in result['reason']


def test_data_parallel_one_engine_stuck_other_idle_says_so():
    # Engine 1 frozen with work, engine 0 with nothing in flight: the reason must not say it moved.
    def two(steps1):
        return expo({'0': engine(running=0, steps=7, gen=7), '1': engine(running=2, steps=steps1, gen=steps1)})
    result = judge(FakeServer([two(50), two(50), two(50)]))
    assert result['state'] == 'stuck' and result['stuck_engines'] == ['1']
    assert 'on engine(s) 1 (engine(s) 0 had nothing in flight)' in result['reason']
    assert 'moved)' not in result['reason']


def test_data_parallel_idle_engine_is_not_stalled():
    def two(steps0):
        return expo({'0': engine(running=2, steps=steps0, gen=steps0), '1': engine(running=0, steps=7)})
    assert judge(FakeServer([two(100), two(200)]))['state'] == 'busy'


def test_deferred_only_without_steps_is_unknown_not_stuck():
    text = busy(5, running=0, waiting=2, deferred=2)
    result = judge(FakeServer([text]))
    assert result['state'] == 'unknown'
    assert 'deferred' in result['reason']


# -- restarted / starting / load balancer ------------------------------------

def test_restart_between_reads_probe_answered_is_restarted():
    server = FakeServer([busy(100), capture('idle_after_restart.prom')])
    result = judge(server)
    assert result['state'] == 'restarted' and result['restarted'] is True
    assert result['probe']['sent'] is True
    assert 'process_start_time_seconds changed' in result['reason']


def test_restart_new_process_not_answering_is_starting():
    server = FakeServer([busy(100), capture('idle_after_restart.prom')], probe=Fetched(error='refused'))
    result = judge(server)
    assert result['state'] == 'starting' and result['restarted'] is True


def test_restart_new_process_busy_is_not_probed():
    server = FakeServer([busy(100), busy(5, start=1796009999.0)])
    result = judge(server)
    assert result['state'] == 'restarted'
    assert server.count('probe') == 0


def test_restart_seen_by_created_with_api_server_count_2():
    server = FakeServer([expo({'0': engine(running=2, steps=100)}, start=None, created=10.0),
                         expo({'0': engine(running=0, steps=0)}, start=None, created=20.0)])
    result = judge(server)
    assert result['state'] == 'restarted'
    assert '_created' in result['reason']


def test_restart_seen_by_counters_going_down():
    server = FakeServer([expo({'0': engine(running=2, steps=100, gen=100)}, start=None, created=None),
                         expo({'0': engine(running=0, steps=3, gen=3)}, start=None, created=None)])
    result = judge(server)
    assert result['state'] == 'restarted'
    assert 'went down' in result['reason']


def test_start_time_going_backwards_is_a_load_balancer():
    server = FakeServer([busy(100, start=2000.0), busy(50, start=1000.0)])
    result = judge(server)
    assert result['state'] == 'unknown'
    assert 'load balancer' in result['reason']
    assert result['restarted'] is False


def test_alternating_processes_are_a_load_balancer():
    server = FakeServer([busy(100, start=1000.0), busy(50, start=2000.0), busy(120, start=1000.0)])
    result = judge(server)
    assert result['state'] == 'unknown' and 'load balancer' in result['reason']


def test_four_backends_behind_a_balancer_move_on_and_never_come_back():
    # Reads land on A, B, C, D: each new read is yet another process, which no restart does.
    server = FakeServer([busy(100, start=1000.0), busy(50, start=2000.0), busy(70, start=3000.0),
                         busy(90, start=4000.0)])
    result = judge(server)
    assert result['state'] == 'unknown' and 'load balancer' in result['reason']
    assert result['restarted'] is False


def test_balancer_of_multiprocess_backends_is_seen_by_counters_going_down_again():
    def mp(gen):
        return expo({'0': engine(running=2, steps=gen, gen=gen)}, start=None, created=None)
    server = FakeServer([mp(80), mp(60), mp(85), mp(62)])
    result = judge(server)
    assert result['state'] == 'unknown' and 'load balancer' in result['reason']


def test_idle_probe_answered_by_another_process_is_not_idle():
    # The probe answered, but the read after it came from another process that alternates back.
    server = FakeServer([busy(0, running=0, start=1000.0), busy(0, running=0, start=2000.0),
                         busy(0, running=0, start=1000.0)])
    result = judge(server)
    assert result['state'] == 'unknown' and 'load balancer' in result['reason']


def test_equal_start_times_but_other_created_values_are_two_processes():
    from ansible_collections.modelops.vllm.plugins.module_utils import _readings as r
    a = r.read_text(expo({'0': engine(running=1, steps=5)}, start=1000.0, created=10.0))
    b = r.read_text(expo({'0': engine(running=1, steps=9)}, start=1000.0, created=20.0))
    assert r.same_process(a, b)[0] is False
    assert r.same_process(a, a)[0] is True


def test_multiprocess_fresh_server_has_no_gauges_and_is_probed():
    server = FakeServer([capture('idle_api_server_count_2.prom')])
    result = judge(server)
    assert result['state'] == 'idle'
    assert any('multiprocess' in note for note in result['evidence']['notes'])


# -- down / unknown / sleeping / up ------------------------------------------

def test_nothing_listening_is_down():
    result = judge(FakeServer([REFUSED], version=REFUSED))
    assert result['state'] == 'down'
    assert 'connection refused' in result['reason']


def test_metrics_timeout_is_unknown_never_stuck():
    server = FakeServer([Fetched(error='timeout', message='no complete answer in 10.0 s')])
    result = judge(server)
    assert result['state'] == 'unknown'
    assert server.count('probe') == 0


def test_metrics_timeout_between_reads_is_unknown():
    server = FakeServer([capture('stuck_1.prom'), Fetched(error='timeout')])
    assert judge(server)['state'] == 'unknown'


def test_metrics_500_with_dead_health_is_down():
    server = FakeServer([Fetched(status=500, text='Internal Server Error')], health=Fetched(status=503, text=''))
    assert judge(server)['state'] == 'down'


def test_metrics_500_with_health_ok_is_unknown():
    server = FakeServer([Fetched(status=500, text='oops')])
    assert judge(server)['state'] == 'unknown'


@pytest.mark.parametrize('body', [
    '<!DOCTYPE html>\n<html><body><h1>502 Bad Gateway</h1></body></html>\n',
    'vllm:num_requests_running{engine="0"} 1\nvllm:num_req',
    'vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="0"} 2\n',
    'vllm:num_requests_running{engine="0"} one\n',
])
def test_unreadable_metrics_are_unknown(body):
    server = FakeServer([body])
    result = judge(server)
    assert result['state'] == 'unknown'
    assert 'not Prometheus text' in result['reason']
    assert server.count('probe') == 0


def test_nan_and_inf_values_are_tolerated():
    text = busy(100).replace('vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.01',
                             'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} NaN')
    text2 = busy(200).replace('vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.01',
                              'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} +Inf')
    assert judge(FakeServer([text, text2]))['state'] == 'busy'


def test_sleeping_is_not_probed():
    server = FakeServer([expo({'0': engine(awake=0)})])
    result = judge(server)
    assert result['state'] == 'sleeping'
    assert server.count('probe') == 0


def test_no_metrics_404_probe_answered_is_up():
    result = judge(FakeServer([Fetched(status=404, text='{"detail":"Not Found"}')]))
    assert result['state'] == 'up'
    assert 'load cannot be known' in result['reason']


def test_disable_log_stats_probe_answered_is_up():
    assert judge(FakeServer([expo(vllm=False)]))['state'] == 'up'


def test_no_metrics_probe_timeout_is_unknown_never_stuck():
    result = judge(FakeServer([expo(vllm=False)], probe=NO_ANSWER))
    assert result['state'] == 'unknown'
    assert 'not called stuck' in result['reason']


def test_no_metrics_engine_dead_is_down():
    result = judge(FakeServer([expo(vllm=False)], health=Fetched(status=503, text='')))
    assert result['state'] == 'down'


@pytest.mark.parametrize('status, hint', [(401, 'api_key'), (404, 'model name'), (400, '400')])
def test_probe_rejected_is_unknown_with_a_hint(status, hint):
    server = FakeServer([capture('idle_after_load.prom')], probe=Fetched(status=status, text='{"error":"x"}'))
    result = judge(server)
    assert result['state'] == 'unknown'
    assert hint in result['reason']
    assert result['probe']['attempts'] == 1


def test_probe_500_with_dead_engine_is_down():
    server = FakeServer([capture('idle_after_load.prom')], probe=Fetched(status=500, text='{}'),
                        health=Fetched(status=503, text=''))
    assert judge(server)['state'] == 'down'


def test_idle_probe_lost_and_health_dead_is_down():
    server = FakeServer([capture('idle_after_load.prom')], probe=NO_ANSWER, health=Fetched(error='refused'))
    assert judge(server)['state'] == 'down'


def test_tls_error_is_a_configuration_error():
    with pytest.raises(CheckError, match='TLS'):
        judge(FakeServer([Fetched(error='tls', message='CERTIFICATE_VERIFY_FAILED')]))


# -- V0 / 0.7.x ----------------------------------------------------------------

def test_v0_idle_ticks_do_not_count_as_progress():
    # A V0 server with requests in flight whose only movement is idle step ticks is not busy.
    server = FakeServer([expo({'0': engine(running=2, steps=10)}, v0=True),
                         expo({'0': engine(running=2, steps=14)}, v0=True),
                         expo({'0': engine(running=2, steps=18)}, v0=True)],
                        version=Fetched(status=200, text='{"version":"0.6.6"}'))
    result = judge(server)
    assert result['state'] == 'stuck'
    assert result['evidence']['idle_ticks'] is True


def test_v0_tokens_moving_is_busy():
    server = FakeServer([expo({'0': engine(running=2, steps=10, step_tokens=0)}, v0=True),
                         expo({'0': engine(running=2, steps=14, step_tokens=40, gen=40)}, v0=True)],
                        version=Fetched(status=200, text='{"version":"0.7.3"}'))
    assert judge(server)['state'] == 'busy'


def test_v1_steps_alone_are_progress():
    server = FakeServer([busy(10, gen=0, kv=0.0), busy(14, gen=0, kv=0.0)])
    assert judge(server)['state'] == 'busy'


@pytest.mark.parametrize('text, expected', [
    ('0.7.3', (0, 7)), ('0.11.0rc1', (0, 11)), ('0.10.2.dev123+gabc', (0, 10)), ('v0.6.6', (0, 6)),
    ('', None), ('dev', None),
])
def test_parse_version(text, expected):
    assert parse_version(text) == expected


# -- the probe's success rule -------------------------------------------------

@pytest.mark.parametrize('fetched, outcome', [
    (completion(1), 'ok'),
    (Fetched(status=200, text=json.dumps({'choices': [{'message': {'content': None}, 'finish_reason': 'length'}]})),
     'ok'),
    (Fetched(status=200, text=json.dumps({'choices': [{'text': ''}], 'usage': {'completion_tokens': 0}})),
     'invalid'),
    (Fetched(status=200, text='<html>'), 'invalid'),
    (Fetched(status=401, text='{}'), 'rejected'),
    (Fetched(status=503, text='{}'), 'server_error'),
    (NO_ANSWER, 'no_answer'),
    (Fetched(error='timeout', seconds=29.5), 'no_answer'),
    # A probe that did not wait its whole probe_timeout is no evidence of a hang.
    (Fetched(error='timeout', seconds=3.0), 'cut_short'),
    (Fetched(error='deadline', seconds=0.0), 'cut_short'),
    (Fetched(error='dropped', seconds=0.01), 'dropped'),
    (Fetched(error='dropped', seconds=30.0), 'dropped'),
    (REFUSED, 'refused'),
    (Fetched(error='client', message='ValueError'), 'invalid'),
])
def test_probe_outcome(fetched, outcome):
    assert probe_outcome(fetched, probe_timeout=30.0) == outcome


# -- proxy -------------------------------------------------------------------

class ProxyOnly(object):
    def __init__(self, models):
        self.answer = models
        self.calls = []

    def models(self):
        self.calls.append('models')
        return self.answer

    def __getattr__(self, name):
        raise AssertionError('a proxy check must only GET /v1/models, not %s' % name)


def test_proxy_up_reads_only_models():
    server = ProxyOnly(MODELS)
    result = check_proxy(server)
    assert result['state'] == 'up' and result['models'] == ['tiny']
    assert server.calls == ['models']
    assert result['probe']['sent'] is False


@pytest.mark.parametrize('answer, state', [
    (REFUSED, 'down'),
    (Fetched(status=502, text='<html>Bad Gateway</html>'), 'down'),
    (Fetched(status=401, text='{}'), 'unknown'),
    (Fetched(error='timeout'), 'unknown'),
    (Fetched(status=200, text='{"data": []}'), 'unknown'),
])
def test_proxy_other_answers(answer, state):
    assert check_proxy(ProxyOnly(answer))['state'] == state


def test_every_result_has_the_documented_keys():
    keys = {'state', 'reason', 'restarted', 'probe', 'running', 'waiting', 'kv_cache_usage', 'steps_per_second',
            'generation_tokens_per_second', 'version', 'model', 'models', 'stuck_engines', 'evidence'}
    assert keys <= set(judge(FakeServer([capture('busy_1.prom'), capture('busy_2.prom')])))
    assert keys <= set(check_proxy(ProxyOnly(MODELS)))
    assert HEALTH_OK.describe() == 'HTTP 200'
