"""`stuck` needs proof: every way evidence can be missing, untrue or too short, on scripted reads.

Each row is a server that is NOT shown to be hung and must not be called stuck, next to the row
that IS the genuine hang, so the table proves both directions of the rule in docs/health.md.
"""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._settings import check_deadline
from ansible_collections.modelops.vllm.plugins.module_utils._types import Fetched
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge

from fakes import NO_ANSWER, Clock, FakeServer, capture, completion, engine, expo, timed, two_waits

KV_LINE = 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.01'


def judge(server, interval=5.0, deadline=None, clock=None, **kwargs):
    clock = clock or Clock()
    kwargs.setdefault('freeze', two_waits())
    return Judge(timed(server, clock), interval=interval, sleep=clock.sleep, clock=clock, probe_timeout=30.0,
                 metrics_timeout=10.0, deadline=deadline, **kwargs).run()


def frozen(**kw):
    """One engine with work in flight whose numbers never move."""
    kw.setdefault('running', 3)
    return expo({'0': engine(steps=100, step_tokens=100, gen=100, kv=0.01, **kw)})


def without(text, *prefixes):
    """The exposition without the sample lines of these names."""
    return ''.join(line + '\n' for line in text.splitlines()
                   if not any(line.startswith(prefix) for prefix in prefixes))


def replace_value(text, prefix, value):
    out = []
    for line in text.splitlines():
        if line.startswith(prefix):
            line = line.rsplit(' ', 1)[0] + ' ' + value
        out.append(line)
    return '\n'.join(out) + '\n'


COUNTERS = ('vllm:generation_tokens_total', 'vllm:prompt_tokens_total', 'vllm:request_success_total',
            'vllm:iteration_tokens_total', 'vllm:estimated_flops_per_gpu_total')


def test_the_genuine_busy_hang_is_stuck():
    server = FakeServer([frozen()])
    result = judge(server)
    assert result['state'] == 'stuck', result['reason']


@pytest.mark.parametrize('text', [
    pytest.param(without(frozen(), *COUNTERS + ('vllm:kv_cache_usage_perc',)), id='gauges-no-counters-no-kv'),
    pytest.param(without(frozen(), 'vllm:kv_cache_usage_perc'), id='counters-but-no-kv-gauge'),
    pytest.param(without(frozen(), *COUNTERS), id='kv-but-no-counter'),
    pytest.param(replace_value(without(frozen(), 'vllm:kv_cache_usage_perc'), 'vllm:generation_tokens_total', 'NaN'),
                 id='counters-nan-no-kv'),
])
def test_in_flight_without_usable_progress_series_is_unknown(text):
    server = FakeServer([text])
    result = judge(server)
    assert result['state'] == 'unknown', result['reason']
    assert 'cannot be shown' in result['reason']
    assert server.count('probe') == 0


@pytest.mark.parametrize('value', ['NaN', '+Inf', '-Inf', '-1'])
def test_counters_that_cannot_be_true_are_not_readings(value):
    # Every counter spoiled: nothing is left to show that nothing moved.
    text = frozen()
    for name in COUNTERS:
        text = replace_value(text, name, value)
    result = judge(FakeServer([text]))
    assert result['state'] == 'unknown', result['reason']
    assert any('cannot be true' in note for note in result['evidence']['notes'])


def test_a_read_cut_at_a_line_boundary_after_the_request_gauges_is_unknown():
    full = frozen()
    cut = full[:full.index('# TYPE vllm:num_requests_waiting_by_reason')]
    assert cut.endswith('\n')
    result = judge(FakeServer([full, cut, full]))
    assert result['state'] == 'unknown', result['reason']
    assert 'progress series changed' in result['reason']


def test_running_on_an_engine_whose_counters_are_on_another_engine_is_unknown():
    text = frozen(running=0)
    text += 'vllm:num_requests_running{engine="1",model_name="tiny"} 2.0\n'
    result = judge(FakeServer([text]))
    assert result['state'] == 'unknown', result['reason']
    assert 'engine 1' in result['reason']


@pytest.mark.parametrize('running, waiting', [
    ('-1', '0'), ('-1', '1'), ('NaN', '0'), ('+Inf', '0'), ('0', 'NaN'), ('1e300', '1e300'), ('3', '-Inf'),
])
def test_request_gauges_that_cannot_be_true_are_unknown_and_never_probed(running, waiting):
    text = replace_value(replace_value(frozen(running=0), 'vllm:num_requests_running', running),
                         'vllm:num_requests_waiting{', waiting)
    server = FakeServer([text])
    result = judge(server)
    assert result['state'] == 'unknown', result['reason']
    assert 'cannot be true' in result['reason']
    assert server.count('probe') == 0


def test_a_negative_running_plus_a_waiting_request_never_sums_to_idle():
    text = replace_value(replace_value(frozen(running=0), 'vllm:num_requests_running', '-1'),
                         'vllm:num_requests_waiting{', '1')
    server = FakeServer([text])
    assert judge(server)['state'] == 'unknown'
    assert server.count('probe') == 0


def test_deferred_above_waiting_still_counts_as_in_flight():
    text = replace_value(frozen(running=0), 'vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",'
                                            'reason="deferred"}', '2')
    server = FakeServer([text])
    assert judge(server)['state'] != 'idle'
    assert server.count('probe') == 0


@pytest.mark.parametrize('kv', ['NaN', '+Inf', '-0.5', '1.5'])
def test_a_kv_gauge_that_cannot_be_true_is_no_progress_series(kv):
    result = judge(FakeServer([replace_value(frozen(), 'vllm:kv_cache_usage_perc', kv)]))
    assert result['state'] == 'unknown', result['reason']


def test_nan_start_time_and_created_values_are_no_restart():
    text = replace_value(frozen(), 'process_start_time_seconds', 'NaN')
    text = replace_value(text, 'vllm:generation_tokens_created', 'NaN')
    result = judge(FakeServer([text]))
    assert result['restarted'] is False
    assert result['state'] == 'stuck'  # the rest of the evidence is intact


# -- waits that did not really span the interval --------------------------------

class NoSleep(Clock):
    """A sleep that returns at once: the reads are not an interval apart."""

    def sleep(self, seconds):
        self.sleeps.append(seconds)


def test_nothing_moved_across_reads_that_were_not_an_interval_apart_is_unknown():
    clock = NoSleep()
    result = judge(FakeServer([frozen()]), clock=clock)
    assert result['state'] == 'unknown', result['reason']
    assert 'not the interval' in result['reason']


# -- probes: only a full, unanswered wait is evidence ------------------------------

IDLE = capture('idle_after_load.prom')


def test_the_genuine_idle_hang_is_stuck():
    result = judge(FakeServer([IDLE], probe=NO_ANSWER))
    assert result['state'] == 'stuck', result['reason']
    assert 'each waited their full' in result['reason']


@pytest.mark.parametrize('probe', [
    pytest.param(Fetched(error='dropped', message='Connection reset by peer', seconds=0.004), id='reset'),
    pytest.param(Fetched(error='dropped', message='RemoteDisconnected', seconds=0.01), id='closed'),
    pytest.param(Fetched(error='timeout', message='no complete answer in 2.1 s', seconds=2.1), id='cut-short'),
    pytest.param(Fetched(error='deadline', message='deadline passed', seconds=0.0), id='deadline'),
    pytest.param(Fetched(error='client', message='ValueError: x', seconds=0.0), id='client-failure'),
])
def test_a_probe_that_did_not_wait_its_full_timeout_is_no_evidence(probe):
    server = FakeServer([IDLE], probe=probe)
    result = judge(server)
    assert result['state'] == 'unknown', result['reason']
    assert server.count('probe') == 1


def test_a_reset_probe_reason_does_not_claim_a_wait():
    result = judge(FakeServer([IDLE], probe=Fetched(error='dropped', message='reset', seconds=0.004)))
    assert '30.0 s each' not in result['reason'] and 'closed after 0.00 s' in result['reason']


def test_unanswered_probes_without_progress_series_are_unknown():
    idle = without(IDLE, *COUNTERS + ('vllm:kv_cache_usage_perc',))
    result = judge(FakeServer([idle], probe=NO_ANSWER))
    assert result['state'] == 'unknown', result['reason']
    assert 'cannot be shown' in result['reason']


def test_one_full_wait_then_a_reset_is_not_stuck():
    result = judge(FakeServer([IDLE], probe=[NO_ANSWER, Fetched(error='dropped', message='reset', seconds=0.01)]))
    assert result['state'] == 'unknown'


# -- the overall deadline ---------------------------------------------------------

class SlowServer(FakeServer):
    """Every answer takes just under its timeout, on the judge's clock."""

    def __init__(self, clock, *args, **kwargs):
        super(SlowServer, self).__init__(*args, **kwargs)
        self.clock = clock

    def _answer(self, what):
        self.clock.now += 9.9
        return super(SlowServer, self)._answer(what)


def test_the_deadline_formula():
    assert check_deadline(5, 30, 10) == 150
    assert check_deadline(1, 2, 3) == 2 + 4 + 24


def test_a_check_that_would_outlive_its_deadline_is_unknown():
    clock = Clock()
    server = SlowServer(clock, [frozen()])
    result = judge(server, clock=clock, deadline=25.0)
    assert result['state'] == 'unknown', result['reason']
    assert 'overall time' in result['reason']
    assert clock.now - 1000.0 <= 25.0 + 9.9


def test_a_check_within_its_deadline_is_judged():
    clock = Clock()
    result = judge(SlowServer(clock, [frozen()]), clock=clock, deadline=check_deadline(5, 30, 10))
    assert result['state'] == 'stuck'


# -- bounded evidence ----------------------------------------------------------------

def test_evidence_keeps_at_most_16_engines_per_read():
    engines = dict((str(k), engine(running=1, steps=k, gen=k, kv=0.01)) for k in range(40))
    moving = dict((str(k), engine(running=1, steps=k + 5, gen=k + 5, kv=0.01)) for k in range(40))
    result = judge(FakeServer([expo(engines), expo(moving)]))
    assert result['state'] == 'busy'
    read = result['evidence']['reads'][0]
    assert len(read['engines']) == 16 and read['engines_not_shown'] == 24
    assert result['evidence']['moved'][0]['engines_not_shown'] == 24


def test_more_engines_than_any_deployment_is_unknown():
    text = ''.join('vllm:num_requests_running{engine="%d"} 0\n' % k for k in range(300))
    result = judge(FakeServer([text]))
    assert result['state'] == 'unknown'
    assert 'more than 256 engine' in result['reason']


def test_a_long_model_name_is_not_used_for_the_probe():
    text = IDLE.replace('model_name="tiny"', 'model_name="%s"' % ('m' * 5000))
    server = FakeServer([text], probe=completion())
    result = judge(server)
    assert result['probe']['model'] == 'tiny'  # from /v1/models
    assert server.count('models') == 1
