"""Readings from the real captures: values, progress, same process or not."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _readings as r
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import GENERATION, STEPS

from fakes import capture, engine, expo


def read(name, at=None):
    return r.read_text(capture(name), at=at)


@pytest.mark.parametrize('name, running, waiting, steps, start', [
    ('idle_after_start.prom', 0, 0, 0, 1796004614.13),
    ('busy_1.prom', 3, 0, 4438, 1796004614.13),
    ('busy_2.prom', 3, 0, 10556, 1796004614.13),
    ('stuck_1.prom', 3, 0, 25943, 1796004614.13),
    ('stuck_2.prom', 3, 0, 25943, 1796004614.13),
    ('idle_after_load.prom', 0, 0, 30001, 1796004614.13),
    ('idle_after_restart.prom', 0, 0, 0, 1796004877.36),
])
def test_capture_values(name, running, waiting, steps, start):
    reading = read(name)
    assert reading.has_vllm
    assert reading.running == running
    assert reading.waiting == waiting
    assert reading.counter(STEPS) == steps
    assert reading.start_time == start
    assert reading.model_name == 'tiny'
    assert list(reading.engines) == ['0']
    assert reading.sleeping is False
    assert reading.v0 is False


def test_multiprocess_capture_has_no_start_time_no_created_no_gauges():
    reading = read('idle_api_server_count_2.prom')
    assert reading.has_vllm
    assert reading.start_time is None
    assert reading.created == {}
    assert reading.running is None and reading.waiting is None
    assert reading.in_flight == 0
    assert reading.counter(STEPS) == 0


def test_busy_captures_moved():
    moves = r.engine_moves(read('busy_1.prom'), read('busy_2.prom'))
    assert moves['0'][STEPS] == 10556 - 4438
    assert moves['0'][GENERATION] > 0


def test_stuck_captures_did_not_move():
    assert r.engine_moves(read('stuck_1.prom'), read('stuck_2.prom')) == {'0': {}}


def test_restart_capture_is_another_process():
    same, how = r.same_process(read('idle_after_load.prom'), read('idle_after_restart.prom'))
    assert same is False
    assert 'process_start_time_seconds' in how
    assert r.start_time_order(read('idle_after_load.prom'), read('idle_after_restart.prom')) == 1
    assert r.same_process(read('busy_1.prom'), read('busy_2.prom'))[0] is True


def test_created_tells_processes_apart_without_start_time():
    a = r.read_text(expo(start=None, created=100.0))
    b = r.read_text(expo(start=None, created=200.0))
    assert r.same_process(a, b)[0] is False
    assert r.same_process(a, r.read_text(expo(start=None, created=100.0)))[0] is True


def test_counter_going_down_tells_processes_apart_as_last_resort():
    a = r.read_text(expo({'0': engine(steps=50, gen=500)}, start=None, created=None))
    b = r.read_text(expo({'0': engine(steps=3, gen=20)}, start=None, created=None))
    same, how = r.same_process(a, b)
    assert same is False and 'went down' in how
    assert r.same_process(b, a)[0] is None


def test_prefill_moves_only_kv_and_that_counts():
    a = r.read_text(expo({'0': engine(running=1, steps=10, kv=0.0026)}))
    b = r.read_text(expo({'0': engine(running=1, steps=10, kv=0.0045)}))
    assert r.engine_moves(a, b) == {'0': {'vllm:kv_cache_usage_perc': 0.0019}}


def test_idle_ticks_are_not_progress_on_v0():
    a = r.read_text(expo({'0': engine(steps=10)}, v0=True))
    b = r.read_text(expo({'0': engine(steps=14)}, v0=True))
    assert a.v0 and b.v0
    assert r.engine_moves(a, b) == {'0': {STEPS: 4.0}}
    assert r.engine_moves(a, b, idle_ticks=True) == {'0': {}}


def test_per_engine_values_and_sums():
    reading = r.read_text(expo({'0': engine(running=2, gen=10, kv=0.1), '1': engine(running=1, waiting=2, gen=5,
                                                                                    kv=0.3)}))
    assert reading.running == 3 and reading.waiting == 2 and reading.in_flight == 5
    assert reading.counter(GENERATION) == 15
    assert reading.kv_cache == 0.3
    assert reading.engines['1'].running == 1


def test_kv_cache_takes_max_over_pid_label_and_skips_nan():
    text = ('vllm:kv_cache_usage_perc{engine="0",model_name="m",pid="1"} 0.2\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m",pid="2"} 0.5\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m",pid="3"} NaN\n')
    reading = r.read_text(text)
    assert reading.engines['0'].kv_cache == 0.5
    assert reading.engines['1'].kv_cache is None


def test_sleeping_only_when_every_engine_sleeps():
    assert r.read_text(expo({'0': engine(awake=0)})).sleeping is True
    assert r.read_text(expo({'0': engine(awake=0), '1': engine(awake=1)})).sleeping is False


def test_no_vllm_series():
    reading = r.read_text(expo(vllm=False))
    assert reading.has_vllm is False
    assert reading.start_time is not None


def test_unknown_extra_labels_are_tolerated():
    text = 'vllm:num_requests_running{engine="0",model_name="m",zone="a",extra="b"} 4.0\n'
    assert r.read_text(text).running == 4


def test_rate():
    a = r.read_text(expo({'0': engine(steps=100, gen=300)}), at=10.0)
    b = r.read_text(expo({'0': engine(steps=600, gen=1300)}), at=15.0)
    assert r.rate(a, b, STEPS) == 100.0
    assert r.rate(a, b, GENERATION) == 200.0
    assert r.rate(b, a, STEPS) is None


def test_request_gauges_are_summed_over_their_other_labels_never_the_last_sample_alone():
    text = ('vllm:num_requests_running{engine="0",pid="1"} 3\n'
            'vllm:num_requests_running{engine="0",pid="2"} 0\n')
    reading = r.read_text(text)
    assert reading.running == 3 and reading.in_flight == 3


def test_values_that_cannot_be_true_are_named_a_few_times_then_counted():
    text = ''.join('vllm:num_requests_running{engine="0",n="%d"} NaN\n' % i for i in range(10000))
    reading = r.read_text(text)
    assert reading.in_flight is None
    assert reading.engines['0'].problems == ['num_requests_running=nan']


def test_one_kv_sample_that_cannot_be_true_spoils_the_gauge():
    text = ('vllm:kv_cache_usage_perc{engine="0",pid="1"} 0.5\n'
            'vllm:kv_cache_usage_perc{engine="0",pid="2"} NaN\n'
            'vllm:kv_cache_usage_perc{engine="0",pid="3"} 0.7\n')
    assert r.read_text(text).engines['0'].kv_cache is None
