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
which together tell whether two readings came from the same process.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import parse

RUNNING = 'vllm:num_requests_running'
WAITING = 'vllm:num_requests_waiting'
WAITING_BY_REASON = 'vllm:num_requests_waiting_by_reason'
KV_CACHE = ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
SLEEP_STATE = 'vllm:engine_sleep_state'
START_TIME = 'process_start_time_seconds'
STEPS = 'vllm:iteration_tokens_total_count'
GENERATION = 'vllm:generation_tokens_total'
# Series only the V0 engine exposes; V0 observes idle zeros into the step histogram.
V0_ONLY = ('vllm:num_requests_swapped', 'vllm:cpu_cache_usage_perc')

# Any of these rising means the engine did work between two reads. The step
# histogram alone is not enough: in V1 a prefill-only chunk is not observed.
PROGRESS_COUNTERS = (
    STEPS,
    'vllm:iteration_tokens_total_sum',
    GENERATION,
    'vllm:prompt_tokens_total',
    'vllm:request_success_total',
    'vllm:num_preemptions_total',
    'vllm:estimated_flops_per_gpu_total',
)

_GAUGES = (RUNNING, WAITING, WAITING_BY_REASON, SLEEP_STATE) + KV_CACHE
_WANTED = frozenset(PROGRESS_COUNTERS + _GAUGES + V0_ONLY + (START_TIME,))


def _wanted(name):
    return name in _WANTED or (name.startswith('vllm:') and name.endswith('_created'))


def _finite(value):
    return value is not None and not math.isnan(value) and not math.isinf(value)


class EngineReading(object):
    """One engine's numbers in one reading."""

    __slots__ = ('running', 'waiting', 'deferred', 'kv_cache', 'awake', 'counters', 'model_name')

    def __init__(self):
        self.running = None
        self.waiting = None
        self.deferred = None
        self.kv_cache = None
        self.awake = None
        self.counters = {}
        self.model_name = None

    @property
    def in_flight(self):
        return (self.running or 0) + (self.waiting or 0)

    def as_dict(self):
        return {
            'running': self.running,
            'waiting': self.waiting,
            'deferred': self.deferred,
            'kv_cache_usage': self.kv_cache,
            'awake': self.awake,
            'counters': dict(self.counters),
        }


class Reading(object):
    """One scrape of /metrics, reduced to what the verdict needs."""

    def __init__(self, engines, start_time, created, has_vllm, at=None, seconds=None, v0=False):
        self.v0 = v0
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
        return sum(e.in_flight for e in self.engines.values())

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

    def summary(self):
        """A compact, JSON-friendly record for the evidence."""
        return {
            'at': self.at,
            'seconds': None if self.seconds is None else round(self.seconds, 4),
            'process_start_time': self.start_time,
            'running': self.running,
            'waiting': self.waiting,
            'deferred': self.deferred,
            'kv_cache_usage': self.kv_cache,
            'steps': self.counter(STEPS),
            'generation_tokens': self.counter(GENERATION),
            'engines': dict((k, v.as_dict()) for k, v in sorted(self.engines.items())),
        }


def reading_from_samples(samples, at=None, seconds=None):
    """Reduce parsed samples (name, labels, value) to a Reading."""
    engines = {}
    created = {}
    start_time = None
    has_vllm = False
    v0 = False

    def engine_for(labels):
        key = '0'
        model = None
        for label, value in labels:
            if label == 'engine':
                key = value
            elif label == 'model_name':
                model = value
        engine = engines.get(key)
        if engine is None:
            engine = engines[key] = EngineReading()
        if model and not engine.model_name:
            engine.model_name = model
        return engine

    for name, labels, value in samples:
        if name == START_TIME:
            start_time = value
            continue
        if not name.startswith('vllm:'):
            continue
        has_vllm = True
        if name in V0_ONLY:
            v0 = True
            continue
        if name.endswith('_created'):
            created[(name, tuple(sorted(labels)))] = value
            continue
        engine = engine_for(labels)
        if name == RUNNING:
            engine.running = value
        elif name == WAITING:
            engine.waiting = value
        elif name == WAITING_BY_REASON:
            if dict(labels).get('reason') == 'deferred':
                engine.deferred = value
        elif name in KV_CACHE:
            # Multiprocess mode of 0.10/0.11 may add a pid label: take the max.
            if _finite(value) and (engine.kv_cache is None or value > engine.kv_cache):
                engine.kv_cache = value
        elif name == SLEEP_STATE:
            if dict(labels).get('sleep_state') == 'awake':
                engine.awake = value >= 1
        elif name in PROGRESS_COUNTERS and _finite(value):
            engine.counters[name] = engine.counters.get(name, 0.0) + value
    return Reading(engines, start_time, created, has_vllm, at=at, seconds=seconds, v0=v0)


def read_text(text, at=None, seconds=None):
    """Parse exposition text into a Reading (raises ExpositionError)."""
    return reading_from_samples(parse(text, _wanted), at=at, seconds=seconds)


def progress_counters(idle_ticks=False):
    """The counters whose rise means work; without the step count on V0/0.7.x,
    where an idle engine observes zeros into the step histogram."""
    if idle_ticks:
        return tuple(c for c in PROGRESS_COUNTERS if c != STEPS)
    return PROGRESS_COUNTERS


def engine_moves(before, after, idle_ticks=False):
    """What moved on each engine between two readings of the same process.

    Returns {engine: {name: delta}} with only the counters that rose and the
    KV-cache gauge if it changed. An engine absent from a reading has no moves.
    """
    moves = {}
    names = progress_counters(idle_ticks)
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
            moved['vllm:kv_cache_usage_perc'] = round(new.kv_cache - old.kv_cache, 6)
        moves[key] = moved
    return moves


def same_process(before, after):
    """Whether two readings came from the same server process.

    Returns (same, how): ``same`` is True, False, or None when nothing tells.
    The ladder of vllm-facts.md: start time; else the *_created values; else
    any counter that went down.
    """
    has_start = before.start_time is not None and after.start_time is not None
    if has_start and before.start_time != after.start_time:
        return False, 'process_start_time_seconds changed from %s to %s' % (before.start_time, after.start_time)
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
        return True, 'same process_start_time_seconds'
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
