"""Property-based tests (hypothesis) of the pure parts, for the hostile-input tier (issue 8).

They assert the contract, not today's output:

* the parser (``_prometheus.parse``) never raises anything but ``ExpositionError``, whatever the text
  (arbitrary text, bytes decoded as UTF-8 or Latin-1, a soup of exposition tokens), and agrees with
  ``prometheus_client`` on generated valid expositions;
* readings (``_readings``) never give a request gauge that is negative, NaN or infinite, and never
  "0 in flight" when a request gauge is not a reading;
* the verdict (``_verdict.Judge`` with a scripted server, an injected clock and sleep) never raises, never
  probes a server whose last read reports anything running or waiting (or a request gauge that is not a
  reading), and says ``stuck`` only when rule 1 of the contract holds in what the server actually served:
  (a) three reads of one process, each wait really spanning ``interval``, in which an engine with work
  in flight kept the same present, finite progress series (engine counters and the KV-cache gauge) without
  a move; or (b) two probes that each waited the full ``probe_timeout`` unanswered while every read showed
  nothing in flight and nothing moved;
* the decision (``_decide.decide``) never raises on generated histories, services and (valid) settings, and
  never returns ``restart`` for a state other than stuck/down, when paused, within the start-up grace
  (of the service's start, vLLM's own start, or the last restart), or past the restart budget.
"""

import inspect
import json
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.modelops.vllm.plugins.module_utils import _decide, _readings, _types
from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import ExpositionError, parse
from ansible_collections.modelops.vllm.plugins.module_utils._types import Fetched
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge
from ansible_collections.modelops.vllm.plugins.module_utils._freeze import Freeze

from tests.support import hostile as h

NAN, INF = float('nan'), float('inf')
READING_ERRORS = tuple(set([ExpositionError, getattr(_readings, 'ReadingError', ExpositionError)]))
COUNTERS = h.PROGRESS
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)


def finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def usable(value):
    """A progress series' value that is a reading: finite and not negative."""
    return finite(value) and value >= 0


def reading_value(value):
    """A request gauge that is a reading: absent, or finite and not negative."""
    return value is None or (finite(value) and value >= 0)


# --------------------------------------------------------------------------- the parser never raises

TOKENS = ['vllm:num_requests_running', 'vllm:generation_tokens_total', 'process_start_time_seconds', 'x', '_', ':',
          '{', '}', '"', '\\', '\\"', '\\n', '=', ',', ' ', '\t', '\n', '\r', '\x00', 'engine', 'model_name', '0', '1',
          '-1', '1e309', '1.5e+09', 'NaN', '+Inf', '-Inf', 'nan', 'Infinity', '#', '# HELP ', '# TYPE ', 'gauge',
          '<html>', '[', '\u2028', '\u00e9', '\ufeff', '\udcff'.encode('utf-8', 'surrogatepass').decode('utf-8', 'replace'),
          '999999999999999999999', '0x10', '1_000', '.', 'e', '+', '-']


@SETTINGS
@given(st.text())
def test_parse_arbitrary_text_raises_only_exposition_error(text):
    h.REGISTRY.examples('parser: arbitrary text')
    for candidate in (text, text + '\n'):
        try:
            parse(candidate)
        except ExpositionError:
            pass


@SETTINGS
@given(st.binary(max_size=2000), st.sampled_from(['utf-8', 'latin-1']))
def test_parse_decoded_bytes_raises_only_exposition_error(data, encoding):
    h.REGISTRY.examples('parser: decoded bytes')
    text = data.decode(encoding, 'replace')
    for candidate in (text, text + '\n'):
        try:
            parse(candidate)
            parse(candidate, {'vllm:num_requests_running'})
        except ExpositionError:
            pass


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_parse_token_soup_raises_only_exposition_error(tokens):
    h.REGISTRY.examples('parser: token soup')
    text = ''.join(tokens)
    for candidate in (text, text + '\n'):
        try:
            parse(candidate)
        except ExpositionError:
            pass
        try:
            _readings.read_text(candidate)
        except READING_ERRORS:
            pass


# --------------------------------------------------------------------------- the parser agrees with prometheus_client

_names = st.from_regex(r'[a-zA-Z_:][a-zA-Z0-9_:]{0,15}', fullmatch=True)
_label_names = st.from_regex(r'[a-zA-Z][a-zA-Z0-9_]{0,8}', fullmatch=True)
_label_values = st.text(alphabet=st.characters(blacklist_categories=('Cs',), blacklist_characters='\r'), max_size=10)
_numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                     st.integers(min_value=-10 ** 15, max_value=10 ** 15).map(float))


def _escape(value):
    return value.replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


@st.composite
def _value_text(draw):
    value = draw(_numbers)
    if math.isnan(value):
        return draw(st.sampled_from(['NaN', 'nan', 'NAN'])), value
    if math.isinf(value):
        text = draw(st.sampled_from(['+Inf', '+inf', 'Inf'])) if value > 0 else draw(st.sampled_from(['-Inf', '-inf']))
        return text, value
    form = draw(st.sampled_from(['repr', 'exp', 'int']))
    if form == 'exp':
        return '%e' % value, float('%e' % value)
    if form == 'int' and value == int(value) and abs(value) < 1e15:
        return '%d' % value, value
    return repr(value), value


@st.composite
def valid_expositions(draw):
    suffixes = ('_total', '_count', '_sum', '_bucket', '_created')
    families = draw(st.dictionaries(_names.filter(lambda n: not n.endswith(suffixes)),
                                    st.sampled_from(['gauge', 'counter', 'untyped', 'histogram']),
                                    min_size=1, max_size=5))
    lines = []
    for name, kind in families.items():
        if draw(st.booleans()):
            lines.append('# HELP %s %s' % (name, draw(st.text(alphabet='abc xyz\\', max_size=20)).replace('\\', '\\\\')))
        lines.append('# TYPE %s %s' % (name, kind))
        label_sets = draw(st.lists(st.dictionaries(_label_names.filter(lambda n: n != 'le'), _label_values,
                                                   max_size=3),
                                   min_size=1, max_size=3, unique_by=lambda d: tuple(sorted(d.items()))))
        # As vLLM writes them (and as prometheus_client reads them): a counter's sample ends in _total.
        samples = {'histogram': [name + '_count', name + '_sum'], 'counter': [name + '_total']}.get(kind, [name])
        for sample in samples:
            for labels in label_sets:
                inner = ','.join('%s="%s"' % (k, _escape(v)) for k, v in sorted(labels.items()))
                text, dummy = draw(_value_text())
                stamp = ' %d' % draw(st.integers(0, 2 ** 40)) if draw(st.booleans()) else ''
                lines.append('%s%s %s%s' % (sample, '{%s}' % inner if labels else '', text, stamp))
        if draw(st.booleans()):
            lines.append('')
    return '\n'.join(lines) + '\n'


def _norm(value):
    return 'nan' if math.isnan(value) else value


@SETTINGS
@given(valid_expositions())
def test_parse_agrees_with_prometheus_client(text):
    h.REGISTRY.examples('parser: valid expositions vs prometheus_client')
    ours = sorted((n, tuple(sorted(labels)), _norm(v)) for n, labels, v in parse(text))
    theirs = sorted((s.name, tuple(sorted(s.labels.items())), _norm(s.value))
                    for family in text_string_to_metric_families(text) for s in family.samples)
    assert ours == theirs


# --------------------------------------------------------------------------- readings

REQUEST_VALUES = [None, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, -1.0, NAN, INF, -INF, 0.5]
KV_VALUES = [None, 0.1, 0.1, 0.2, NAN, INF, -0.5]
COUNTER_VALUES = [None, 10.0, 10.0, 20.0, NAN, INF, -5.0]


@st.composite
def engines(draw, max_engines=3):
    keys = draw(st.lists(st.sampled_from(['0', '1', '2', '10']), min_size=1, max_size=max_engines, unique=True))
    out = {}
    for key in keys:
        engine = {'running': draw(st.sampled_from(REQUEST_VALUES)), 'waiting': draw(st.sampled_from(REQUEST_VALUES)),
                  'kv': draw(st.sampled_from(KV_VALUES))}
        for counter in COUNTERS:
            engine[counter] = draw(st.sampled_from(COUNTER_VALUES))
        out[key] = engine
    return out


def exposition(engine_data, start=1796000000.0):
    return h.vllm_text(engine_data, start=start)


@SETTINGS
@given(engines())
def test_readings_never_give_a_negative_nan_or_infinite_request_count(data):
    h.REGISTRY.examples('readings: generated engines')
    reading = _readings.read_text(exposition(data))
    for key, engine in reading.engines.items():
        for field in ('running', 'waiting'):
            value = getattr(engine, field)
            assert reading_value(value), 'engine %s %s = %r is not a reading' % (key, field, value)
    for total in (reading.running, reading.waiting):
        assert reading_value(total), total
    in_flight = reading.in_flight
    assert in_flight is None or (finite(in_flight) and in_flight >= 0), in_flight
    bad = [(k, f) for k, e in data.items() for f in ('running', 'waiting') if not reading_value(e[f])]
    reported = [(k, f) for k, e in data.items() for f in ('running', 'waiting') if finite(e[f]) and e[f] > 0]
    if bad:
        assert in_flight != 0, 'request gauges that are not readings (%s) read as "0 in flight"' % bad
    elif reported:
        assert in_flight is not None and in_flight > 0, (reported, in_flight)
    else:
        assert in_flight == 0, in_flight
    summary = reading.summary()
    json.dumps(summary)
    for field in ('running', 'waiting'):
        assert reading_value(summary.get(field)), summary.get(field)


# --------------------------------------------------------------------------- the verdict

class FakeClock(object):
    """Moves only when the judge sleeps (by ``factor`` x the asked seconds) or a request takes time."""

    def __init__(self, factor=1.0):
        self.now = 1796000000.0
        self.factor = factor
        self.sleeps = []

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds * self.factor


class Scripted(object):
    """A vLLM server that serves scripted /metrics reads and probe answers, and records what it served."""

    def __init__(self, clock, reads, probes, health):
        self.clock = clock
        self.reads = reads          # ('ok', engines, start) or ('timeout',) / ('refused',) / ('html',)
        self.probe_script = probes  # Fetched values
        self.health_answer = health
        self.served = []            # (time, read)
        self.probe_log = []         # (time, last valid read before it, Fetched)
        self.metrics_timeout = 2.0

    def metrics(self):
        read = self.reads[min(len(self.served), len(self.reads) - 1)]
        self.served.append((self.clock(), read))
        if read[0] == 'ok':
            self.clock.advance(0.005)
            return Fetched(status=200, text=exposition(read[1], read[2]), seconds=0.005)
        if read[0] == 'timeout':
            self.clock.advance(self.metrics_timeout)
            return Fetched(error='timeout', message='no complete answer', seconds=self.metrics_timeout)
        if read[0] == 'refused':
            return Fetched(error='refused', message='connection refused', seconds=0.001)
        return Fetched(status=200, text='<html><body>502</body></html>\n', seconds=0.003)

    def probe(self, model):
        valid = [read for dummy, read in self.served if read[0] == 'ok']
        answer = self.probe_script[min(len(self.probe_log), len(self.probe_script) - 1)]
        self.probe_log.append((self.clock(), valid[-1] if valid else None, answer))
        self.clock.advance(answer.seconds or 0.0)
        return Fetched(status=answer.status, text=answer.text, error=answer.error, message=answer.message,
                       seconds=answer.seconds)

    def health(self):
        return self.health_answer

    def version(self):
        return Fetched(status=200, text='{"version":"0.32.0"}', seconds=0.002)

    def models(self):
        return Fetched(status=200, text='{"data":[{"id":"tiny"}]}', seconds=0.002)

    def is_paused(self):
        return Fetched(status=404, text='{"detail":"Not Found"}', seconds=0.001)


def _completion():
    return json.dumps({'choices': [{'text': 'x', 'finish_reason': 'length'}], 'usage': {'completion_tokens': 1}})


def probe_answers(probe_timeout):
    return st.sampled_from([
        ('ok', Fetched(status=200, text=_completion(), seconds=0.05)),
        ('full wait', Fetched(error='timeout', message='no answer', seconds=probe_timeout)),
        ('full wait', Fetched(error='timeout', message='no answer', seconds=probe_timeout)),
        ('cut short', Fetched(error='timeout', message='no answer', seconds=probe_timeout * 0.3)),
        ('reset', Fetched(error='dropped', message='Connection reset by peer', seconds=0.01)),
        ('5xx', Fetched(status=500, text='', seconds=0.01)),
        ('401', Fetched(status=401, text='', seconds=0.01)),
        ('refused', Fetched(error='refused', message='connection refused', seconds=0.001)),
    ])


@st.composite
def read_sequences(draw):
    """Reads as a hung, moving, restarting or lying server would serve them: often frozen."""
    current = draw(engines(max_engines=2))
    start = 1796000000.0
    reads = [('ok', current, start)]
    for dummy in range(draw(st.integers(0, 6))):
        step = draw(st.sampled_from(['same', 'same', 'same', 'change', 'change', 'error', 'restart']))
        if step == 'same':
            reads.append(('ok', current, start))
        elif step == 'change':
            key = draw(st.sampled_from(sorted(current)))
            field = draw(st.sampled_from(['running', 'waiting', 'kv'] + list(COUNTERS)))
            values = REQUEST_VALUES if field in ('running', 'waiting') else KV_VALUES if field == 'kv' else \
                COUNTER_VALUES + [30.0, 40.0]
            current = dict(current)
            current[key] = dict(current[key], **{field: draw(st.sampled_from(values))})
            reads.append(('ok', current, start))
        elif step == 'error':
            reads.append((draw(st.sampled_from(['timeout', 'refused', 'html'])),))
        else:
            start += draw(st.sampled_from([10.0, -10.0]))
            reads.append(('ok', current, start))
    return reads


def _progress(engine):
    out = dict((name, engine.get(name)) for name in COUNTERS if engine.get(name) is not None)
    if engine.get('kv') is not None:
        out['kv'] = engine['kv']
    return out


def _requests_ok(engine):
    return reading_value(engine.get('running')) and reading_value(engine.get('waiting'))


def _in_flight(engine):
    return (engine.get('running') or 0) + (engine.get('waiting') or 0)


def _frozen(progress_list):
    """The present, finite progress series (engine counters and the KV gauge, at least one counter) are the
    same set in every read, and none of them moved. A series that is NaN, infinite or negative is not a
    reading: it is left out of the set (so a NaN in one read and a number in the next makes the sets differ)."""
    finite_sets = [dict((k, v) for k, v in progress.items() if usable(v)) for progress in progress_list]
    first = finite_sets[0]
    if 'kv' not in first or len(first) < 2:
        return False
    for progress in finite_sets:
        if set(progress) != set(first) or any(progress[k] != first[k] for k in first):
            return False
    return True


def busy_evidence(served, interval):
    """Rule 1 (a): three consecutive reads of one process, each wait at least the interval, in which one
    engine with work in flight kept the same present, finite progress series without a move."""
    for i in range(len(served) - 2):
        window = served[i:i + 3]
        if any(read[0] != 'ok' for dummy, read in window):
            continue
        times = [t for t, dummy in window]
        if times[1] - times[0] < interval * 0.999 or times[2] - times[1] < interval * 0.999:
            continue
        if len(set(read[2] for dummy, read in window)) != 1:
            continue
        for key in window[0][1][1]:
            engines_seen = [read[1].get(key) for dummy, read in window]
            if any(e is None or not _requests_ok(e) for e in engines_seen):
                continue
            if not any(_in_flight(e) > 0 for e in engines_seen):
                continue
            if _frozen([_progress(e) for e in engines_seen]):
                return True
    return False


def idle_evidence(served, probe_log, probe_timeout):
    """Rule 1 (b): two probes that each waited the full probe_timeout unanswered, while every read
    showed nothing in flight (request gauges that are readings) and nothing moved."""
    full = [a for dummy, dummy2, a in probe_log if a.error == 'timeout' and (a.seconds or 0) >= 0.98 * probe_timeout]
    if len(full) < 2:
        return False
    reads = [read for dummy, read in served if read[0] == 'ok']
    if len(set(read[2] for read in reads)) != 1:
        return False
    keys = set(k for read in reads for k in read[1])
    for read in reads:
        if set(read[1]) != keys:
            return False
        for engine in read[1].values():
            if not _requests_ok(engine) or _in_flight(engine) != 0:
                return False
    for key in keys:
        # As in rule (a): the present, finite series, the same set in every read, none of them moved.
        progress = [dict((k, v) for k, v in _progress(read[1][key]).items() if usable(v)) for read in reads]
        first = progress[0]
        if any(set(p) != set(first) or any(p[k] != first[k] for k in first) for p in progress):
            return False
    return True


def _judge(server, clock, interval, probe_timeout, metrics_timeout):
    # A freeze limit that the check's own two waits reach (1 s, as fakes.two_waits): these properties are about what
    # one check sees; test_freeze.py has the limit across checks.
    kwargs = dict(interval=interval, sleep=clock.sleep, clock=clock, probe_timeout=probe_timeout,
                  metrics_timeout=metrics_timeout, freeze=Freeze(limit=1.0))
    accepted = inspect.signature(Judge.__init__).parameters
    if 'monotonic' in accepted:
        kwargs['monotonic'] = clock
    return Judge(server, **kwargs)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reads=read_sequences(), data=st.data(),
       interval=st.sampled_from([0.5, 1.0, 5.0]), probe_timeout=st.sampled_from([2.0, 30.0]),
       factor=st.sampled_from([1.0, 1.0, 1.0, 1.0, 0.4, 0.0]),
       health=st.sampled_from([Fetched(status=200, text='', seconds=0.002), Fetched(status=503, text='', seconds=0.002),
                               Fetched(error='timeout', message='slow', seconds=2.0)]))
def test_the_verdict_is_stuck_only_on_positive_evidence(reads, data, interval, probe_timeout, factor, health):
    h.REGISTRY.examples('verdict: scripted servers')
    probes = [answer for dummy, answer in data.draw(st.lists(probe_answers(probe_timeout), min_size=1, max_size=3))]
    clock = FakeClock(factor)
    server = Scripted(clock, reads, probes, health)
    result = _judge(server, clock, interval, probe_timeout, 2.0).run()
    assert result['state'] in _types.STATES, result
    assert len(json.dumps(result)) < 1024 * 1024
    # Never probe a server whose last read reports anything running or waiting, or gauges that are not readings.
    for dummy, last, answer in server.probe_log:
        if last is None:
            continue
        for key, engine in last[1].items():
            assert _requests_ok(engine) and _in_flight(engine) == 0, (
                'probed although engine %s reports running=%r waiting=%r' % (key, engine['running'], engine['waiting']))
    if result['state'] == 'stuck':
        assert busy_evidence(server.served, interval) or idle_evidence(server.served, server.probe_log, probe_timeout), (
            'stuck without the evidence of rule 1: reason %r; served %r; probes %r; sleeps %r'
            % (result['reason'], [(round(t - 1796000000.0, 3), r) for t, r in server.served],
               [(a.error, a.status, a.seconds) for dummy, dummy2, a in server.probe_log], clock.sleeps))


def test_the_verdict_oracle_accepts_a_genuine_hang():
    """The oracle above is not vacuous: a frozen engine with work in flight is stuck, and the oracle agrees."""
    frozen = {'0': dict({'running': 2.0, 'waiting': 0.0, 'kv': 0.1}, **dict((c, 10.0) for c in COUNTERS))}
    clock = FakeClock()
    server = Scripted(clock, [('ok', frozen, 1796000000.0)], [Fetched(status=200, text=_completion(), seconds=0.05)],
                      Fetched(status=200, text='', seconds=0.002))
    result = _judge(server, clock, 1.0, 2.0, 2.0).run()
    assert result['state'] == 'stuck', result['reason']
    assert busy_evidence(server.served, 1.0)
    idle = {'0': dict({'running': 0.0, 'waiting': 0.0, 'kv': 0.1}, **dict((c, 10.0) for c in COUNTERS))}
    clock = FakeClock()
    server = Scripted(clock, [('ok', idle, 1796000000.0)], [Fetched(error='timeout', message='x', seconds=2.0)],
                      Fetched(status=200, text='', seconds=0.002))
    result = _judge(server, clock, 1.0, 2.0, 2.0).run()
    assert result['state'] == 'stuck', result['reason']
    assert idle_evidence(server.served, server.probe_log, 2.0)


# --------------------------------------------------------------------------- the decision

NOW = 1796000000.0
_times = st.one_of(
    st.sampled_from([NOW, NOW - 1, NOW - 100, NOW - 899, NOW - 901, NOW - 3600, NOW - 86399, NOW - 86401, NOW - 1e6,
                     NOW + 30, NOW + 3600, NOW + 1e6, 0.0, -1.0, NAN, INF, -INF, 1e308]),
    st.floats(min_value=NOW - 2e5, max_value=NOW + 2e5),
)
_garbage = st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.integers(-5, 5),
                     st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_histories = st.one_of(
    st.fixed_dictionaries({'restarts': st.lists(st.one_of(_times, _garbage), max_size=6)},
                          optional={'unknown_streak': st.one_of(st.integers(-3, 50), _garbage),
                                    'last_state': _garbage, 'last_check': st.one_of(_times, _garbage)}),
    _garbage,
)
_started = st.one_of(
    _times, _garbage,
    st.sampled_from(['@%d' % (NOW - 10), '@%d' % (NOW - 7200), '@nan', '@inf', '', 'n/a', '0', '2026-02-31T00:00:00Z',
                     '2026-13-45T99:99:99Z', '0001-01-01T00:00:00Z', '9999-12-31T23:59:59Z', 'yesterday']),
)
_services = st.fixed_dictionaries({}, optional={'running': st.one_of(st.booleans(), st.none()),
                                                'started_at': _started,
                                                'status': st.one_of(st.text(max_size=10), st.none())})
_settings = st.fixed_dictionaries({
    'startup_grace': st.sampled_from([0.0, 60.0, 900.0, 86400.0]),
    'cooldown': st.sampled_from([0.0, 600.0, 3600.0]),
    'max_restarts': st.integers(0, 5),
    'restart_window': st.sampled_from([60.0, 3600.0, 86400.0]),
    'unknown_limit': st.integers(1, 5),
})


def _known_start(value):
    """What a started_at value surely means (epoch seconds), or None when it is not surely a time."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if finite(value) and value > 0 else None
    if isinstance(value, str) and value.startswith('@'):
        try:
            number = float(value[1:])
        except ValueError:
            return None
        return number if finite(number) and number > 0 else None
    return None


def _past_restarts(history, now):
    if not isinstance(history, dict) or not isinstance(history.get('restarts'), list):
        return []
    return sorted(t for t in history['restarts'] if finite(t) and t <= now)


@settings(max_examples=800, deadline=None)
@given(state=st.sampled_from(list(_types.STATES)), service=_services, history=_histories, conf=_settings,
       paused=st.booleans(), process_start=st.one_of(st.none(), _times))
def test_the_decision_never_raises_and_never_restarts_against_a_guard_rail(state, service, history, conf, paused,
                                                                           process_start):
    h.REGISTRY.examples('decision: generated histories, services, settings')
    check = getattr(_decide, 'invalid_settings', None)
    if check is not None:
        assume(not check(conf))
    kwargs = {'paused': paused}
    supports_start = 'process_start' in inspect.signature(_decide.decide).parameters
    if supports_start:
        kwargs['process_start'] = process_start
    out = _decide.decide(state, service, history, NOW, conf, **kwargs)
    assert out['action'] in ('none', 'restart', 'fail'), out
    assert isinstance(out.get('reason'), str) and out['reason'], out
    if out['action'] != 'restart':
        return
    why = out['reason']
    assert state in ('stuck', 'down'), 'restart on %s: %s' % (state, why)
    assert not paused, 'restart while paused: %s' % why
    grace = conf['startup_grace']
    starts = [_known_start(service.get('started_at'))]
    if supports_start:
        starts.append(_known_start(process_start))
    # A service that the service manager says is not running is not loading its weights: the grace of its
    # start does not hold it back (docs/watchdog.md). The grace of the last restart always does.
    starting_matters = state == 'stuck' or service.get('running') is True
    for start in starts if starting_matters else []:
        if start is not None and start <= NOW:
            assert NOW - start >= grace, 'restart %.0f s after a start, inside the grace of %s s: %s' % (
                NOW - start, grace, why)
    past = _past_restarts(history, NOW)
    if past:
        assert NOW - past[-1] >= grace, 'restart %.0f s after the last restart, inside the grace: %s' % (
            NOW - past[-1], why)
    in_window = [t for t in past if NOW - t < conf['restart_window']]
    assert len(in_window) < conf['max_restarts'], 'restart past the budget (%d of %d in the window): %s' % (
        len(in_window), conf['max_restarts'], why)
    if state == 'down':
        assert service.get('running') is not None, 'restart of a down server whose state is unknown: %s' % why
