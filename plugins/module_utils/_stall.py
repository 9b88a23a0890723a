# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Useful progress over a window: an engine that is busy doing nothing useful.

Private to this collection. Pure functions: the check's readings and a small memory in, the
memory to keep and a finding out; the caller keeps the memory between checks (``state_dir``).

One check sees seconds. Some hangs keep something moving for ever and read ``busy`` on every
check: a decode deadlock while prefill runs at full speed (vllm#45094), one request preempted and
prefilled again and again (vllm#52520, where the KV-cache gauge saw-tooths and, depending on the
version, the preemption count rises). Across checks they show a signature that a healthy engine
does not keep up for long. An engine is **livelocked** when

* it had work in flight at every read for at least ``window`` seconds;
* in that time no token was generated and no request completed (``vllm:generation_tokens_total``,
  and ``vllm:request_success_total`` without ``abort`` and ``error``: in a decode deadlock the
  clients give up, and the engine, still stepping, processes their aborts);
* yet it kept working, over the streak and since the check before this one: the step count,
  ``vllm:prompt_tokens_total`` or ``vllm:num_preemptions_total`` rose, or the KV-cache gauge went
  down again and again (blocks freed while no request completed: preemptions or aborts).

A long chunked prefill only fills the KV cache (the gauge rises, nothing else moves), which is
progress of that prompt and never activity here, so it never trips the rule however long it
runs. Decode starved by prefill (vllm#54919, 3-7 minutes) trips it only when it lasts longer
than the window. A server that never generates by design (pooling, a prefill-only instance)
completes requests, which is useful work.

An engine is **stranded** when only deferred requests wait on it (0.25+: the scheduler skips them,
waiting for remote KV or a grammar) and nothing at all moved for ``window`` seconds: deferred work
clears in seconds, and KV-connector stranding (vllm#45388) never clears without a restart. The
check alone calls such an engine ``unknown``; the caller passes the state ``deferred`` for it. Not while
realtime sessions are open (``vllm:websocket_connections_active`` above 0, 0.33): a streaming session
whose client pauses waits as a deferred request for as long as the pause lasts.

Everything that is not evidence clears an engine's streak (or never starts one): no work in
flight at some read, a counter the rule needs that is missing or cannot be true, another process
(the ladder of ``_readings.same_process``), a clock that went back, a deliberate pause or sleep.
A check that could not judge (``unknown``, ``down``) changes nothing. The memory read back is
untrusted: anything that is not what this module writes is a fresh memory, which can only delay
a finding, never make one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.modelops.vllm.plugins.module_utils import _readings as readings
from ansible_collections.modelops.vllm.plugins.module_utils._types import RESETS_STALL, duration, moment
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import PROFILE

VERSION = 1
# Engines whose streak the memory keeps (as many as a reading judges).
MAX_ENGINES = readings.MAX_ENGINES
# *_created values kept to tell another process from this one.
MAX_CREATED = 64
# Seconds a streak may seem to begin before the process started (the clocks of the host that checks and of the
# server may differ a little).
SKEW = 60.0
# Drops of the KV-cache gauge, with no request completed, that make a streak's activity on their own.
MIN_KV_DROPS = 3

USEFUL = ('generation', 'completed')
ACTIVITY = ('steps', 'prompt', 'preemptions')
# The counters the rule follows, by its own names; the engine profile names their series (``stall_counters``).
COUNTERS = ('generation', 'steps', 'prompt', 'preemptions')
# Checks that judged the engine from reads of one process: they start, extend or end streaks.
JUDGED = ('busy', 'stuck', 'frozen', 'idle', 'deferred')


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def values(engine, profile=PROFILE):
    """The numbers of one engine's reading that the rule uses (None where missing)."""
    out = dict((key, engine.counters.get(profile.stall_counters[key])) for key in COUNTERS)
    out['completed'] = engine.completed
    out['kv'] = engine.kv_cache
    return out


def fresh():
    return {'version': VERSION, 'process': None, 'engines': {}}


def _numbers(data, keys):
    return isinstance(data, dict) and all(data.get(k) is None or (_finite(data[k]) and data[k] >= 0) for k in keys)


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10 ** 9


def _valid_entry(entry):
    if not (isinstance(entry, dict) and _finite(entry.get('since'))):
        return False
    if entry.get('since_mono') is not None and not _finite(entry['since_mono']):
        return False
    if not all(_numbers(entry.get(k), USEFUL + ACTIVITY + ('kv',)) for k in ('base', 'last')):
        return False
    return all(entry['base'].get(k) is not None for k in USEFUL) and _count(entry.get('kv_drops'))


def _valid_process(start, created, counters):
    if not (start is None or _finite(start)):
        return False
    if not (isinstance(created, list) and len(created) <= MAX_CREATED):
        return False
    if not all(isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) and _finite(c[1]) for c in created):
        return False
    if not (isinstance(counters, dict) and len(counters) <= MAX_ENGINES):
        return False
    return all(isinstance(k, str) and _numbers(v, COUNTERS) for k, v in counters.items())


def load(memory):
    """(memory, None) as written by ``observe``, or (a fresh memory, why) when it is anything else."""
    if memory is None:
        return fresh(), None
    if not isinstance(memory, dict) or memory.get('version') != VERSION:
        return fresh(), 'not a memory this version wrote'
    engines = memory.get('engines')
    process = memory.get('process')
    if not isinstance(engines, dict) or len(engines) > MAX_ENGINES or not (process is None or isinstance(process, dict)):
        return fresh(), 'its engines are not what this module writes'
    for key, entry in engines.items():
        if not isinstance(key, str) or not _valid_entry(entry):
            return fresh(), 'a streak is not what this module writes'
    if process is not None:
        start = process.get('start_time')
        created = process.get('created')
        counters = process.get('counters')
        if not _valid_process(start, created, counters):
            return fresh(), 'its process is not what this module writes'
    return memory, None


def _identity(reading, profile):
    """What the memory keeps of a reading's process: enough for ``_readings.same_process``."""
    created = sorted(('%s%r' % (name, labels), value) for (name, labels), value in reading.created.items())
    keys = sorted(reading.engines, key=readings.engine_order)[:MAX_ENGINES]
    counters = dict((key, dict((k, reading.engines[key].counters.get(profile.stall_counters[k])) for k in COUNTERS))
                    for key in keys)
    return {'start_time': reading.start_time, 'created': [list(c) for c in created[:MAX_CREATED]], 'counters': counters}


def _as_reading(process, profile):
    """A kept identity as a Reading, to compare with another through ``same_process``."""
    engines = {}
    for key, vals in process['counters'].items():
        engine = readings.EngineReading()
        engine.counters = dict((profile.stall_counters[k], v) for k, v in vals.items() if k in COUNTERS and v is not None)
        engines[key] = engine
    created = dict((('created', name), value) for name, value in process['created'])
    return readings.Reading(engines, process.get('start_time'), created, True, profile=profile)


def _same_process(process, reading, profile):
    """False when the reading comes from another process than the kept identity (the ladder)."""
    return readings.same_process(_as_reading(process, profile),
                                 _as_reading(_identity(reading, profile), profile))[0] is not False


def _useful(vals):
    return tuple(vals[k] for k in USEFUL)


def _elapsed(entry, read, boot):
    """Seconds from the start of a streak to a read: the wall clock, and no more than the monotonic
    clock says when both were read on the same boot (a clock stepped forward is no evidence)."""
    seconds = read.at - entry['since']
    if boot and entry.get('boot') == boot and entry.get('since_mono') is not None and _finite(getattr(read, 'mono', None)):
        seconds = min(seconds, read.mono - entry['since_mono'])
    return seconds


def _grew(before, after):
    """The activity counters that rose from one set of values to another."""
    return dict((k, after[k] - before[k]) for k in ACTIVITY
                if after.get(k) is not None and before.get(k) is not None and after[k] > before[k])


def _another_life(entry, read, boot):
    """Whether a kept streak cannot be this process's: it began before the process started (a state dir carried over),
    or on another boot. Such a streak is never continued (an untrusted memory may only delay a finding)."""
    start = getattr(read, 'start_time', None)
    if _finite(start) and entry['since'] < start - SKEW:
        return True
    return bool(boot) and entry.get('boot') != boot


def _extend(streaks, key, engine, read, boot, profile):
    """One read of one engine: start, extend or end its streak."""
    vals = values(engine, profile)
    work = bool(engine.in_flight) and engine.awake is not False
    if not work or any(vals[k] is None for k in USEFUL):
        streaks.pop(key, None)
        return
    entry = streaks.get(key)
    if entry is not None and _another_life(entry, read, boot):
        entry = None
    if entry is None or _useful(vals) != _useful(entry['base']) or read.at < entry['since']:
        if entry is None and len(streaks) >= MAX_ENGINES:
            return
        streaks[key] = {'since': read.at, 'since_mono': getattr(read, 'mono', None), 'boot': boot, 'base': vals,
                        'last': vals, 'kv_drops': 0}
        return
    old_kv, new_kv = entry['last'].get('kv'), vals['kv']
    drops = entry['kv_drops'] + (1 if old_kv is not None and new_kv is not None and new_kv < old_kv else 0)
    streaks[key] = dict(entry, last=vals, kv_drops=drops)


def observe(memory, reads, state, window, boot=None, profile=PROFILE):
    """Update the memory with one check's reads, and find the engines stalled for ``window`` seconds.

    ``reads``: the check's readings, in order (each with ``at``, wall seconds, and ``mono``);
    ``state``: the check's verdict (``deferred`` for a check that found only deferred work that did
    not move); ``profile``: the engine profile that names the counters. Returns (memory, finding, summary): ``finding`` is None, or {'kind': 'livelock' or
    'stranded', 'engines', 'since', 'seconds', 'steps', 'prompt', 'preemptions', 'kv_drops'};
    ``summary`` is the evidence of every streak.
    """
    memory, damage = load(memory)
    summary = {'window': window, 'engines': {}}
    if damage:
        summary['note'] = 'the progress memory was started afresh: %s' % damage
    if state in RESETS_STALL:
        summary['note'] = 'every streak ended: the check says %s' % state
        return fresh(), None, summary
    reads = [r for r in reads if r is not None and _finite(getattr(r, 'at', None))]
    if state not in JUDGED or not reads:
        return memory, None, _summarize(memory, reads, summary, boot)
    if any(not _same_process(_identity(reads[0], profile), r, profile) for r in reads[1:]):
        # Reads of two processes in one check are a restart: the check judges it, this rule starts over.
        return fresh(), None, summary
    if memory['process'] is not None and not _same_process(memory['process'], reads[0], profile):
        memory = fresh()
        summary['note'] = 'another process than at the last check: every streak ended'
    before = dict((key, dict(entry)) for key, entry in memory['engines'].items())
    streaks = dict(memory['engines'])
    for read in reads:
        for key in [k for k in streaks if k not in read.engines]:
            del streaks[key]
        for key, engine in read.engines.items():
            _extend(streaks, key, engine, read, boot, profile)
    memory = {'version': VERSION, 'process': _identity(reads[-1], profile), 'engines': streaks}
    summary = _summarize(memory, reads, summary, boot)
    found = _stalled(streaks, before, reads[-1], state, window, boot)
    if not found or window <= 0:
        return memory, None, summary
    kind = 'stranded' if state == 'deferred' else 'livelock'
    finding = {
        'kind': kind,
        'engines': [key for key, dummy in found],
        'since': min(streaks[key]['since'] for key, dummy in found),
        'seconds': round(min(_elapsed(streaks[key], reads[-1], boot) for key, dummy in found), 1),
    }
    for what in ACTIVITY + ('kv_drops',):
        finding[what] = sum(grew.get(what, 0) for dummy, grew in found)
    return memory, finding, summary


def _stalled(streaks, before, last, state, window, boot):
    """[(engine, what grew over its streak)] for the engines stalled at the last read."""
    out = []
    for key, entry in sorted(streaks.items(), key=lambda kv: readings.engine_order(kv[0])):
        if _elapsed(entry, last, boot) < window:
            continue
        now = entry['last']
        grew = _grew(entry['base'], now)
        if entry['kv_drops']:
            grew['kv_drops'] = entry['kv_drops']
        if state == 'deferred':
            # Stranded: nothing at all moved since the streak began, the KV cache included.
            # Realtime sessions open: a paused streaming session waits as deferred for as long as its client
            # pauses (0.33), which is no stranding.
            if not grew and now.get('kv') == entry['base'].get('kv') and last.engines[key].waiting \
                    and last.engines[key].deferred == last.engines[key].waiting and not last.engines[key].running \
                    and not last.websocket_sessions:
                out.append((key, grew))
            continue
        if state != 'busy':
            continue
        # Livelock: activity over the streak, and again since the check before this one (a prefill
        # that has been running since then moves only the KV cache up: no activity, no finding).
        prev = before.get(key)
        prev_last = prev['last'] if prev and prev['since'] == entry['since'] else entry['base']
        prev_drops = prev['kv_drops'] if prev and prev['since'] == entry['since'] else 0
        active = bool(_grew(entry['base'], now)) or entry['kv_drops'] >= MIN_KV_DROPS
        recent = bool(_grew(prev_last, now)) or entry['kv_drops'] > prev_drops
        if active and recent:
            out.append((key, grew))
    return out


def _summarize(memory, reads, summary, boot):
    """The evidence: every streak's start and how long it has lasted (at most EVIDENCE_ENGINES)."""
    last = reads[-1] if reads else None
    keys = sorted(memory['engines'], key=readings.engine_order)
    for key in keys[:readings.EVIDENCE_ENGINES]:
        entry = memory['engines'][key]
        item = {'since': entry['since'], 'kv_drops': entry['kv_drops']}
        if last is not None:
            item['seconds'] = round(_elapsed(entry, last, boot), 1)
        item['activity'] = _grew(entry['base'], entry['last'])
        summary['engines'][key] = item
    if len(keys) > readings.EVIDENCE_ENGINES:
        summary['engines_not_shown'] = len(keys) - readings.EVIDENCE_ENGINES
    return summary


class Window(object):
    """The window rule for one check: the memory in, the memory to keep out (``memory``).

    ``off`` says why the rule is off (no ``state_dir``, a window of 0): then it finds nothing, and
    the evidence says why. ``profile``: the engine profile that names the counters the rule follows."""

    def __init__(self, memory, window, boot=None, off=None, note=None, profile=PROFILE):
        self.profile = profile
        self.memory = memory
        self.window = window
        self.boot = boot
        self.off = off
        self.note = note  # what the caller found when it read the memory (kept in the evidence)
        self.summary = {'window': window, 'off': off} if off else {'window': window, 'engines': {}}

    def observe(self, reads, state):
        if self.off:
            return None
        self.memory, finding, self.summary = observe(self.memory, reads, state, self.window, self.boot,
                                                     self.profile)
        if self.note:
            self.summary['note'] = '; '.join(n for n in (self.note, self.summary.get('note')) if n)
        return finding

    def reason(self, finding, last):
        """The sentence of a stalled engine's verdict, naming the signature."""
        which = ' on engine(s) %s' % ', '.join(finding['engines'][:16]) if len(last.engines) > 1 else ''
        since = 'for %s (since %s)' % (duration(finding['seconds']), moment(finding['since']))
        if finding['kind'] == 'stranded':
            return ('only deferred requests in flight%s and nothing moved %s, the KV cache included: deferred work '
                    'clears in seconds, this is stranded (a KV transfer or grammar that never completes), past the '
                    'window of %s' % (which, since, duration(self.window)))
        did = ', '.join('%s +%s' % (name, '%g' % finding[what]) for what, name in (
            ('prompt', 'prompt tokens'), ('preemptions', 'preemptions'), ('steps', 'engine steps'),
            ('kv_drops', 'KV-cache drops')) if finding[what])
        in_flight = last.in_flight
        return ('%s request(s) in flight at every read %s, no token generated and no request completed%s, yet '
                'the engine kept working (%s): busy doing nothing useful, past the window of %s'
                % ('%g' % in_flight if in_flight is not None else '?', since, which, did, duration(self.window)))
