# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Readings: what one scrape of vLLM's /metrics says, and how two compare.

Private to this collection. Pure functions: samples in, plain data out.

A reading keeps, per engine (the ``engine`` label, data-parallel index; V0
and 0.7.x have none, so everything is engine "0"): requests running and
waiting, deferred waiting requests, the KV-cache gauge, the sleep state, and
the progress counters summed over their other labels. For the process as a
whole it keeps the start time and the ``*_created`` values of vLLM series,
which together tell whether two readings came from the same process. vLLM's
series and label names come from the engine profile it is given (``profile``, vLLM's
``_vllm.PROFILE`` by default), which the reading keeps (``Reading.profile``).

A number that cannot be true is not a reading: a gauge that is negative, NaN
or infinite, a KV-cache usage outside 0..1, a counter that is negative or not
finite. Such a value is left out and named in ``problems``; a reading whose
request gauges have a problem has no ``in_flight`` (None), so nobody mistakes
it for "nothing in flight". The number of engines is capped (``MAX_ENGINES``),
and so is what the evidence keeps of them (``EVIDENCE_ENGINES``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import iter_samples
from ansible_collections.modelops.vllm.plugins.module_utils._types import MAX_NAME
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import PROFILE

# More data-parallel engines than any deployment has: past it the exposition is not judged.
MAX_ENGINES = 256
# Engines whose numbers each read keeps in the evidence (the others are counted).
EVIDENCE_ENGINES = 16
# A request gauge above this is not a number of requests.
MAX_REQUESTS = 1e9
# Values left out, named per engine in the evidence; past this many they are only counted.
MAX_PROBLEMS = 5
# Buckets kept per histogram and engine (vLLM's longest default family has 22).
MAX_BUCKETS = 64


def _wanted(profile):
    """The filter of the series a reading of this engine keeps."""
    histograms = tuple(name for dummy, name in profile.step_histograms)
    names = frozenset(profile.progress_counters + profile.gauges + profile.v0_only + (profile.start_time,) + histograms)
    prefix, suffix = profile.prefix, profile.created_suffix

    def wanted(name):
        return name in names or (name.startswith(prefix) and name.endswith(suffix))
    return wanted


def _finite(value):
    return value is not None and not math.isnan(value) and not math.isinf(value)


class ReadingError(ValueError):
    """The exposition is valid text, but not one this check can judge (too many engines)."""


def _fmt(value):
    return '%g' % value


class EngineReading(object):
    """One engine's numbers in one reading."""

    __slots__ = ('running', 'waiting', 'deferred', 'kv_cache', 'awake', 'counters', 'completed', 'model_name',
                 'problems', 'bad_counters', 'bad_gauges', 'bad_requests', 'buckets')

    def __init__(self):
        self.running = None
        self.waiting = None
        self.deferred = None
        self.kv_cache = None
        self.awake = None
        self.counters = {}
        # Finished requests that did their work (every finished_reason but abort and error); None when
        # vllm:request_success_total is missing or one of its samples cannot be true.
        self.completed = None
        self.model_name = None
        self.problems = []
        self.bad_counters = set()
        self.bad_gauges = set()
        self.bad_requests = False  # a request gauge (running, waiting, deferred) had a value that cannot be true
        # The step histograms' cumulative bucket counts: {what: {upper bound: count}} (None: one cannot be true).
        self.buckets = {}

    @property
    def in_flight(self):
        """Requests running and waiting; None when a request gauge is not a reading."""
        if self.bad_requests:
            return None
        # Deferred requests are part of waiting (0.25+); a deferred count above it still counts.
        return (self.running or 0) + max(self.waiting or 0, self.deferred or 0)

    def series(self):
        """The progress series this engine reports: its counters, and 'kv' for the KV-cache gauge."""
        names = set(self.counters)
        if self.kv_cache is not None:
            names.add('kv')
        return frozenset(names)

    def as_dict(self):
        out = {
            'running': self.running,
            'waiting': self.waiting,
            'deferred': self.deferred,
            'kv_cache_usage': self.kv_cache,
            'awake': self.awake,
            'counters': dict(self.counters),
            'completed': self.completed,
        }
        if self.problems:
            out['problems'] = list(self.problems)
        return out


def highest_bucket(buckets):
    """(above, at_most) of a histogram's highest observation: the bounds of the highest bucket whose cumulative
    count rose (at_most None for +Inf); None without an observation, or with counts that cannot be true."""
    if not buckets:
        return None
    previous, found, lower = 0.0, None, 0.0
    for upper in sorted(buckets):
        count = buckets[upper]
        if count < previous:
            return None
        if count > previous:
            found = (lower, None if math.isinf(upper) else upper)
        previous, lower = count, upper
    return found


def judgeable(before, after):
    """Why two readings of one engine cannot show that nothing moved, or None when they can.

    "Nothing moved" is evidence only when both readings carry the same progress series, the
    KV-cache gauge among them (in V1 a long chunked prefill moves nothing else) and at least one
    engine counter, all present and finite.
    """
    old, new = before.series(), after.series()
    if old != new:
        gone = sorted(old - new)
        came = sorted(new - old)
        return 'its progress series changed between reads (%s)' % '; '.join(
            part for part in ('missing: %s' % ', '.join(gone) if gone else '',
                              'new: %s' % ', '.join(came) if came else '') if part)
    if 'kv' not in new:
        return 'it reports no KV-cache gauge, which is all that moves during a long prefill'
    if len(new) < 2:
        return 'it reports no engine counter'
    return None


class Reading(object):
    """One scrape of /metrics, reduced to what the verdict needs."""

    def __init__(self, engines, start_time, created, has_vllm, at=None, seconds=None, v0=False, problems=None,
                 weight_updates=None, profile=PROFILE, websocket_sessions=None):
        # The engine profile the reading was made with: its counters' names are the profile's.
        self.profile = profile
        self.v0 = v0
        # RL weight-transfer operations in flight (None: the server does not report them).
        self.weight_updates = weight_updates
        # Realtime WebSocket sessions open (None: the server does not report them).
        self.websocket_sessions = websocket_sessions
        self.process_problems = list(problems or [])
        self.engines = engines
        self.start_time = start_time
        self.created = created
        self.has_vllm = has_vllm
        self.at = at
        self.seconds = seconds

    def _total(self, attr):
        values = [getattr(e, attr) for e in self.engines.values() if getattr(e, attr) is not None]
        return sum(values) if values else None

    @property
    def running(self):
        return self._total('running')

    @property
    def waiting(self):
        return self._total('waiting')

    @property
    def deferred(self):
        return self._total('deferred')

    @property
    def in_flight(self):
        """Requests running and waiting on every engine; None when any engine's gauges are not readings."""
        values = [e.in_flight for e in self.engines.values()]
        if any(value is None for value in values):
            return None
        return sum(values)

    @property
    def problems(self):
        """Every value that was left out because it cannot be true, with its engine."""
        out = list(self.process_problems)
        for key, engine in sorted(self.engines.items()):
            out.extend('%s on engine %s' % (problem, key) for problem in engine.problems)
        return out

    @property
    def kv_cache(self):
        values = [e.kv_cache for e in self.engines.values() if e.kv_cache is not None]
        return max(values) if values else None

    @property
    def sleeping(self):
        """True when every engine that reports a sleep state is asleep."""
        states = [e.awake for e in self.engines.values() if e.awake is not None]
        return bool(states) and not any(states)

    @property
    def model_name(self):
        for engine in self.engines.values():
            if engine.model_name:
                return engine.model_name
        return None

    def counter(self, name):
        values = [e.counters[name] for e in self.engines.values() if name in e.counters]
        return sum(values) if values else None

    def longest(self, what):
        """(above, at_most) of the highest observation of a step histogram (``what``) on any engine, or None."""
        found = [highest_bucket(e.buckets.get(what)) for e in self.engines.values() if e.buckets.get(what)]
        found = [f for f in found if f is not None]
        if not found:
            return None
        return max(found, key=lambda f: (f[0], float('inf') if f[1] is None else f[1]))

    def summary(self):
        """A compact, JSON-friendly record for the evidence (at most EVIDENCE_ENGINES engines)."""
        keys = sorted(self.engines, key=engine_order)
        out = {
            'at': self.at,
            'seconds': None if self.seconds is None else round(self.seconds, 4),
            'process_start_time': self.start_time,
            'running': self.running,
            'waiting': self.waiting,
            'deferred': self.deferred,
            'kv_cache_usage': self.kv_cache,
            'steps': self.counter(self.profile.steps),
            'generation_tokens': self.counter(self.profile.generation),
            'weight_updates': self.weight_updates,
            'engines': dict((k, self.engines[k].as_dict()) for k in keys[:EVIDENCE_ENGINES]),
        }
        if len(keys) > EVIDENCE_ENGINES:
            out['engines_not_shown'] = len(keys) - EVIDENCE_ENGINES
        problems = self.problems
        if problems:
            out['problems'] = problems[:EVIDENCE_ENGINES]
        return out


def engine_order(key):
    """Sort key of engine labels: numbers in numeric order, then any others."""
    return (0, int(key), '') if key.isdigit() and len(key) < 10 else (1, 0, key)


def _problem(engine, name, value, prefix):
    """Note a value that cannot be true (the first MAX_PROBLEMS per engine by name and value, the rest counted)."""
    if len(engine.problems) < MAX_PROBLEMS:
        engine.problems.append('%s=%s' % (name.replace(prefix, ''), _fmt(value)))
    elif len(engine.problems) == MAX_PROBLEMS:
        engine.problems.append('and more')


def _gauge(engine, name, value, top, prefix):
    """A gauge's value when it can be true (0..top, finite), else None and a problem noted."""
    if _finite(value) and 0 <= value <= top:
        return value
    engine.bad_gauges.add(name)
    _problem(engine, name, value, prefix)
    return None


def _add_requests(engine, attr, name, value, prefix):
    """A request gauge, summed over its other labels (never the last sample alone: one label set
    saying 3 and another saying 0 is 3 in flight); once one sample cannot be true, the gauge is none."""
    if name in engine.bad_gauges:
        return
    value = _gauge(engine, name, value, MAX_REQUESTS, prefix)
    if value is None:
        engine.bad_requests = True
        setattr(engine, attr, None)
        return
    total = (getattr(engine, attr) or 0) + value
    if total > MAX_REQUESTS:
        engine.bad_gauges.add(name)
        engine.bad_requests = True
        _problem(engine, name, total, prefix)
        setattr(engine, attr, None)
        return
    setattr(engine, attr, total)


def reading_from_samples(samples, at=None, seconds=None, profile=PROFILE):
    """Reduce parsed samples (name, labels, value) to a Reading (ReadingError past MAX_ENGINES), by the names of
    the engine ``profile``."""
    p = profile
    prefix = p.prefix
    engines = {}
    created = {}
    start_time = None
    has_vllm = False
    v0 = False
    problems = []
    weight_updates = None
    weight_bad = False
    sessions = None
    sessions_bad = False
    histograms = dict((name, what) for what, name in p.step_histograms)

    def engine_for(labels):
        key = p.default_engine
        model = None
        for label, value in labels:
            if label == p.engine_label:
                key = value
            elif label == p.model_label:
                model = value
        engine = engines.get(key)
        if engine is None:
            if len(engines) >= MAX_ENGINES:
                raise ReadingError('more than %d engine label values: not an exposition this check can judge'
                                   % MAX_ENGINES)
            engine = engines[key] = EngineReading()
        if model and not engine.model_name and len(model) <= MAX_NAME:
            engine.model_name = model
        return engine

    for name, labels, value in samples:
        if name == p.start_time:
            if _finite(value) and value > 0:
                start_time = value
            else:
                problems.append('%s=%s' % (p.start_time, _fmt(value)))
            continue
        if not name.startswith(prefix):
            continue
        has_vllm = True
        if name == p.weight_updates:
            # One sample that cannot be true spoils it: then nobody may take it for a pause.
            if not weight_bad:
                if _finite(value) and 0 <= value <= MAX_REQUESTS:
                    weight_updates = (weight_updates or 0) + value
                else:
                    weight_bad = True
                    problems.append('%s=%s' % (p.weight_updates.replace(prefix, ''), _fmt(value)))
            continue
        if name == p.websockets:
            if not sessions_bad:
                if _finite(value) and 0 <= value <= MAX_REQUESTS:
                    sessions = (sessions or 0) + value
                else:
                    sessions_bad = True
                    problems.append('%s=%s' % (p.websockets.replace(prefix, ''), _fmt(value)))
            continue
        if name in histograms:
            _add_bucket(engine_for(labels), histograms[name], labels, value, p.bucket_label)
            continue
        if name in p.v0_only:
            v0 = True
            continue
        if name.endswith(p.created_suffix):
            if _finite(value) and len(created) < 4 * MAX_ENGINES:
                created[(name, tuple(sorted(labels)))] = value
            continue
        engine = engine_for(labels)
        if name == p.running:
            _add_requests(engine, 'running', name, value, prefix)
        elif name == p.waiting:
            _add_requests(engine, 'waiting', name, value, prefix)
        elif name == p.waiting_by_reason:
            if dict(labels).get(p.reason_label) == p.deferred:
                _add_requests(engine, 'deferred', name, value, prefix)
        elif name in p.kv_cache:
            # Multiprocess mode of 0.10/0.11 may add a pid label: take the max. One sample that cannot be
            # true spoils the gauge (it is then no progress series).
            if name in engine.bad_gauges:
                continue
            value = _gauge(engine, name, value, 1.0, prefix)
            if value is None:
                engine.kv_cache = None
            elif engine.kv_cache is None or value > engine.kv_cache:
                engine.kv_cache = value
        elif name == p.sleep_state:
            if dict(labels).get(p.sleep_label) == p.awake and name not in engine.bad_gauges:
                value = _gauge(engine, name, value, 1.0, prefix)
                engine.awake = None if value is None else value >= 1
        elif name in p.progress_counters:
            if name in engine.bad_counters:
                continue
            total = engine.counters.get(name, 0.0) + value
            if _finite(value) and value >= 0 and _finite(total):
                engine.counters[name] = total
                if name == p.success and dict(labels).get(p.finished_label) not in p.not_completed:
                    engine.completed = (engine.completed or 0.0) + value
                elif name == p.success and engine.completed is None:
                    engine.completed = 0.0
            else:
                # One sample of a counter that cannot be true spoils its sum: leave the counter out.
                engine.bad_counters.add(name)
                engine.counters.pop(name, None)
                if name == p.success:
                    engine.completed = None
                _problem(engine, name, value, prefix)
    return Reading(engines, start_time, created, has_vllm, at=at, seconds=seconds, v0=v0, problems=problems,
                   weight_updates=None if weight_bad else weight_updates, profile=profile,
                   websocket_sessions=None if sessions_bad else sessions)


def _add_bucket(engine, what, labels, value, bucket_label):
    """One bucket sample of a step histogram, summed over its other labels. A histogram with a sample that
    cannot be true (not finite, negative, a bound that is no number) is none: its longest is not shown."""
    buckets = engine.buckets.get(what, {})
    if buckets is None:
        return
    bound = dict(labels).get(bucket_label)
    try:
        upper = float(bound)
    except (TypeError, ValueError):
        upper = None
    if upper is None or math.isnan(upper) or upper < 0 or not _finite(value) or value < 0 \
            or (upper not in buckets and len(buckets) >= MAX_BUCKETS):
        engine.buckets[what] = None
        return
    buckets[upper] = buckets.get(upper, 0.0) + value
    engine.buckets[what] = buckets


def read_text(text, at=None, seconds=None, profile=PROFILE):
    """Parse exposition text into a Reading of the engine ``profile`` (raises ExpositionError or ReadingError)."""
    return reading_from_samples(iter_samples(text, _wanted(profile)), at=at, seconds=seconds, profile=profile)


def progress_counters(idle_ticks=False, profile=PROFILE):
    """The counters whose rise means work; without the step count on V0/0.7.x,
    where an idle engine observes zeros into the step histogram."""
    if idle_ticks:
        return tuple(c for c in profile.progress_counters if c != profile.steps)
    return profile.progress_counters


def engine_moves(before, after, idle_ticks=False):
    """What moved on each engine between two readings of the same process.

    Returns {engine: {name: delta}} with only the counters that rose and the
    KV-cache gauge if it changed. An engine absent from a reading has no moves. The names are those
    of the later reading's engine profile.
    """
    moves = {}
    profile = after.profile
    names = progress_counters(idle_ticks, profile)
    for key, new in after.engines.items():
        old = before.engines.get(key)
        if old is None:
            continue
        moved = {}
        for name in names:
            if name in new.counters and name in old.counters:
                delta = new.counters[name] - old.counters[name]
                if delta > 0:
                    moved[name] = delta
        if old.kv_cache is not None and new.kv_cache is not None and new.kv_cache != old.kv_cache:
            moved[profile.kv_cache[0]] = round(new.kv_cache - old.kv_cache, 6)
        moves[key] = moved
    return moves


def same_process(before, after):
    """Whether two readings came from the same server process.

    Returns (same, how): ``same`` is True, False, or None when nothing tells.
    The ladder of vllm-facts.md: start time; else the *_created values; else
    any counter that went down.
    """
    start_name = after.profile.start_time
    has_start = before.start_time is not None and after.start_time is not None
    if has_start and before.start_time != after.start_time:
        return False, '%s changed from %s to %s' % (start_name, before.start_time, after.start_time)
    # The start time has a resolution of 10 ms: two processes can share it, so look further.
    common = set(before.created) & set(after.created)
    changed = [k for k in common if before.created[k] != after.created[k]]
    if changed:
        return False, '%d *_created series changed (e.g. %s)' % (len(changed), changed[0][0])
    for key, new in after.engines.items():
        old = before.engines.get(key)
        if old is None:
            continue
        for name, value in new.counters.items():
            if name in old.counters and value < old.counters[name]:
                return False, '%s went down on engine %s (%s -> %s)' % (name, key, old.counters[name], value)
    if has_start:
        return True, 'same %s' % start_name
    if common:
        return True, 'same *_created values'
    return None, 'no start time or *_created series; no counter went down'


def start_time_order(before, after):
    """-1 when the later reading has an older start time (another process that
    was already running: a load balancer), 1 when newer, 0 or None otherwise."""
    if before.start_time is None or after.start_time is None:
        return None
    if after.start_time < before.start_time:
        return -1
    if after.start_time > before.start_time:
        return 1
    return 0


def rate(before, after, name):
    """Per-second rise of a counter between two readings, or None."""
    if before.at is None or after.at is None or after.at <= before.at:
        return None
    old = before.counter(name)
    new = after.counter(name)
    if old is None or new is None or new < old:
        return None
    return round((new - old) / (after.at - before.at), 3)
