# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""How long an engine has shown no movement at all: the proof that ``stuck`` needs.

Private to this collection. Pure: readings, times and a small memory in, durations and the memory to
keep out; the caller keeps the memory between checks (``state_dir``, beside the progress window's).

vLLM publishes every series the check reads only when an engine step returns (the engine core runs
the forward pass, then the scheduler's stats are built, then the front end updates Prometheus). During
one long step every series is frozen, the KV-cache gauge included, with ``running`` at its value from
before the step: a 16K-token prefill chunk of a dense 70B model on a GB10 (10-20 s), a kernel JIT inside
a step (30-70 s on Blackwell), a whole prompt with chunked prefill off (minutes). A healthy freeze and a
hang read the same until the freeze has lasted longer than anything a healthy server does: ``limit``
seconds (vLLM's own stall watchdog and ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` wait 300 s).

A freeze of an engine begins at the first read that showed work waiting on it (requests in flight), or
at the first probe sent to it when it looked idle, and from which its progress series have not changed
since; any movement ends it. It is measured across checks with a memory per engine: the read's time and
the exact values of the engine's progress series then. A later check continues the remembered freeze
only when the engine's series still have exactly those values, in the same process (its start time and
``*_created`` values), on the same boot, and the freeze began after the process started: anything else
begins a new freeze at this check's read, which can only delay a finding, never make one. An engine idle
for hours that freezes on its first request has been frozen for as long as that request has waited.

The memory read back is untrusted: entries that are not what ``Freeze.memory`` writes are left out (the
note says so).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import math

from ansible_collections.modelops.vllm.plugins.module_utils import _readings as readings
from ansible_collections.modelops.vllm.plugins.module_utils._settings import FREEZE_LIMIT

# The freeze a healthy server may show, seconds (the catalogue's, where it says why).
DEFAULT_LIMIT = FREEZE_LIMIT
# Clock differences tolerated before a remembered start counts as "in the future".
SKEW = 60.0
# Values kept per engine (the progress counters and the KV-cache gauge) and engines kept.
MAX_VALUES = 32
MAX_ENGINES = readings.MAX_ENGINES
KV = 'kv'


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def values(engine, names):
    """An engine's progress series as the memory keeps them: ``{series: value}`` and ``kv``."""
    out = dict((name, engine.counters[name]) for name in names if name in engine.counters)
    if engine.kv_cache is not None:
        out[KV] = engine.kv_cache
    return out


def process_of(reading):
    """What tells this reading's process from another: its start time and a digest of its ``*_created``."""
    created = sorted('%s%r=%r' % (name, labels, value) for (name, labels), value in reading.created.items())
    digest = hashlib.sha256('\n'.join(created).encode('utf-8')).hexdigest()[:16] if created else None
    return {'start_time': reading.start_time, 'created': digest}


def _valid(entry):
    if not isinstance(entry, dict) or not _finite(entry.get('since')) or entry['since'] <= 0:
        return False
    if entry.get('since_mono') is not None and not _finite(entry['since_mono']):
        return False
    if not (entry.get('boot') is None or (isinstance(entry['boot'], str) and len(entry['boot']) <= 64)):
        return False
    if not (entry.get('start_time') is None or (_finite(entry['start_time']) and entry['start_time'] > 0)):
        return False
    if not (entry.get('created') is None or (isinstance(entry['created'], str) and len(entry['created']) <= 64)):
        return False
    vals = entry.get('values')
    if not isinstance(vals, dict) or not 0 < len(vals) <= MAX_VALUES:
        return False
    return all(isinstance(k, str) and len(k) <= 256 and _finite(v) and v >= 0 for k, v in vals.items())


def _plain_key(key):
    return isinstance(key, str) and len(key) <= 256


def load(memory):
    """(entries, note): the kept freezes that are what ``Freeze.memory`` writes; the others left out and said."""
    if memory is None:
        return {}, None
    if not isinstance(memory, dict) or len(memory) > MAX_ENGINES:
        return {}, 'the remembered freezes are not what this module writes: started afresh'
    kept = dict((key, entry) for key, entry in memory.items() if _plain_key(key) and _valid(entry))
    dropped = len(memory) - len(kept)
    return kept, ('%d remembered freeze(s) not what this module writes were left out' % dropped) if dropped else None


def _elapsed(since, since_mono, boot, read, current_boot):
    """Seconds from a freeze's start to a read: the wall clock, and no more than the monotonic clock says
    when both were read on the same boot (a clock stepped forward is no evidence)."""
    seconds = read.at - since
    mono = getattr(read, 'mono', None)
    if current_boot and boot == current_boot and _finite(since_mono) and _finite(mono):
        seconds = min(seconds, mono - since_mono)
    return max(0.0, seconds)


class Freeze(object):
    """The freezes of one check: begun at a read of this check, or continued from the memory.

    ``limit``: seconds of no movement that prove a hang; ``wait``: seconds this check may keep watching a
    freeze that has not lasted ``limit`` yet; ``boot``: this host's boot id (a memory of another boot is
    another life); ``names``: the progress counters compared (the profile's, without the step count on
    V0/0.7.x)."""

    def __init__(self, memory=None, limit=DEFAULT_LIMIT, wait=0.0, boot=None, remember=True):
        self.limit = float(limit)
        self.wait = float(wait)
        self.boot = boot
        # False without a memory across checks (no state_dir): a freeze is measured within this check only.
        self.remember = remember
        self.kept, self.note = load(memory) if remember else ({}, None)
        self.current = {}  # engine -> entry, this check's freezes
        self.watched = 0.0  # seconds this check spent watching beyond its usual reads

    def begin(self, key, reading, names, at=None, mono=None):
        """The freeze of engine ``key``, unmoved since ``reading`` (or since ``at``/``mono``, a probe's time):
        the remembered one when it still holds, else one that begins now. Returns its entry."""
        engine = reading.engines.get(key)
        if engine is None:
            return None
        now = values(engine, names)
        process = process_of(reading)
        since = reading.at if at is None else at
        since_mono = getattr(reading, 'mono', None) if mono is None else mono
        entry = {'since': since, 'since_mono': since_mono, 'boot': self.boot, 'values': now,
                 'start_time': process['start_time'], 'created': process['created'], 'remembered': False}
        old = self.kept.get(key)
        if old is not None and self._continues(old, now, process, reading):
            entry.update(since=old['since'], since_mono=old.get('since_mono'), boot=old.get('boot'),
                         remembered=True)
        self.current[key] = entry
        return entry

    def _continues(self, old, now, process, reading):
        if old['values'] != now:
            return False
        # The same process: its start time and *_created values as they were (both absent on a multiprocess server).
        if any(old.get(name) != process[name] for name in ('start_time', 'created')):
            return False
        if old.get('boot') and self.boot and old['boot'] != self.boot:
            return False
        if _finite(reading.at) and old['since'] > reading.at + SKEW:
            return False
        # A freeze cannot have begun before the process that shows it started.
        return not (process['start_time'] is not None and old['since'] < process['start_time'])

    def seconds(self, key, read):
        """How long engine ``key`` has been frozen at ``read`` (None when no freeze was begun)."""
        entry = self.current.get(key)
        if entry is None or not _finite(getattr(read, 'at', None)):
            return None
        return _elapsed(entry['since'], entry.get('since_mono'), entry.get('boot'), read, self.boot)

    def proven(self, key, read):
        seconds = self.seconds(key, read)
        return seconds is not None and seconds >= self.limit

    def end(self, key=None):
        """A freeze ended (the engine moved, or the check saw a deliberate freeze): forgotten."""
        if key is None:
            self.current.clear()
        else:
            self.current.pop(key, None)

    def memory(self, judged):
        """What to keep for the next check. ``judged``: True when this check saw every engine (its freezes
        are the truth: the others moved or had no work), False when it could not judge (the old memory stays)."""
        if not judged:
            return dict(self.kept)
        return dict((key, dict((k, v) for k, v in entry.items() if k != 'remembered'))
                    for key, entry in sorted(self.current.items())[:MAX_ENGINES])

    def summary(self, read):
        """The evidence: the limit, what this check watched, and each freeze (at most EVIDENCE_ENGINES)."""
        out = {'limit': self.limit, 'wait': self.wait, 'watched': round(self.watched, 1),
               'memory': self.remember, 'engines': {}}
        if self.note:
            out['note'] = self.note
        keys = sorted(self.current, key=readings.engine_order)
        for key in keys[:readings.EVIDENCE_ENGINES]:
            entry = self.current[key]
            item = {'since': entry['since'], 'remembered': entry['remembered']}
            seconds = self.seconds(key, read) if read is not None else None
            if seconds is not None:
                item['seconds'] = round(seconds, 1)
            out['engines'][key] = item
        if len(keys) > readings.EVIDENCE_ENGINES:
            out['engines_not_shown'] = len(keys) - readings.EVIDENCE_ENGINES
        return out
