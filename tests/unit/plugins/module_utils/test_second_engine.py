"""A second engine is a profile plus fixtures (issue 18).

``FAKE`` is a made-up engine: other metric names (``fake:``, and other family names), other label names and
values, other endpoints, another version scheme, another pause answer and its own words. Its fixtures are
vLLM's (the captures and the generated expositions) with every series, label and answer renamed. The
reader, the window, the client and the judge, given ``FAKE``, reach the same verdicts for the same reasons
(the names in them aside), and nothing of vLLM's is read: the vLLM names are not in the fake fixtures.
"""

import json
import re

from types import MappingProxyType

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _check, _readings, _stall
from ansible_collections.modelops.vllm.plugins.module_utils._http import Client
from ansible_collections.modelops.vllm.plugins.module_utils._ready import new_process, read_process
from ansible_collections.modelops.vllm.plugins.module_utils._types import Fetched
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import PROFILE, EngineProfile, engine_is_dead

from fakes import (
    timed,
    two_waits,
    HEALTH_OK,
    MODELS,
    NO_ANSWER,
    NOT_FOUND,
    NOT_PAUSED,
    PAUSED,
    VERSION,
    Clock,
    FakeServer,
    capture,
    completion,
    engine,
    expo,
)

# -- the made-up engine ------------------------------------------------------------------------------

# vLLM's metric families -> the fake engine's (a sample is its family plus one of SUFFIXES).
FAMILIES = {
    'vllm:num_requests_running': 'fake:requests_running',
    'vllm:num_requests_waiting': 'fake:requests_queued',
    'vllm:num_requests_waiting_by_reason': 'fake:requests_queued_by_reason',
    'vllm:kv_cache_usage_perc': 'fake:kv_usage_ratio',
    'vllm:gpu_cache_usage_perc': 'fake:gpu_kv_usage_ratio',
    'vllm:engine_sleep_state': 'fake:sleep_state',
    'vllm:rl_weight_update_operations_in_flight': 'fake:weight_updates_in_flight',
    'vllm:num_requests_swapped': 'fake:requests_swapped',
    'vllm:cpu_cache_usage_perc': 'fake:cpu_kv_usage_ratio',
    'vllm:iteration_tokens_total': 'fake:step_tokens',
    'vllm:generation_tokens': 'fake:output_tokens',
    'vllm:prompt_tokens': 'fake:input_tokens',
    'vllm:request_success': 'fake:requests_finished',
    'vllm:num_preemptions': 'fake:preemptions',
    'vllm:estimated_flops_per_gpu': 'fake:flops',
    'process_start_time_seconds': 'fake_process_start_seconds',
}
SUFFIXES = ('', '_total', '_created', '_bucket', '_count', '_sum')
# (vLLM's label, its value or None for any) -> the fake engine's.
LABELS = [
    (('finished_reason', 'abort'), ('end', 'cancelled')),
    (('finished_reason', 'error'), ('end', 'failed')),
    (('finished_reason', None), ('end', None)),
    (('reason', 'deferred'), ('why', 'parked')),
    (('reason', None), ('why', None)),
    (('sleep_state', 'awake'), ('mode', 'up')),
    (('sleep_state', None), ('mode', None)),
    (('engine', None), ('dp_rank', None)),
    (('model_name', None), ('served_model', None)),
]
# vLLM's /version answers -> the fake engine's build numbers (below b800 its idle engine ticks).
VERSIONS = {'0.32.0': 'b900', '0.7.3': 'b790', '0.6.6': 'b700'}


def series(name):
    """A vLLM series name as the fake engine names it."""
    for family in sorted(FAMILIES, key=len, reverse=True):
        for suffix in SUFFIXES:
            if name == family + suffix:
                return FAMILIES[family] + suffix
    return 'fake:' + name[len('vllm:'):] if name.startswith('vllm:') else name


def _fake_version(text):
    match = re.match(r'\s*b(\d{1,6})$', text or '')
    return (int(match.group(1)),) if match else None


def _fake_pause_body(fetched):
    if fetched.error or fetched.status != 200:
        return None
    body = fetched.json()
    return body.get('paused') if isinstance(body, dict) else None


FAKE = EngineProfile(
    name='fake', prefix='fake:',
    running=series(PROFILE.running), waiting=series(PROFILE.waiting),
    waiting_by_reason=series(PROFILE.waiting_by_reason), kv_cache=tuple(series(n) for n in PROFILE.kv_cache),
    sleep_state=series(PROFILE.sleep_state), weight_updates=series(PROFILE.weight_updates),
    start_time='fake_process_start_seconds', v0_only=tuple(series(n) for n in PROFILE.v0_only),
    steps='fake:step_tokens_count', generation='fake:output_tokens_total', prompt='fake:input_tokens_total',
    success='fake:requests_finished_total', preemptions='fake:preemptions_total',
    progress_counters=('fake:step_tokens_count', 'fake:step_tokens_sum', 'fake:output_tokens_total',
                       'fake:input_tokens_total', 'fake:requests_finished_total', 'fake:preemptions_total',
                       'fake:flops_total'),
    gauges=tuple(series(n) for n in PROFILE.gauges), created_suffix='_created',
    websockets=series(PROFILE.websockets),
    step_histograms=tuple((what, series(name)) for what, name in PROFILE.step_histograms), bucket_label='le',
    engine_label='dp_rank', default_engine='0', model_label='served_model', reason_label='why', deferred='parked',
    sleep_label='mode', awake='up', finished_label='end', not_completed=('cancelled', 'failed'),
    stall_counters=MappingProxyType({'generation': 'fake:output_tokens_total', 'steps': 'fake:step_tokens_count',
                                     'prompt': 'fake:input_tokens_total', 'preemptions': 'fake:preemptions_total'}),
    metrics_path='stats/prometheus', health_path='healthz', version_path='about', models_path='v1/models',
    pause_path='paused', probe_paths=MappingProxyType({'completions': 'v1/completions', 'chat': 'v1/chat/completions'}),
    idle_ticks_before=(800,), parse_version=_fake_version, engine_is_dead=engine_is_dead,
    pause_answer=lambda fetched: _fake_pause_body(fetched) is True,
    pause_denied=lambda fetched: _fake_pause_body(fetched) is False,
    title='FakeLM', no_metrics_hint='a server started with --no-metrics',
    pause_proof='GET /paused answered {"paused": true}',
    no_start_time_hint='FakeLM with --workers above 1 reports no start time',
)


def translate_text(text):
    """A vLLM exposition as the fake engine writes it."""
    text = re.sub(r'(?<![\w:])(vllm:[A-Za-z0-9_:]*|process_start_time_seconds)(?![\w:])',
                  lambda m: series(m.group(1)), text)
    for (label, value), (new, new_value) in LABELS:
        if value is None:
            text = re.sub(r'([{,])%s=' % label, r'\1%s=' % new, text)
        else:
            text = re.sub(r'([{,])%s="%s"' % (label, value), r'\1%s="%s"' % (new, new_value), text)
    return text


def translate(fetched):
    """One scripted answer of a vLLM server as the fake engine gives it."""
    if not isinstance(fetched, Fetched):
        return translate_text(fetched)
    text = fetched.text
    if text:
        text = translate_text(text).replace('"is_paused"', '"paused"')
        for old, new in VERSIONS.items():
            text = text.replace('"version":"%s"' % old, '"version":"%s"' % new)
    return Fetched(status=fetched.status, text=text, error=fetched.error, message=fetched.message,
                   seconds=fetched.seconds)


def fake_server(metrics, probe=None, health=HEALTH_OK, version=VERSION, models=MODELS, is_paused=NOT_FOUND):
    """The FakeServer of the fake engine for the arguments of a vLLM one."""
    def each(answers):
        return [translate(a) for a in answers] if isinstance(answers, list) else translate(answers)
    return FakeServer(each(metrics), probe=None if probe is None else each(probe), health=each(health),
                      version=each(version), models=models, is_paused=each(is_paused))


# -- comparing the verdicts ---------------------------------------------------------------------------

_SERIES_FIELDS = ('running', 'waiting', 'waiting_by_reason', 'kv_cache', 'sleep_state', 'weight_updates',
                  'start_time', 'v0_only', 'steps', 'generation', 'prompt', 'success', 'preemptions',
                  'progress_counters', 'gauges', 'websockets', 'step_histograms')
_WORDS = ('no_start_time_hint', 'no_metrics_hint', 'pause_proof', 'title', 'prefix')


def _placeholders(profile):
    """Every name and word of a profile -> a placeholder that is the same for both engines."""
    names = {}
    for field in _SERIES_FIELDS:
        value = getattr(profile, field)
        if field == 'step_histograms':
            value = tuple(name for dummy, name in value)
        for i, name in enumerate(value if isinstance(value, tuple) else (value,)):
            names.setdefault(name, '<%s.%d>' % (field, i))
    out = dict(names)
    for name, mark in names.items():
        out.setdefault(name.replace(profile.prefix, ''), mark)  # the verdict names moved series without prefix
    for field in _WORDS:
        out.setdefault(getattr(profile, field), '<%s>' % field)
    out['%s %s' % (profile.sleep_state, profile.awake)] = '<sleep_state awake>'  # the sleeping verdict's words
    out['<created>'] = (profile.prefix, profile.created_suffix)
    return out


def _normal_text(text, marks):
    # Which *_created series a restart's reason names first is the order of a set: any of them.
    created = marks['<created>']
    text = re.sub(r'(?<![\w:])%s[\w:]*%s(?!\w)' % (re.escape(created[0]), re.escape(created[1])), '<created>', text)
    pattern = '|'.join(re.escape(key) for key in sorted(marks, key=len, reverse=True) if key != '<created>')
    text = re.sub(r'(?<![\w:])(%s)(?!\w)' % pattern, lambda m: marks[m.group(1)], text)
    # A list of series in a sentence is sorted by name, which differs between engines.
    return re.sub(r'<[^>]+>(?:, <[^>]+>)+', lambda m: ', '.join(sorted(m.group(0).split(', '))), text)


def normal(value, marks):
    if isinstance(value, dict):
        return dict((normal(k, marks), normal(v, marks)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [normal(v, marks) for v in value]
    if isinstance(value, str):
        return _normal_text(value, marks)
    return value


def judge(server, profile, window=None):
    clock = Clock()
    kwargs = {'freeze': two_waits()} if profile is None else {'profile': profile, 'freeze': two_waits()}
    return Judge(timed(server, clock), interval=5.0, sleep=clock.sleep, clock=clock, probe_timeout=30.0, metrics_timeout=10.0,
                 window=window, **kwargs).run()


def comparable(result, profile):
    result = dict(result, evidence=dict(result['evidence']))
    version = result.pop('version')
    result['evidence'].pop('is_paused')  # the answers' own words ({"is_paused": ...} or {"paused": ...})
    return normal(result, _placeholders(profile)), version


def busy(steps, gen=None, kv=0.01, running=3, waiting=0, start=1796004614.13, **kw):
    return expo({'0': engine(running=running, waiting=waiting, steps=steps, step_tokens=steps,
                             gen=steps if gen is None else gen, kv=kv, **kw)}, start=start)


def two(steps0, steps1, running1=2):
    return expo({'0': engine(running=2, steps=steps0, gen=steps0), '1': engine(running=running1, steps=steps1,
                                                                               gen=steps1)})


def bad(text):
    return text.replace('vllm:num_requests_running{engine="0",model_name="tiny"} 3.0',
                        'vllm:num_requests_running{engine="0",model_name="tiny"} -1.0')


SCENARIOS = {
    'idle capture': dict(metrics=[capture('idle_after_load.prom')]),
    'idle, no model label': dict(metrics=[capture('idle_after_start.prom').replace('model_name="tiny"',
                                                                                   'model_name=""')]),
    'busy captures': dict(metrics=[capture('busy_1.prom'), capture('busy_2.prom')]),
    'long prefill': dict(metrics=[busy(10, running=1, kv=0.0026), busy(10, running=1, kv=0.0045)]),
    'work finished': dict(metrics=[busy(100, success=0), busy(160, running=0, success=3)]),
    'stuck captures': dict(metrics=[capture('stuck_1.prom'), capture('stuck_2.prom')]),
    'stuck, health dead': dict(metrics=[capture('stuck_1.prom')], health=Fetched(status=503, text='')),
    'stuck but paused': dict(metrics=[capture('stuck_1.prom')], is_paused=PAUSED),
    'stuck, not paused': dict(metrics=[capture('stuck_1.prom')], is_paused=NOT_PAUSED),
    'idle hang': dict(metrics=[capture('idle_after_load.prom')], probe=NO_ANSWER),
    'lost probe, moved': dict(metrics=[busy(0, running=0), busy(50, running=2)], probe=NO_ANSWER),
    'one of two engines stuck': dict(metrics=[two(100, 50), two(200, 50), two(300, 50)]),
    'deferred only': dict(metrics=[busy(5, running=0, waiting=2, deferred=2)]),
    'aborted only': dict(metrics=[busy(5, gen=0, aborted=1), busy(5, gen=0, aborted=2)]),
    'restart': dict(metrics=[busy(100), capture('idle_after_restart.prom')]),
    'restart by created': dict(metrics=[expo({'0': engine(running=2, steps=100)}, start=None, created=10.0),
                                        expo({'0': engine(running=0, steps=0)}, start=None, created=20.0)]),
    'restart by counters': dict(metrics=[expo({'0': engine(running=2, steps=100, gen=100)}, start=None, created=None),
                                         expo({'0': engine(running=0, steps=3, gen=3)}, start=None, created=None)]),
    'load balancer': dict(metrics=[busy(100, start=2000.0), busy(50, start=1000.0)]),
    'multiprocess capture': dict(metrics=[capture('idle_api_server_count_2.prom')]),
    'bad gauge': dict(metrics=[bad(busy(100))]),
    'NaN kv': dict(metrics=[busy(100).replace('vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.01',
                                              'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} NaN')]),
    'sleeping': dict(metrics=[expo({'0': engine(awake=0)})]),
    'weight update': dict(metrics=[expo({'0': engine(running=2)}, weight_updates={'update': 1})]),
    'no engine metrics': dict(metrics=[expo(vllm=False)]),
    'no engine metrics, dead': dict(metrics=[expo(vllm=False)], health=Fetched(status=503, text='')),
    'V0 idle ticks': dict(metrics=[expo({'0': engine(running=2, steps=10)}, v0=True),
                                   expo({'0': engine(running=2, steps=14)}, v0=True),
                                   expo({'0': engine(running=2, steps=18)}, v0=True)],
                          version=Fetched(status=200, text='{"version":"0.6.6"}')),
    'old version ticks': dict(metrics=[busy(10, gen=0, kv=0.0), busy(14, gen=0, kv=0.0), busy(18, gen=0, kv=0.0)],
                              version=Fetched(status=200, text='{"version":"0.7.3"}')),
    'new version steps': dict(metrics=[busy(10, gen=0, kv=0.0), busy(14, gen=0, kv=0.0)]),
    'probe rejected': dict(metrics=[capture('idle_after_load.prom')], probe=Fetched(status=401, text='{}')),
}


def test_the_fake_fixtures_carry_none_of_vllm_s_names():
    for args in SCENARIOS.values():
        for text in args['metrics']:
            fake = translate(text) if isinstance(text, str) else text
            assert 'vllm:' not in fake and 'process_start_time_seconds' not in fake
            assert not re.search(r'[{,](engine|model_name|finished_reason|reason|sleep_state)=', fake), fake[:200]


def test_the_fake_profile_shares_no_series_label_endpoint_or_word_with_vllm_s():
    for field in EngineProfile._fields:
        mine, theirs = getattr(FAKE, field), getattr(PROFILE, field)
        if field in ('default_engine', 'created_suffix', 'models_path', 'probe_paths', 'engine_is_dead', 'bucket_label'):
            continue  # an engine label value, Prometheus' conventions, the OpenAI API, /health's statuses
        if field == 'step_histograms':
            mine, theirs = tuple(n for dummy, n in mine), tuple(n for dummy, n in theirs)
        assert mine != theirs, field
        if isinstance(theirs, tuple):
            assert not set(mine) & set(theirs), field


@pytest.mark.parametrize('name', sorted(SCENARIOS))
def test_the_fake_engine_reaches_the_same_verdict_for_the_same_reason(name):
    args = SCENARIOS[name]
    vllm = judge(FakeServer(**args), None)
    fake_srv = fake_server(**args)
    fake = judge(fake_srv, FAKE)
    assert fake['state'] == vllm['state'], (fake['reason'], vllm['reason'])
    want, vllm_version = comparable(vllm, PROFILE)
    got, fake_version = comparable(fake, FAKE)
    assert got == want
    assert fake_version == (VERSIONS[vllm_version] if vllm_version else None)
    # The verdict rests on the fake names: nothing of vLLM's is in its result.
    assert 'vllm:' not in json.dumps(fake), name


def test_the_scenarios_cover_every_verdict_the_judge_gives_alone():
    states = set(judge(FakeServer(**args), None)['state'] for args in SCENARIOS.values())
    assert {'idle', 'busy', 'stuck', 'down', 'unknown', 'up', 'restarted', 'sleeping', 'paused'} <= states, states


def test_the_fake_words_reach_the_sentences():
    reasons = dict((name, judge(fake_server(**SCENARIOS[name]), FAKE)['reason'])
                   for name in ('no engine metrics', 'stuck but paused', 'sleeping', 'weight update'))
    assert '/metrics has no fake: series (a server started with --no-metrics)' in reasons['no engine metrics']
    assert 'GET /paused answered {"paused": true}' in reasons['stuck but paused']
    assert '(fake:sleep_state up=0)' in reasons['sleeping']
    assert 'fake:weight_updates_in_flight 1' in reasons['weight update']


def test_the_reader_keeps_the_profile_and_reads_its_names():
    reading = _readings.read_text(translate(capture('busy_2.prom')), profile=FAKE)
    same = _readings.read_text(capture('busy_2.prom'))
    assert reading.profile is FAKE and same.profile is PROFILE
    assert reading.summary()['steps'] == same.summary()['steps'] > 0
    assert reading.in_flight == same.in_flight and reading.kv_cache == same.kv_cache
    assert reading.model_name == same.model_name == 'tiny'
    # Read with the other engine's profile, an exposition has no engine series.
    assert not _readings.read_text(capture('busy_2.prom'), profile=FAKE).has_vllm
    assert not _readings.read_text(translate(capture('busy_2.prom'))).has_vllm


def deadlock(i):
    return expo({'0': engine(running=4, steps=100 + 40 * i, step_tokens=100, prompt=5000 + 9000 * i, gen=300,
                             success=12, kv=0.2)})


def test_the_window_finds_the_livelock_by_the_fake_names():
    def run(profile, texts):
        window, memory, states = None, None, []
        for n in range(4):
            clock = Clock(1796010000.0 + 300.0 * n)  # after the expositions' process started
            kwargs = {} if profile is None else {'profile': profile}
            window = _stall.Window(memory, 600.0, **kwargs)
            states.append(Judge(FakeServer(texts(n)), interval=5.0, sleep=clock.sleep, clock=clock,
                                probe_timeout=30.0, metrics_timeout=10.0, window=window, **kwargs).run())
            memory = window.memory
        return states, memory
    vllm, vllm_memory = run(None, lambda n: [deadlock(2 * n), deadlock(2 * n + 1)])
    fake, fake_memory = run(FAKE, lambda n: [translate(deadlock(2 * n)), translate(deadlock(2 * n + 1))])
    assert [r['state'] for r in fake] == [r['state'] for r in vllm] == ['busy', 'busy', 'stuck', 'stuck']
    assert [normal(r['reason'], _placeholders(FAKE)) for r in fake] == \
        [normal(r['reason'], _placeholders(PROFILE)) for r in vllm]
    assert fake_memory['engines'] == vllm_memory['engines']


def test_the_check_passes_the_registered_profile_to_the_client_the_window_and_the_judge(monkeypatch, tmp_path):
    monkeypatch.setitem(_check.ENGINES, 'fake', FAKE)
    given = []

    def client(url, **kwargs):
        n = len(given)
        given.append(kwargs.get('profile'))
        return FakeServer([translate(deadlock(2 * n)), translate(deadlock(2 * n + 1))])

    spec = {'url': 'http://127.0.0.1:8000', 'name': 'fake', 'interval': 5.0, 'probe_timeout': 30.0,
            'metrics_timeout': 10.0, 'metrics_max_bytes': 1 << 24, 'validate_certs': True,
            'state_dir': str(tmp_path / 'state'), 'stall_window': 600.0, '_check_mode': False}
    states = []
    for n in range(4):
        clock = Clock(1796010000.0 + 300.0 * n)  # after the expositions' process started
        states.append(_check.check_one(spec, sleep=clock.sleep, clock=clock, monotonic=clock, client_class=client,
                                       engine='fake')['state'])
    assert states == ['busy', 'busy', 'stuck', 'stuck']
    assert given == [FAKE] * 4


def test_the_client_asks_the_fake_engine_s_endpoints():
    asked = []
    client = Client('http://127.0.0.1:9', profile=FAKE)
    client.request = lambda method, path, timeout, **kwargs: asked.append((method, path)) or HEALTH_OK
    for call in (client.metrics, client.health, client.version, client.models, client.is_paused):
        call()
    client.probe('tiny')
    assert asked == [('GET', 'stats/prometheus'), ('GET', 'healthz'), ('GET', 'about'), ('GET', 'v1/models'),
                     ('GET', 'paused'), ('POST', 'v1/completions')]
    assert Client('http://127.0.0.1:9').profile is PROFILE


def test_the_restart_wait_reads_the_client_s_profile_and_its_words():
    class Server(FakeServer):
        profile = FAKE
    before = read_process(Server([translate(expo({'0': engine(running=2, steps=100, gen=100)}, start=None,
                                                 created=None))]))
    after = read_process(Server([translate(expo({'0': engine(running=2, steps=120, gen=120)}, start=None,
                                                created=None))]))
    assert before.profile is FAKE and before.counter(FAKE.steps) == 100
    proven, why = new_process(before, after)
    assert proven is False and FAKE.no_start_time_hint in why and 'vLLM' not in why


def test_a_probe_answer_is_the_same_for_both():
    # The one-token probe speaks the OpenAI API, which both engines serve.
    args = dict(metrics=[capture('idle_after_load.prom')], probe=completion())
    assert judge(fake_server(**args), FAKE)['probe'] == judge(FakeServer(**args), None)['probe']
