# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The decision procedure: is a vLLM server (or another engine's, by its profile) idle, busy, stuck, ...?

Private to this collection. The HTTP reads, the sleep and the clock are
injected, so every branch is tested without a server and without sleeping.

``server`` is any object with these methods, each returning a ``Fetched``:
``metrics()``, ``health()``, ``version()``, ``models()``, ``is_paused()`` and
``probe(model)`` (a one-token request). ``Fetched.error`` is None for an
HTTP answer (whatever its status) or one of ``_types.FETCH_ERRORS``.

The rule: a health check must not use what it guards. The server's own
counters are read first; a request is sent only to a server with nothing in
flight; "stuck" needs evidence that nothing moved, never a timeout of our own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.modelops.vllm.plugins.module_utils._prometheus import ExpositionError
from ansible_collections.modelops.vllm.plugins.module_utils import _readings as readings
from ansible_collections.modelops.vllm.plugins.module_utils._freeze import Freeze
from ansible_collections.modelops.vllm.plugins.module_utils._settings import WAITS
from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError, Fetched, clip, duration, model_ids, moment
from ansible_collections.modelops.vllm.plugins.module_utils._vllm import PROFILE

# A probe counts as unanswered only when it waited this share of probe_timeout (clock granularity).
FULL_WAIT = 0.98
# Notes kept in the evidence.
MAX_NOTES = 20

NO_PROBE = {'sent': False, 'ok': None, 'outcome': None, 'seconds': None, 'status': None, 'error': None, 'model': None}


def probe_outcome(fetched, probe_timeout=None):
    """Classify a one-token probe.

    'ok'; 'no_answer' (it waited its whole ``probe_timeout`` without any answer, not even a status
    line: the only outcome that counts towards stuck); 'cut_short' (a timeout shorter than that, when
    the check's deadline left less time); 'incomplete' (an answer started but did not complete in
    time: something answered, so not a hang); 'dropped' (the connection was closed or reset before an
    answer: a proxy or firewall, or a crashing server, never a hang); 'refused'; 'server_error' (5xx);
    'rejected' (4xx: a configuration problem); 'invalid' (200 without a completion, or an unusable
    answer)."""
    if fetched.error == 'timeout':
        waited = fetched.seconds if fetched.seconds is not None else 0.0
        if probe_timeout is None or waited >= FULL_WAIT * probe_timeout:
            return 'no_answer'
        return 'cut_short'
    if fetched.error == 'deadline':
        return 'cut_short'
    if fetched.error in ('dropped', 'refused', 'incomplete'):
        return fetched.error
    if fetched.error:
        return 'invalid'
    if fetched.status >= 500:
        return 'server_error'
    if fetched.status != 200:
        return 'rejected'
    body = fetched.json()
    if not isinstance(body, dict):
        return 'invalid'
    usage = body.get('usage') or {}
    if isinstance(usage, dict) and isinstance(usage.get('completion_tokens'), int) and usage['completion_tokens'] >= 1:
        return 'ok'
    choices = body.get('choices') or []
    if choices and isinstance(choices[0], dict) and choices[0].get('finish_reason'):
        return 'ok'
    return 'invalid'


def _dead_or(profile, fetched_health, verdict):
    return ('down', 'the engine is dead: /health answered %s' % fetched_health.describe()) \
        if profile.engine_is_dead(fetched_health) else verdict


def _count(value):
    """A request count for a sentence ('3', '2.5')."""
    return '%d' % value if value == int(value) else '%g' % value


class Judge(object):
    """One check of one server. Use ``Judge(...).run()``.

    ``clock`` gives the wall time kept in the evidence; ``monotonic`` measures waits and the
    overall ``deadline`` (seconds from the start of ``run``; None for no limit). ``profile`` is the
    engine profile (vLLM's by default): its metric names, version quirk, dead-engine statuses, pause
    answer and the wording of its flags.
    """

    def __init__(self, server, interval=5.0, model=None, sleep=None, clock=None,
                 probe_timeout=None, metrics_timeout=None, monotonic=None, deadline=None, window=None,
                 profile=PROFILE, freeze=None):
        self.server = server
        self.profile = profile
        # How long an engine has shown no movement (_freeze.Freeze): stuck only past its limit. Without
        # one, the default limit, measured within this check alone.
        self.freeze = freeze if freeze is not None else Freeze(remember=False)
        # The read of this check (its index in readings) at which each engine's freeze began.
        self.frozen_from = {}
        # Useful progress across checks (_stall.Window), or None with the reason it is off.
        self.window = window
        self.interval = float(interval)
        self.model = model
        self.sleep = sleep
        self.clock = clock
        self.monotonic = monotonic or clock
        self.probe_timeout = probe_timeout
        self.metrics_timeout = metrics_timeout
        self.deadline = deadline
        self.ends = None
        self.version = None
        self.idle_ticks = False
        self.readings = []
        self.moves = []
        self.probes = []
        self.notes = []
        self.models = None
        self.health = None
        self.restarted = False
        self.stuck_engines = []
        self.basis = None  # the reading a verdict rests on, when it is not the last one
        self.deferred_only = False  # the verdict: only deferred requests wait, and nothing moved
        self.pause_answers = []
        self.pause_asked = False  # True once /is_paused gave an answer that makes asking again pointless
        self.frozen_engines = []
        self.probe_sent = (None, None)  # (wall, monotonic) time of the first probe

    # -- reads -------------------------------------------------------------

    def _now(self):
        return self.clock() if self.clock else None

    def _mono(self):
        return self.monotonic() if self.monotonic else None

    def left(self):
        """Seconds left before the overall deadline, or None without one."""
        if self.ends is None:
            return None
        return self.ends - self._mono()

    def note(self, text):
        if len(self.notes) < MAX_NOTES:
            self.notes.append(clip(text))

    def read(self):
        """Scrape /metrics once: (Reading, None) or (None, Fetched)."""
        at = self._now()
        mono = self._mono()
        fetched = self.server.metrics()
        if fetched.error or fetched.status != 200:
            return None, fetched
        try:
            reading = readings.read_text(fetched.text, at=at, seconds=fetched.seconds, profile=self.profile)
        except (ExpositionError, readings.ReadingError) as exc:
            return None, Fetched(status=200, error='invalid', message='not Prometheus text this check can judge: %s'
                                 % clip(exc), seconds=fetched.seconds)
        reading.mono = mono
        if reading.v0:
            self.idle_ticks = True
        for problem in reading.problems[:3]:
            self.note('left out, a value that cannot be true: %s' % problem)
        self.readings.append(reading)
        return reading, None

    def check_health(self):
        self.health = self.server.health()
        return self.health

    def paused(self):
        """A finished ``paused`` result when the server proves a deliberate pause, else None. Asked
        before every probe and before every ``stuck``: a paused engine freezes every counter on
        purpose (``POST /pause?mode=keep``), or holds new requests where no gauge counts them
        (``mode=wait``), so it reads as a hang."""
        last = self.readings[-1] if self.readings else None
        if last is not None and last.weight_updates:
            return self.finish('paused', 'a weight update is in flight (%s %s): generation is frozen on purpose; '
                                         'not probed, not judged'
                               % (self.profile.weight_updates, _count(last.weight_updates)))
        if self.pause_asked:
            return None
        fetched = self.server.is_paused()
        proven = self.profile.pause_answer(fetched)
        body = fetched.json() if fetched.status == 200 and not fetched.error else None
        self.pause_answers.append(clip('%s%s' % (fetched.describe(), ' %s' % json.dumps(body) if body is not None
                                                 else ''), 120))
        if proven:
            return self.finish('paused', 'the engine is paused on purpose (%s): not probed, not judged'
                               % self.profile.pause_proof)
        # Only a definite "not paused" is worth asking again later in this check: no endpoint (404,
        # VLLM_SERVER_DEV_MODE off) stays so, and a hung engine leaves the RPC unanswered.
        self.pause_asked = not self.profile.pause_denied(fetched)
        return None

    def probe(self):
        model = self.model or self._model_from_metrics() or self._model_from_api()
        fetched = self.server.probe(model)
        outcome = probe_outcome(fetched, self.probe_timeout)
        record = {
            'sent': True,
            'ok': outcome == 'ok',
            'outcome': outcome,
            'seconds': None if fetched.seconds is None else round(fetched.seconds, 3),
            'status': fetched.status,
            'error': fetched.describe() if outcome != 'ok' else None,
            'model': model,
        }
        self.probes.append(record)
        return outcome, fetched

    def _model_from_metrics(self):
        for reading in reversed(self.readings):
            if reading.model_name:
                return reading.model_name
        return None

    def _model_from_api(self):
        fetched = self.server.models()
        ids = model_ids(fetched)
        if ids:
            self.models = ids
            return ids[0]
        self.note('/v1/models gave no model id (%s); the probe names no model' % fetched.describe())
        return None

    # -- verdicts ----------------------------------------------------------

    def finish(self, state, reason):
        last = self.basis or (self.readings[-1] if self.readings else None)
        first = None
        for reading in self.readings:
            if last is not None and readings.same_process(reading, last)[0] is not False:
                first = reading
                break
        probe = dict(self.probes[-1] if self.probes else NO_PROBE, attempts=len(self.probes))
        result = {
            'state': state,
            'reason': reason,
            'restarted': self.restarted,
            'probe': probe,
            'running': last.running if last else None,
            'waiting': last.waiting if last else None,
            'kv_cache_usage': last.kv_cache if last else None,
            'steps_per_second': readings.rate(first, last, self.profile.steps) if first is not last and first else None,
            'generation_tokens_per_second': (readings.rate(first, last, self.profile.generation)
                                             if first is not last and first else None),
            'version': self.version,
            'model': self.model or self._model_from_metrics() or (self.models[0] if self.models else None),
            'models': self.models or [],
            'stuck_engines': list(self.stuck_engines),
            'frozen_for': self._frozen_seconds(last),
            'longest_step': longest_step(last),
            'config_warnings': self.warnings(last),
            'evidence': {
                'interval': self.interval,
                'reads': [r.summary() for r in self.readings],
                'moved': [_trim_engines(moved) for moved in self.moves],
                'probes': self.probes,
                'health': self.health.describe() if self.health is not None else None,
                'is_paused': list(self.pause_answers),
                'progress': self.window.summary if self.window is not None else None,
                'freeze': self.freeze.summary(last),
                'idle_ticks': self.idle_ticks,
                'notes': self.notes,
                'deadline': self.deadline,
            },
        }
        return result

    def _frozen_seconds(self, last):
        """The longest freeze of the engines this check found frozen or stuck, at the read a verdict rests on."""
        keys = [key for key in (self.stuck_engines or self.frozen_engines) if key in self.freeze.current]
        if not keys or last is None:
            return None
        return round(self._frozen_for(keys, last), 1)

    def warnings(self, last):
        """A freeze_limit that is not well above what this server has already taken between two tokens."""
        longest = longest_step(last).get('inter_token_latency')
        if not longest:
            return []
        above, at_most = longest['above'], longest['at_most']
        needed = max(2 * above, at_most if at_most is not None else 0)
        if self.freeze.limit >= needed:
            return []
        shown = ('between %s and %s' % (duration(above), duration(at_most)) if at_most is not None
                 else 'more than %s' % duration(above))
        return ['freeze_limit (%s) is not well above the longest this server has taken between two tokens (%s, '
                '%s): a healthy step that long would be judged a hang; set it to at least %s'
                % (duration(self.freeze.limit), shown, self.profile.step_histograms[0][1], duration(needed))]

    def unreadable(self, fetched, between=False):
        """A /metrics read that gave no reading."""
        what = '/metrics'
        if fetched.error == 'refused':
            when = ' between reads' if between else ''
            return self.finish('down', 'nothing answers%s (%s); a server still loading its weights does not '
                                       'listen either' % (when, clip(fetched.message or fetched.error)))
        if fetched.error == 'tls':
            raise CheckError('TLS error on %s: %s' % (what, clip(fetched.message)))
        if fetched.error == 'timeout':
            return self.finish('unknown', '%s gave no complete answer within %s s: a slow /metrics is a loaded '
                                          'server or a loaded host, never taken for stuck'
                               % (what, self.metrics_timeout))
        if fetched.error == 'deadline':
            return self.out_of_time()
        if fetched.error:
            return self.finish('unknown', '%s could not be read: %s' % (what, fetched.describe()))
        if fetched.status == 404:
            return self.probe_only('/metrics answered 404')
        if fetched.status >= 500:
            state, reason = _dead_or(self.profile, self.check_health(), (
                'unknown', '/metrics answered HTTP %s while /health answered %s'
                % (fetched.status, self.health.describe())))
            return self.finish(state, reason)
        return self.finish('unknown', '/metrics answered HTTP %s' % fetched.status)

    def out_of_time(self):
        return self.finish('unknown', 'the check ran out of its overall time of %s s (2 x interval + 2 x '
                                      'probe_timeout + 8 x metrics_timeout) before it could judge: never taken '
                                      'for stuck' % _count(self.deadline))

    def not_readings(self, reading):
        return self.finish('unknown', 'the metrics report request counts that cannot be true (%s): the server '
                                      'is neither judged nor probed' % clip('; '.join(reading.problems[:5])))

    def probe_only(self, why):
        """No usable metrics: judge by a one-token probe alone, never 'stuck'."""
        self.note(why)
        health = self.check_health()
        if self.profile.engine_is_dead(health):
            return self.finish('down', 'the engine is dead: /health answered %s (%s)' % (health.describe(), why))
        paused = self.paused()
        if paused:
            return paused
        outcome, fetched = self.probe()
        if outcome == 'ok':
            return self.finish('up', 'it answered a one-token probe in %.2f s, but its load cannot be known: %s'
                               % (fetched.seconds or 0.0, why))
        if outcome == 'no_answer':
            return self.finish('unknown', 'no usable metrics (%s) and the probe got no answer (%s); it may be '
                                          'queued behind work, so this is not called stuck'
                               % (why, fetched.describe()))
        return self.probe_failed(outcome, fetched)

    def probe_failed(self, outcome, fetched):
        """A probe that was not answered with a completion, and not by a full wait."""
        if outcome == 'rejected':
            hint = ' (check api_key)' if fetched.status in (401, 403) else \
                ' (check the model name)' if fetched.status == 404 else ''
            return self.finish('unknown', 'the probe was rejected with HTTP %s%s' % (fetched.status, hint))
        if outcome == 'cut_short':
            return self.finish('unknown', 'the probe got no answer, but the check\'s overall deadline cut it short '
                                          'after %.2f s of probe_timeout %s s: not a full wait, never taken for '
                                          'stuck' % (fetched.seconds or 0.0, self.probe_timeout))
        if outcome == 'incomplete':
            return self.finish('unknown', 'the probe\'s answer started but did not complete in %.2f s (%s): something '
                                          'answered, so this is no hang' % (fetched.seconds or 0.0, fetched.describe()))
        if outcome in ('server_error', 'refused', 'dropped'):
            health = self.check_health()
            if self.profile.engine_is_dead(health):
                return self.finish('down', 'the probe got %s and /health answered %s'
                                   % (fetched.describe(), health.describe()))
            if outcome == 'dropped':
                return self.finish('unknown', 'the probe\'s connection was closed after %.2f s without an answer '
                                              '(%s) while /health answered %s: a proxy or firewall that drops '
                                              'requests, or a crashing server, not a hang'
                                   % (fetched.seconds or 0.0, fetched.describe(), health.describe()))
            return self.finish('unknown', 'the probe got %s while /health answered %s'
                               % (fetched.describe(), health.describe()))
        return self.finish('unknown', 'the probe answer had no completion token (%s)' % fetched.describe())

    def run(self):
        """Judge the server: the verdict of this check, then useful progress across checks (the window)."""
        result = self.judge()
        if self.window is None:
            return result
        finding = self.window.observe(self.readings, 'deferred' if self.deferred_only else result['state'])
        if finding:
            paused = self.paused()
            if paused:
                self.window.observe([], 'paused')
                result = paused
            else:
                self.stuck_engines = finding['engines'][:readings.MAX_ENGINES]
                result = self.finish('stuck', self.window.reason(finding, self.readings[-1]))
        result['evidence']['progress'] = self.window.summary
        return result

    def judge(self):
        """The verdict of this check alone."""
        if self.deadline is not None:
            self.ends = self._mono() + self.deadline
        version = self.server.version()
        body = version.json() if not version.error and version.status == 200 else None
        if isinstance(body, dict) and isinstance(body.get('version'), str) and len(body['version']) <= 64:
            self.version = body['version']
            parsed = self.profile.parse_version(self.version)
            # V0 and V1 0.7.x observe a 0 into the step histogram while idle.
            if parsed is not None and parsed < self.profile.idle_ticks_before:
                self.idle_ticks = True
        first, failed = self.read()
        if first is None:
            return self.unreadable(failed)
        if not first.has_vllm:
            return self.probe_only('/metrics has no %s series (%s)' % (self.profile.prefix, self.profile.no_metrics_hint))
        if first.sleeping:
            return self.finish('sleeping', 'the engine sleeps on purpose (%s %s=0): not probed, not judged'
                               % (self.profile.sleep_state, self.profile.awake))
        if first.in_flight is None:
            return self.not_readings(first)
        if first.in_flight == 0:
            if first.running is None:
                self.note('no running/waiting samples yet (multiprocess metrics before the first engine step): '
                          'nothing has run')
            return self.idle_path(first)
        return self.busy_path(first)

    # -- nothing in flight: a one-token probe --------------------------------

    def idle_path(self, before, attempt=1):
        paused = self.paused()
        if paused:
            return paused
        if attempt == 1:
            # A freeze of an idle-looking engine begins with the first probe sent to it.
            self.probe_sent = (self._now(), self._mono())
        outcome, fetched = self.probe()
        if outcome == 'ok':
            # The probe must have been answered by the process whose counters were read: behind a
            # load balancer it may not have been.
            after, failed = self.read()
            if after is not None and readings.same_process(before, after)[0] is False:
                return self.restarted_path(before, after, readings.same_process(before, after)[1])
            # Work that arrived after the probe does not change what the probe showed; the result
            # reports the reading the verdict rests on.
            self.basis = before
            if attempt == 1:
                return self.finish('idle', 'nothing in flight and a one-token probe answered in %.2f s'
                                   % (fetched.seconds or 0.0))
            return self.finish('idle', 'nothing in flight; the first probe got no answer, the second answered '
                                       'in %.2f s' % (fetched.seconds or 0.0))
        if outcome != 'no_answer':
            return self.probe_failed(outcome, fetched)
        health = self.check_health()
        if self.profile.engine_is_dead(health):
            return self.finish('down', 'the probe got no answer and /health answered %s' % health.describe())
        after, moved, ended = self.read_again(before)
        if ended:
            return ended
        if after.in_flight is None:
            return self.not_readings(after)
        if any(moved.values()):
            if after.in_flight:
                return self.finish('busy', 'the probe got no answer in %s s, but the engine moved and now has '
                                           '%s in flight: the probe queued behind work, not stuck'
                                   % (self.probe_timeout, _count(after.in_flight)))
            return self.finish('unknown', 'the probe got no answer in %s s, but the engine moved: not stuck'
                               % self.probe_timeout)
        if after.in_flight:
            # Work arrived (someone else's): judge it by its progress instead.
            self.note('after an unanswered probe %s request(s) are in flight: judged by progress'
                      % _count(after.in_flight))
            return self.busy_path(after)
        why = _unjudgeable(before, after, set(before.engines) | set(after.engines))
        if why:
            return self.finish('unknown', 'the probe got no answer in %s s, but that nothing moved cannot be shown: '
                                          '%s' % (self.probe_timeout, why))
        if attempt == 1:
            at, mono = self.probe_sent
            for key in after.engines:
                self.begin_freeze(key, before, at=at, mono=mono)
            return self.idle_path(after, attempt=2)
        # /is_paused is asked again before a stuck (watch).
        return self.watch(after, sorted(self.frozen_from, key=readings.engine_order), {}, 'probe')

    # -- work in flight: compare counters, never probe -----------------------

    def read_again(self, before):
        """Read again and compare: (after, moved, None), or (None, None, result) when that read
        ends the check (unreadable, or another process: never compare counters across two)."""
        after, failed = self.read()
        if after is None:
            return None, None, self.unreadable(failed, between=True)
        same, how = readings.same_process(before, after)
        if same is False:
            return None, None, self.restarted_path(before, after, how)
        moved = readings.engine_moves(before, after, idle_ticks=self.idle_ticks)
        self.moves.append(moved)
        return after, moved, None

    def busy_path(self, before):
        start = before
        stalled_before = None
        for wait in range(1, WAITS + 1):
            left = self.left()
            if left is not None and left < self.interval + (self.metrics_timeout or 0):
                return self.out_of_time()
            self.sleep(self.interval)
            after, moved, ended = self.read_again(before)
            if ended:
                return ended
            if after.in_flight is None:
                return self.not_readings(after)
            keys = set(before.engines) | set(after.engines)
            stalled = set(key for key in keys if not moved.get(key) and _has_work(before, after, key))
            if not stalled:
                return self.finish('busy', self._busy_reason(before, after, moved))
            why = _unjudgeable(before, after, stalled)
            if why:
                return self.finish('unknown', '%s request(s) in flight and nothing moved within %s s, but that '
                                              'cannot be shown: %s' % (_count(after.in_flight), self.interval, why))
            span = _span(before, after)
            if span is not None and span < self.interval - 0.01:
                return self.finish('unknown', 'nothing moved, but the reads were only %.3f s apart, not the '
                                              'interval of %s s: no evidence' % (span, self.interval))
            if stalled_before is not None:
                stuck = sorted(stalled & stalled_before, key=readings.engine_order)
                if not stuck:
                    return self.finish('busy', self._busy_reason(before, after, moved))
                return self.frozen_path(start, after, stuck, moved)
            stalled_before = stalled
            before = after
        raise AssertionError('unreachable')  # pragma: no cover

    def _busy_reason(self, before, after, moved):
        what = sorted(set(name.replace(self.profile.prefix, '') for names in moved.values() for name in names))
        return ('%s request(s) in flight and the engine moved within %s s (%s); no probe sent'
                % (_count(max(before.in_flight, after.in_flight)), self.interval, ', '.join(what[:8])))

    # -- nothing moved: a freeze, proof of a hang only once it has lasted freeze_limit --------

    def frozen_path(self, start, after, keys, moved):
        """Work in flight on engines that did not move across two waits (since ``start``)."""
        engines = [after.engines[k] for k in keys]
        deferred_only = all((e.running or 0) == 0 and e.waiting and e.deferred == e.waiting for e in engines)
        if deferred_only:
            self.deferred_only = True
            sessions = after.websocket_sessions
            if sessions:
                return self.finish('unknown', 'only deferred requests wait and no engine step happened across two '
                                              'waits, with %s realtime session(s) open (%s): a paused streaming '
                                              'session waits as deferred for as long as its client pauses; not '
                                              'called stuck' % (_count(sessions), self.profile.websockets))
            return self.finish('unknown', 'only deferred requests wait (grammar compilation or remote KV) and '
                                          'no engine step happened across two waits; deferred work can sit '
                                          'without steps, so this is not called stuck')
        health = self.check_health()
        if self.profile.engine_is_dead(health):
            return self.finish('down', 'work in flight, nothing moved, and /health answered %s'
                               % health.describe())
        paused = self.paused()
        if paused:
            return paused
        for key in keys:
            self.begin_freeze(key, start)
        return self.watch(after, keys, moved, 'work')

    def begin_freeze(self, key, reading, at=None, mono=None):
        """Begin (or continue from the memory) the freeze of engine ``key``, unmoved since ``reading``. A read of
        this check that showed a deliberate freeze (a weight transfer) keeps the waits before it from counting."""
        index = self.readings.index(reading) if reading in self.readings else len(self.readings) - 1
        deliberate = [i for i, r in enumerate(self.readings) if r.weight_updates and i >= index]
        if deliberate:
            index = deliberate[-1] + 1
            reading, at, mono = self.readings[index], None, None
            self.note('a weight transfer was in flight at an earlier read of this check: the freeze is counted '
                      'from the read after it')
        self.frozen_from[key] = index
        return self.freeze.begin(key, reading, readings.progress_counters(self.idle_ticks, self.profile),
                                 at=at, mono=mono)

    def proven(self, key, read):
        """A freeze is proof once it has lasted the limit, and this check saw two waits of it (or the memory did)."""
        entry = self.freeze.current.get(key)
        if entry is None or not self.freeze.proven(key, read):
            return False
        return entry['remembered'] or len(self.readings) - 1 - self.frozen_from.get(key, len(self.readings)) >= 2

    def watch(self, after, keys, moved, how):
        """The engines ``keys`` show no movement (``how``: with work in flight, or to the probes sent). Stuck once
        the freeze has lasted the limit; until then, keep reading while this check may (``freeze_wait``, the
        deadline) and the limit can be reached in that time: busy when the engine moves, else frozen."""
        while True:
            proven = [key for key in keys if self.proven(key, after)]
            if proven:
                paused = self.paused()
                if paused:
                    return paused
                return self.stuck(after, proven, moved, how)
            need = max(0.0, min(self.freeze.limit - (self.freeze.seconds(key, after) or 0.0) for key in keys))
            if any(len(self.readings) - 1 - self.frozen_from.get(key, 0) < 2 for key in keys):
                need = max(need, self.interval)
            left = self.left()
            budget = self.freeze.wait - self.freeze.watched
            if need > budget or (left is not None and left < need + (self.metrics_timeout or 0)):
                return self.frozen(after, keys, how)
            pause = max(min(self.interval, need), 0.05)
            self.sleep(pause)
            self.freeze.watched += pause
            newer, moved, ended = self.read_again(after)
            if ended:
                return ended
            if newer.in_flight is None:
                return self.not_readings(newer)
            if newer.weight_updates:
                return self.paused()
            went = [key for key in keys if moved.get(key)]
            if went:
                return self.moved_again(after, newer, went, keys, how)
            why = _unjudgeable(after, newer, keys)
            if why:
                return self.finish('unknown', 'nothing moved for %s, but that cannot be shown: %s'
                                   % (duration(self._frozen_for(keys, newer)), why))
            after = newer

    def _frozen_for(self, keys, read):
        return max(self.freeze.seconds(key, read) or 0.0 for key in keys)

    def moved_again(self, before, after, went, keys, how):
        """A watched freeze ended: the engine moved. It was a long step (or work the probe queued behind)."""
        seconds = self._frozen_for(went, before)
        for key in went:
            self.freeze.end(key)
        if after.in_flight:
            return self.finish('busy', '%s request(s) in flight; the engine moved again after %s without movement '
                                       '(%s): a long engine step, not a hang' % (
                                           _count(after.in_flight), duration(seconds), ', '.join(went[:16])))
        left = self.left()
        if how == 'probe' and (left is None or left >= (self.probe_timeout or 0) + (self.metrics_timeout or 0)):
            # The engine is free again and nothing is in flight: one more probe says whether it serves.
            outcome, fetched = self.probe()
            if outcome == 'ok':
                self.basis = after
                return self.finish('idle', 'nothing in flight; the probes waited behind one long engine step (%s '
                                           'without movement), then the engine moved and a probe answered in %.2f s'
                                   % (duration(seconds), fetched.seconds or 0.0))
        return self.finish('unknown', 'the engine moved again after %s without movement and has nothing in flight '
                                      'now: %s, not stuck' % (duration(seconds), 'the probe queued behind a long '
                                                                                 'engine step' if how == 'probe'
                                                              else 'a long engine step'))

    def _since(self, keys):
        since = min(self.freeze.current[key]['since'] for key in keys if key in self.freeze.current)
        return moment(since)

    def frozen(self, after, keys, how):
        """No movement for less than the limit: no proof of a hang yet, and no movement either."""
        self.frozen_engines = keys[:readings.MAX_ENGINES]
        seconds = self._frozen_for(keys, after)
        which = self._which(after, keys, None)
        if how == 'probe':
            what = ('nothing in flight, yet two one-token probes got no answer (each waited %s s) and nothing moved '
                    'for %s (since the first probe, %s)' % (self.probe_timeout, duration(seconds), self._since(keys)))
        else:
            what = ('%s request(s) in flight and no counter or KV-cache gauge moved for %s (since %s)%s'
                    % (_count(after.in_flight), duration(seconds), self._since(keys), which))
        watched = ', watched %s more' % duration(self.freeze.watched) if self.freeze.watched else ''
        return self.finish('frozen', '%s%s: not yet proof of a hang, which takes %s without movement (freeze_limit); '
                                     'one long engine step (a large prefill chunk, a kernel compile) freezes every '
                                     'series as long' % (what, watched, duration(self.freeze.limit)))

    def _which(self, after, stuck, moved):
        all_engines = len(stuck) == len(after.engines)
        if not all_engines:
            return ' on engine(s) %s%s' % (clip(', '.join(stuck), 120), _others(after, stuck, moved))
        if len(stuck) > 1:
            return ' on every engine (%s)' % clip(', '.join(stuck), 120)
        return ''

    def stuck(self, after, stuck, moved=None, how='work'):
        self.stuck_engines = stuck[:readings.MAX_ENGINES]
        seconds = self._frozen_for(stuck, after)
        if how == 'probe':
            return self.finish('stuck', 'nothing in flight, yet two one-token probes each waited their full %s s '
                                        'without an answer and no counter or gauge moved for %s (since the first '
                                        'probe, %s), past freeze_limit (%s): an idle-looking hang'
                               % (self.probe_timeout, duration(seconds), self._since(stuck),
                                  duration(self.freeze.limit)))
        return self.finish('stuck', '%s request(s) in flight and no counter or KV-cache gauge moved for %s (since %s)%s, '
                                    'past freeze_limit (%s) (/health answered %s, which a hang does not change)'
                           % (_count(after.in_flight), duration(seconds), self._since(stuck),
                              self._which(after, stuck, moved), duration(self.freeze.limit),
                              self.health.describe() if self.health is not None else 'nothing'))

    # -- another process between reads -------------------------------------

    def restarted_path(self, before, after, how):
        # A load balancer alternates between processes; a restart does not come back.
        if readings.start_time_order(before, after) == -1:
            return self.balanced(how)
        # A restart gives one new process that stays put across reads taken back to back; reads
        # behind a load balancer come back to the first process or move on to yet another one.
        latest = after
        for dummy in range(2):
            again, failed = self.read()
            if again is None:
                break
            if readings.same_process(before, again)[0] is True or readings.same_process(latest, again)[0] is False:
                return self.balanced(how)
            latest = again
        self.restarted = True
        self.note('restart seen: %s; counters of the two processes are not compared' % how)
        if latest.in_flight is None:
            return self.finish('restarted', 'the server restarted between reads (%s); the new process reports '
                                            'request counts that cannot be true, so it was not probed' % how)
        if latest.in_flight:
            return self.finish('restarted', 'the server restarted between reads (%s); the new process already has '
                                            '%s request(s) in flight, so it was not probed'
                               % (how, _count(latest.in_flight)))
        paused = self.paused()
        if paused:
            return paused
        outcome, fetched = self.probe()
        if outcome == 'ok':
            return self.finish('restarted', 'the server restarted between reads (%s) and the new process answered '
                                            'a one-token probe in %.2f s' % (how, fetched.seconds or 0.0))
        return self.finish('starting', 'the server restarted between reads (%s) and the new process has not '
                                       'answered a probe yet (%s)' % (how, fetched.describe()))

    def balanced(self, how):
        self.note(how)
        return self.finish('unknown', 'reads came from different server processes that alternate (%s): this URL '
                                      'looks like a load balancer; check it with kind=proxy and check its backends '
                                      'directly' % how)


def longest_step(reading):
    """The longest this server has shown, from its histograms (``profile.step_histograms``): per histogram,
    ``{'above': seconds, 'at_most': seconds or None}`` of its highest observation (the bounds of its bucket)."""
    if reading is None:
        return {}
    out = {}
    for what, dummy in reading.profile.step_histograms:
        found = reading.longest(what)
        if found is not None:
            out[what] = {'above': found[0], 'at_most': found[1]}
    return out


def _others(after, stuck, moved):
    """What the engines that are not stuck did in the last wait, in words."""
    others = sorted(set(after.engines) - set(stuck), key=readings.engine_order)
    went = [key for key in others if (moved or {}).get(key)]
    idle = [key for key in others if key not in went and not after.engines[key].in_flight]
    parts = []
    if went:
        parts.append('engine(s) %s moved' % clip(', '.join(went), 60))
    if idle:
        parts.append('engine(s) %s had nothing in flight' % clip(', '.join(idle), 60))
    rest = len(others) - len(went) - len(idle)
    if rest:
        parts.append('%d other engine(s) moved in the first wait only' % rest)
    return ' (%s)' % '; '.join(parts) if parts else ''


def _has_work(before, after, key):
    """Whether an engine had requests in flight in either read, and is not asleep on purpose."""
    old, new = before.engines.get(key), after.engines.get(key)
    work = any(engine is not None and engine.in_flight for engine in (old, new))
    return work and not any(engine is not None and engine.awake is False for engine in (old, new))


def _unjudgeable(before, after, keys):
    """Why "nothing moved" on these engines is no evidence, or None when it is."""
    empty = readings.EngineReading()
    for key in sorted(keys, key=readings.engine_order):
        why = readings.judgeable(before.engines.get(key, empty), after.engines.get(key, empty))
        if why:
            return 'engine %s: %s' % (clip(key, 40), why)
    return None


def _span(before, after):
    old, new = getattr(before, 'mono', None), getattr(after, 'mono', None)
    return None if old is None or new is None else new - old


def _trim_engines(moved):
    """One wait's moves for the evidence: at most EVIDENCE_ENGINES engines."""
    if len(moved) <= readings.EVIDENCE_ENGINES:
        return moved
    keys = sorted(moved, key=readings.engine_order)
    out = dict((key, moved[key]) for key in keys[:readings.EVIDENCE_ENGINES])
    out['engines_not_shown'] = len(keys) - readings.EVIDENCE_ENGINES
    return out


def check_proxy(server):
    """A proxy in front of several backends: GET /v1/models and nothing else."""
    fetched = server.models()
    base = {'restarted': False, 'running': None, 'waiting': None, 'kv_cache_usage': None,
            'steps_per_second': None, 'generation_tokens_per_second': None, 'version': None,
            'stuck_engines': [],
            'probe': dict(NO_PROBE, attempts=0)}
    ids = model_ids(fetched)
    evidence = {'models_answer': fetched.describe(),
                'seconds': None if fetched.seconds is None else round(fetched.seconds, 4)}
    if ids:
        state, reason = 'up', 'the proxy answered /v1/models with %s in %.3f s; its backends must be checked ' \
                              'directly' % (', '.join(ids), fetched.seconds or 0.0)
    elif fetched.error == 'tls':
        raise CheckError('TLS error on /v1/models: %s' % fetched.message)
    elif fetched.error in ('refused', 'dropped') or (fetched.status is not None and fetched.status >= 500):
        state, reason = 'down', 'the proxy gave no model list: %s' % fetched.describe()
    elif fetched.status in (401, 403):
        state, reason = 'unknown', '/v1/models answered HTTP %s (check api_key)' % fetched.status
    else:
        state, reason = 'unknown', 'the proxy gave no model list: %s' % fetched.describe()
    return dict(base, state=state, reason=reason, model=ids[0] if ids else None, models=ids or [],
                evidence=evidence)
