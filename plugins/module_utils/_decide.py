# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one place that decides whether the watchdog restarts a vLLM server.

Private to this collection. A pure function: the verdict of the health check,
what the service manager says, the restart history kept on the host, the
clock and the settings in; an action and the new history out.

The guard rails (design.md): restart only on a confirmed ``stuck``, or a
``down`` that the service manager confirms is not starting; never inside the
start-up grace, counted from the latest start anyone can see (the service
manager's, vLLM's own ``process_start_time_seconds``, the watchdog's last
restart); a cooldown that grows with every restart in the window; a restart
budget past which it fails loudly for a human; ``unknown`` never restarts, and
one that persists fails for a human; a pause switch; a server that vLLM itself says is paused is never
restarted, and one paused for longer than ``paused_limit`` fails for a human (a trainer that held the
pause and died must not leave a server that never serves and never says so).

Before any restart, whatever the verdict and the method, what the restart acts on must be shown to serve the URL
the check judged: its process listens on the URL's port (or a container publishes it); for ``down``, a service that
does not run while nothing listens there, or one seen serving at this URL before; for a method that names no
process (``command``), the inventory's word (``service_evidence``). Without it, a human is asked and nothing is
restarted: a misspelt ``vllm_url`` or a ``service`` that names another server must never restart a busy server. A
restart that failed changed nothing: it gives no grace and no cooldown, and counts against the budget.

The ladder, under the same budget: a vLLM restart; then, when the same hang comes back within
``rehang_window`` of a restart, when the kernel's log shows an NVIDIA Xid or ``NV_ERR_NO_MEMORY`` since
vLLM was last seen healthy (the GPU is not healthy: a restart would start vLLM into it), or when the
memory was not released after vLLM stopped (``decide_escalation``), a host reboot (``reboot``, off by
default); then a human. Every step is recorded in the history (``last_step``, the budget's ``restarts``,
``reboots``) and has its own cooldown.

It fails closed: settings that are not finite numbers in range are refused
(``invalid_settings``); a history that cannot be read is a human's problem,
never a fresh budget (``load_history``); start and restart times in the future,
and kernel lines whose time cannot be true (in the future, before the boot),
are ignored, and the reason says so; a restart that failed keeps failing the
host until the server is healthy again or a human clears it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.modelops.vllm.plugins.module_utils._settings import DECIDE_DEFAULTS, DECIDE_LIMITS
from ansible_collections.modelops.vllm.plugins.module_utils._types import (
    FAIL, FAILED, NONE, REBOOT, RESTART, RESTARTABLE, SERVING, duration, in_range, json_object, parse_started_at,
    range_words)


# The guard rails, each with its default: the catalogue's (_settings.GUARD_RAILS).
DEFAULTS = DECIDE_DEFAULTS

# The kernel's lines that say the GPU is not healthy (the kinds of _host.KERNEL_PATTERNS).
GPU_KINDS = ('xid', 'nv_err_no_memory')
# Clock differences between the host and what it reports tolerated before a time counts as "in the future".
SKEW = 60.0


def invalid_settings(settings):
    """Messages for the settings that are not finite numbers in their range."""
    errors = []
    if not isinstance(settings.get('reboot', False), bool):
        errors.append('reboot must be true or false, got %r' % (settings.get('reboot'),))
    for key, limits in sorted(DECIDE_LIMITS.items()):
        value = settings.get(key, DEFAULTS[key])
        if in_range(value, limits) is None:
            errors.append('%s must be a number %s, got %r' % (key, range_words(limits), value))
    return errors


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def empty_history():
    return {'restarts': [], 'unknown_streak': 0, 'last_state': None, 'last_check': None}


def load_history(text):
    """The history from its file's text: (history, None), or (None, why) when it cannot be trusted.

    No file (None) is a fresh history. An empty file, text that is not JSON, or entries that
    are not what the watchdog writes are damage: the restart budget they held is unknown.
    """
    if text is None:
        return empty_history(), None
    data, why = json_object(text)
    if why:
        return None, why
    restarts = data.get('restarts', [])
    if not isinstance(restarts, list) or not all(_finite(t) and t >= 0 for t in restarts) or len(restarts) > 10000:
        return None, 'its restart times are not all finite numbers'
    streak = data.get('unknown_streak', 0)
    if not isinstance(streak, int) or isinstance(streak, bool) or streak < 0:
        return None, 'its unknown_streak is not a count'
    history = empty_history()
    history.update(data)
    history['restarts'] = sorted(float(t) for t in restarts)
    return history, None


def normalize_history(history):
    """A history made safe to compute with (entries that are not finite times left out)."""
    clean = empty_history()
    if not isinstance(history, dict):
        return clean
    restarts = history.get('restarts')
    if isinstance(restarts, list):
        clean['restarts'] = sorted(float(t) for t in restarts if _finite(t))
    streak = history.get('unknown_streak')
    if isinstance(streak, int) and not isinstance(streak, bool) and streak >= 0:
        clean['unknown_streak'] = streak
    for key, value in history.items():
        if key not in clean:
            clean[key] = value
    for key in ('last_state', 'last_check'):
        if history.get(key) is not None:
            clean[key] = history[key]
    return clean


def required_cooldown(restarts_in_window, base):
    """Cooldown after the last restart: base, doubled for every further restart
    in the window (negative feedback: each restart makes the next one later)."""
    if restarts_in_window <= 0:
        return 0
    return base * (2 ** min(restarts_in_window - 1, 30))


def _times(values, now, window):
    """The finite times of ``values`` inside the window, not in the future."""
    if not isinstance(values, list):
        return []
    return sorted(float(t) for t in values if _finite(t) and now - t < window and t <= now + SKEW)


def _seen_serving(history, url, now):
    """When the instance was last seen serving at ``url`` (its history's ``served``), or None."""
    served = (history or {}).get('served')
    if isinstance(served, dict) and url and served.get('url') == url and _finite(served.get('at')) \
            and served['at'] <= now + SKEW:
        return served['at']
    return None


def service_evidence(state, service, proof, history, url, now, prefix=''):
    """Whether what a restart acts on (the unit, the container, the command) is shown to serve ``url``: (True/False,
    words that name the URL, what a restart acts on and what each holds).

    ``proof`` (gathered by the gate on the host): ``unit`` (what a restart acts on, in words), ``exists`` False (the
    service manager has no such unit or container), ``listens`` True (a process of the service listens on the URL's
    address and port, or the container publishes it), False (it does not; ``listening_on`` where it does), None (it
    cannot be told: ``why``); ``process`` names the service's main process, ``endpoint`` the URL's address and port,
    ``held_by`` the processes of this host that listen there instead, ``can_prove`` whether the method names a process
    at all (``command`` does not), ``assumed`` whether the inventory says that the service is the URL's
    (the setting ``assume_url_is_service``; ``prefix`` + a setting's name is what the words call it, the watchdog role's
    variable). ``history['served']``: where and when the instance was last seen
    serving, which stands for a ``down`` server whose service runs and listens nowhere.

    What contradicts the URL (another port, another process on the URL's port, no such unit, a unit that does not run
    while the URL answers) is never outweighed, not by an old sighting nor by the inventory's word.
    """
    proof = proof if isinstance(proof, dict) else {}
    service = service if isinstance(service, dict) else {}
    if proof.get('given'):  # the caller gave the service's state (the gate's name option): nothing to show
        return True, ''
    unit = proof.get('unit') or 'the service'
    who = proof.get('process') or 'its main process'
    where = proof.get('endpoint') or 'the URL\'s port'
    held = proof.get('held_by')
    there = '; %s is held by %s' % (where, held) if held else ''
    listens, elsewhere = proof.get('listens'), [str(e) for e in proof.get('listening_on') or []][:3]
    published = proof.get('published') is not None
    if proof.get('exists') is False:
        return False, '%s does not exist (%s)%s' % (unit, service.get('status') or 'the service manager has none',
                                                    there)
    if listens is True:
        return True, ('%s publishes %s' % (unit, where) if published
                      else '%s: %s listens on %s' % (unit, who, where))
    seen = _seen_serving(history, url, now)
    never = ', and it was never seen serving at this URL' if state == 'down' else ''
    if listens is False:
        if elsewhere and published:
            return False, '%s publishes %s, not %s%s' % (unit, ', '.join(elsewhere), where, there)
        if elsewhere:
            return False, '%s: %s listens on %s, not on %s%s' % (unit, who, ', '.join(elsewhere), where, there)
        if held or state != 'down' or seen is None:
            return False, '%s: %s listens on no TCP port%s%s' % (unit, who, never, there)
        return True, 'it was seen serving at this URL %s' % _when(seen, now)
    if not proof.get('can_prove', True):
        if proof.get('assumed'):
            return True, ('the inventory says that %s restarts the server at %s (%sassume_url_is_service; '
                          'its method cannot show it)' % (unit, url or 'the URL', prefix))
        return False, ('%s names no process, so nothing can show that it restarts the server at %s%s; if it does, say so '
                       'with %sassume_url_is_service: true (the instance\'s assume_url_is_service)'
                       % (unit, url or 'the URL', there, prefix))
    if service.get('running') is False:
        if state != 'down':
            return False, '%s does not run, yet %s answers: something else serves it%s' % (
                unit, url or 'the URL', there)
        if held:
            return False, '%s does not run%s: that is the server at %s, not %s' % (unit, there, url or 'the URL', unit)
        return True, '%s does not run and nothing listens on %s: starting it stops no server' % (unit, where)
    if state == 'down' and seen is not None:
        return True, 'it was seen serving at this URL %s' % _when(seen, now)
    if proof.get('assumed'):
        return True, ('the inventory says that %s serves %s (%sassume_url_is_service; not shown here: %s)'
                      % (unit, url or 'the URL', prefix, proof.get('why') or '?'))
    why = proof.get('why') or 'no process of the service can be found to see what it listens on'
    if state == 'down':
        return False, '%s: it was never seen serving at this URL, and %s%s' % (unit, why, there)
    return False, '%s: %s%s' % (unit, why, there)


def url_evidence(proof, history, url, now, prefix=''):
    """``service_evidence`` of a ``down`` server whose service runs (the proof of issue 15): (True/False, words)."""
    return service_evidence('down', {'running': True}, proof, history, url, now, prefix=prefix)


def gpu_errors(kernel, since, now=None):
    """The kernel's lines since ``since`` that say the GPU is not healthy (an NVIDIA Xid, NV_ERR_NO_MEMORY).

    ``since`` is when vLLM was first seen healthy after its latest start (else its start plus the start-up
    grace): NV_ERR_NO_MEMORY lines also appear while a healthy vLLM starts on a DGX Spark (vllm#56824), so
    a line of the start-up is never a reason. Lines without a time are never counted, nor lines whose time cannot
    be true (``impossible_gpu_lines``: in the future of ``now``, or marked ``ignored`` by the reader, before the boot).
    """
    if since is None or not isinstance(kernel, list):
        return []
    counted = [line for line in _gpu_lines(kernel) if not _impossible(line, now)]
    return [line for line in counted if _finite(line.get('time')) and line['time'] >= since]


def _gpu_lines(kernel):
    return [line for line in kernel if isinstance(line, dict) and line.get('kind') in GPU_KINDS] \
        if isinstance(kernel, list) else []


def _impossible(line, now):
    """Why a kernel line's time cannot be true, or None."""
    if line.get('ignored'):
        return str(line['ignored'])[:200]
    if now is not None and _finite(line.get('time')) and line['time'] > now + SKEW:
        return 'its time is in the future'
    return None


def impossible_gpu_lines(kernel, now):
    """The GPU lines of the kernel's log whose time cannot be true: [(line, why)]."""
    out = []
    for line in _gpu_lines(kernel):
        why = _impossible(line, now)
        if why:
            out.append((line, why))
    return out


def healthy_since(history, started_at, grace):
    """When the current process was first seen healthy, else its start plus the grace, else None."""
    healthy = (history or {}).get('healthy')
    at = healthy.get('at') if isinstance(healthy, dict) and _finite(healthy.get('at')) else None
    if at is not None and (started_at is None or at >= started_at):
        return at
    if started_at is not None:
        return started_at + grace
    return None


def _escalate(why, hist, recent, now, conf, state, result):
    """The next step after a vLLM restart that cannot help: a host reboot (when on), else a human."""
    window = float(conf['restart_window'])
    if not conf.get('reboot'):
        return result(FAIL, '%s; the next step, a host reboot, is off (%sreboot): a human must look'
                      % (why, conf.get('setting_prefix') or ''))
    if len(recent) >= int(conf['max_restarts']):
        return result(FAIL, '%s; a host reboot would be next, but the restart budget is spent: %d step(s) in the '
                            'last %s; a human must look' % (why, len(recent), duration(window)))
    reboots = _times(hist.get('reboots'), now, window)
    cooldown = float(conf['reboot_cooldown'])
    if reboots and now - reboots[-1] < cooldown:
        return result(FAIL, '%s; the host was rebooted %s, within the reboot cooldown of %s: a human must look'
                      % (why, _when(reboots[-1], now), duration(cooldown)))
    hist['restarts'] = recent + [now]
    hist['reboots'] = reboots + [now]
    hist['last_step'] = {'step': REBOOT, 'at': now, 'state': state}
    return result(REBOOT, 'reboot the host: %s (step %d of at most %d in %s)'
                  % (why, len(hist['restarts']), int(conf['max_restarts']), duration(window)))


def decide(state, service, history, now, settings, paused=False, process_start=None, failed_restart=None, url=None,
           url_proof=None, kernel=None):
    """Decide what the watchdog does about one server.

    Before any restart, whatever the verdict and the method, what the restart acts on must be shown to serve the URL
    the check judged (``service_evidence``); unproven, a human is asked. A ``down`` seen ``down_limit`` runs in a row
    without a restart (a crash loop, a start that never ends) asks a human too, as ``unknown_limit`` unknowns do.

    state: the health verdict (``stuck``, ``down``, ...).
    service: {'running': True/False/None, 'started_at': a start time or None, 'status': str}.
    history: as kept on the host (see empty_history; read it with load_history).
    process_start: vLLM's own process_start_time_seconds, when the check saw it.
    failed_restart: {'at': epoch, 'error': str} when the last restart attempt failed.
    url: the instance's URL (as shown); where it is seen serving is remembered (``history['served']``).
    url_proof: what the host shows about the URL and what a restart acts on (see ``service_evidence``), and
    ``default_url``: the URL is only the role's fallback.
    kernel: the kernel's lines that matter ({'time', 'kind', 'line'}), or None when not read.
    Returns a dict: action (none/restart/reboot/fail), reason, history (updated; a restart or a reboot is recorded
    in it), numbers, ``notes`` (times that were ignored, ...), and ``evidence`` (True: a human is asked to look at
    the evidence, which the gate then keeps).
    """
    case = _Case(state, service, history, now, settings, paused, process_start, failed_restart, url, url_proof,
                 kernel)
    for guard in GUARDS:
        decided = guard(case)
        if decided is not None:
            return decided
    return _restart(case)


class _Case(object):
    """One decision: its inputs, the history's bookkeeping done once (times kept, streaks, when it was seen serving)
    and what the guards read (the restarts in the window, the latest start, the uptime, the cooldown)."""

    def __init__(self, state, service, history, now, settings, paused, process_start, failed_restart, url, url_proof,
                 kernel):
        conf = dict(DEFAULTS)
        conf.update(dict((k, v) for k, v in (settings or {}).items() if v is not None))
        self.state, self.now, self.conf, self.paused, self.url, self.kernel = state, now, conf, paused, url, kernel
        self.failed_restart = failed_restart
        self.service = service = service or {}
        self.hist = hist = normalize_history(history)
        self.notes = notes = []
        self.window = window = float(conf['restart_window'])
        self.grace = grace = float(conf['startup_grace'])
        future = [t for t in hist['restarts'] if t > now + SKEW]
        if future:
            notes.append('%d restart time(s) in the future were ignored (a clock that went back, or a forged history)'
                         % len(future))
        # Restarts count against the budget inside the restart window; the last one is kept while it is inside the
        # start-up grace too (a window shorter than the grace must not let a restart 100 s ago pass for none).
        kept = [t for t in hist['restarts'] if now - t < max(window, grace) and t <= now + SKEW]
        self.recent = [t for t in kept if now - t < window]
        hist['restarts'] = kept
        # A restart that failed (its command failed, or the same process still answered after it) changed nothing: it
        # gives no start-up grace and no cooldown, but it counts against the budget as every restart attempted does.
        self.failed_at = [t for t in _times(hist.get('failed_restarts'), now, max(window, grace)) if t in kept]
        hist['failed_restarts'] = self.failed_at
        worked = [t for t in kept if t not in self.failed_at]
        hist['last_check'] = now
        hist['last_state'] = state
        hist['unknown_streak'] = hist['unknown_streak'] + 1 if state == 'unknown' else 0
        self.starts = starts = {}
        for label, value in (('the service', parse_started_at(service.get('started_at'))),
                             ('vLLM', parse_started_at(process_start))):
            if value is None:
                continue
            if value > now + SKEW:
                notes.append('%s start time is in the future: ignored' % label)
            else:
                starts[label] = value
        self.started_at = started_at = max(starts.values()) if starts else None
        self.uptime = uptime = now - started_at if started_at is not None else None
        if state == 'down':
            # A start seen once more within the grace is one load going on, not a new failure; a new start every run
            # (a crash loop), a start past the grace, or none known counts.
            loading = started_at is not None and uptime < grace and hist.get('down_start') == started_at
            hist['down_streak'] = _count(hist.get('down_streak')) + (0 if loading else 1)
            hist['down_start'] = started_at
        else:
            hist.pop('down_streak', None)
            hist.pop('down_start', None)
        self.last_restart = worked[-1] if worked else None
        self.cooldown = required_cooldown(len(self.recent), float(conf['cooldown']))
        self.healthy_at = healthy_since(hist, started_at, grace)
        if state in SERVING:
            if url:
                hist['served'] = {'url': url, 'at': now}
            healthy = hist.get('healthy')
            known = isinstance(healthy, dict) and _finite(healthy.get('at'))
            if not (known and (started_at is None or healthy['at'] >= started_at)):
                hist['healthy'] = {'at': now, 'start': started_at}
        self.proof = proof = url_proof if isinstance(url_proof, dict) else {}
        if state == 'down' and proof.get('default_url'):
            notes.append('the URL %s is only the role\'s default fallback: no vllm_url, %s or instance url is set for '
                         'this host' % (url or '?', self.name('url')))
        self.out = {
            'history': hist,
            'restarts_in_window': len(self.recent),
            'budget_left': max(0, int(conf['max_restarts']) - len(self.recent)),
            'cooldown': self.cooldown,
            'uptime': uptime,
            'notes': notes,
            'gpu_errors': [],
            'evidence': False,
        }
        self._evidence = None

    def name(self, setting):
        """What the words call a setting: its name after ``setting_prefix`` (the watchdog role's variable)."""
        return (self.conf.get('setting_prefix') or '') + setting

    def evidence(self):
        """Whether what a restart acts on is shown to serve the URL, and the words (``service_evidence``), once."""
        if self._evidence is None:
            self._evidence = service_evidence(self.state, self.service, self.proof, self.hist, self.url, self.now,
                                              prefix=self.conf.get('setting_prefix') or '')
        return self._evidence

    def result(self, action, reason):
        hist, out, conf = self.hist, self.out, self.conf
        if action == NONE and self.state == 'down' and not self.paused \
                and hist.get('down_streak', 0) >= int(conf['down_limit']):
            action, out['evidence'] = FAIL, True
            reason = ('down %d runs in a row and not restarted (%s): it does not come back by itself (a crash loop, a '
                      'start that never ends, out of memory at start-up); a human must look at the service\'s log in '
                      'the evidence' % (hist['down_streak'], reason))
        if action == RESTART:
            hist.pop('down_streak', None)
        out['action'] = action
        out['reason'] = reason + (' (%s)' % '; '.join(self.notes) if self.notes else '')
        in_window = len([t for t in hist['restarts'] if self.now - t < self.window])
        out['restarts_in_window'] = in_window
        out['budget_left'] = max(0, int(conf['max_restarts']) - in_window)
        out['cooldown'] = required_cooldown(in_window, float(conf['cooldown']))
        return out


# -- the guards, in the order they are asked: each returns the decision, or None to let the next one ask ----------

def _after_a_failed_restart(c):
    """A restart that failed: cleared by a verdict that serves, else a human (never tried again)."""
    if not c.failed_restart:
        return None
    if c.state in SERVING:
        c.hist.pop('failed_restart', None)
        c.notes.append('the failed restart of %s is cleared: the server is %s again'
                       % (_when(c.failed_restart.get('at'), c.now), c.state))
        return None
    return c.result(FAIL, 'the restart attempted %s failed (%s) and the server is still %s: the watchdog does not try '
                          'again; a human must look, then clear it'
                    % (_when(c.failed_restart.get('at'), c.now), str(c.failed_restart.get('error') or '?')[:300],
                       c.state))


def _paused_on_purpose(c):
    """vLLM paused on purpose: never restarted; a human after ``paused_limit``."""
    if c.state != 'paused':
        c.hist.pop('paused_since', None)
        return None
    now = c.now
    since = c.hist.get('paused_since')
    if not _finite(since) or since > now + SKEW:
        since = now
    c.hist['paused_since'] = since
    held, limit = now - since, float(c.conf['paused_limit'])
    if held >= limit:
        return c.result(FAIL, 'paused on purpose for %s (seen paused on every run since %s), longer than the %s it may '
                              'stay paused: a trainer that held the pause may have died. Never restarted while paused; '
                              'a human should look (POST /resume resumes it)'
                        % (duration(held), _when(since, now), duration(limit)))
    return c.result(NONE, 'paused on purpose (vLLM says so): never restarted; a human is asked after %s paused '
                          '(%s so far)' % (duration(limit), duration(held)))


def _unknown(c):
    """Never restarted on unknown; a human after ``unknown_limit`` in a row."""
    if c.state != 'unknown':
        return None
    streak, limit = c.hist['unknown_streak'], int(c.conf['unknown_limit'])
    if streak >= limit:
        c.out['evidence'] = True
        return c.result(FAIL, 'the check could not judge the server %d runs in a row: it is not restarted on '
                              'unknown; a human should look at the evidence' % streak)
    return c.result(NONE, 'unknown is never a reason to restart (%d of %d runs in a row before asking a human)'
                    % (streak, limit))


def _frozen(c):
    if c.state != 'frozen':
        return None
    return c.result(NONE, 'frozen: no movement yet for as long as the freeze limit that proves a hang (a long '
                          'engine step looks the same): never restarted on frozen')


def _not_restartable(c):
    return c.result(NONE, '%s: nothing to do' % c.state) if c.state not in RESTARTABLE else None


def _watchdog_paused(c):
    if not c.paused:
        return None
    return c.result(NONE, 'the watchdog is paused: it would consider a restart of a %s server' % c.state)


def _starting(c):
    """Down while its service may be starting, or runs for an unknown time; stuck within the grace of its start. A
    down service that runs past the grace and is not shown to serve the URL is a human's."""
    uptime, grace, service = c.uptime, c.grace, c.service
    if c.state != 'down':
        if uptime is not None and uptime < grace:
            return c.result(NONE, 'stuck, but it started %s ago (by %s), within the start-up grace of %s: not '
                                  'restarted yet' % (duration(uptime), ' and '.join(sorted(c.starts)), duration(grace)))
        return None
    running = service.get('running')
    if running is None:
        return c.result(NONE, 'down, and the service manager cannot say whether it is starting (%s): not restarting'
                        % (service.get('status') or 'no status'))
    if running and uptime is None:
        return c.result(NONE, 'down, and the service runs for an unknown time (%s, no start time): it may still be '
                              'starting (loading weights), so it is not restarted; only one that ran past the start-up '
                              'grace of %s is' % (service.get('status') or 'running', duration(grace)))
    if running and uptime < grace:
        return c.result(NONE, 'down, but the service has been running for %s, within the start-up grace of %s: it is '
                              'starting (loading weights), not restarted' % (duration(uptime), duration(grace)))
    proved, shown = c.evidence()
    if running and not proved:
        return c.result(FAIL, 'down, and the service has been running for %s, but nothing shows that %s is this '
                              'service: %s. The URL may be wrong: not restarted; a human must look'
                        % (duration(uptime), c.url or 'the URL', shown))
    return None


def _restarted_lately(c):
    if c.last_restart is None or c.now - c.last_restart >= c.grace:
        return None
    return c.result(NONE, '%s, but it was restarted %s ago, within the start-up grace of %s'
                    % (c.state, duration(max(0.0, c.now - c.last_restart)), duration(c.grace)))


def _gpu_not_healthy(c):
    """The kernel's GPU errors since vLLM was last seen healthy: a vLLM restart would start vLLM into them."""
    impossible = impossible_gpu_lines(c.kernel, c.now)
    if impossible:
        c.notes.append('%d GPU line(s) of the kernel log were ignored: their time cannot be true (%s)'
                       % (len(impossible), impossible[-1][1]))
    errors = gpu_errors(c.kernel, c.healthy_at, c.now)
    if not errors:
        return None
    c.out['gpu_errors'] = errors[-5:]
    return _escalate('%s, and the kernel log shows %d GPU error(s) since vLLM was last seen healthy (the last: %s): '
                     'the GPU is not healthy, and a vLLM restart would start vLLM into it'
                     % (c.state, len(errors), str(errors[-1].get('line'))[:200]), c.hist, c.recent, c.now, c.conf,
                     c.state, c.result)


def _hung_again(c):
    """Stuck again within ``rehang_window`` of a restart or a reboot that worked: the same hang came back."""
    step = c.hist.get('last_step') if isinstance(c.hist.get('last_step'), dict) else {}
    rehang, now = float(c.conf['rehang_window']), c.now
    after_a_step = step.get('state') == 'stuck' and step.get('step') in (RESTART, REBOOT) and \
        step.get('outcome') != FAILED and _finite(step.get('at'))
    if not (c.state == 'stuck' and rehang > 0 and after_a_step and 0 <= now - step['at'] < rehang):
        return None
    if step['step'] == REBOOT:
        return c.result(FAIL, 'stuck again %s after a host reboot, within %s: neither a restart nor a reboot cleared '
                              'this hang; a human must look' % (duration(now - step['at']), duration(rehang)))
    return _escalate('stuck again %s after a vLLM restart, within %s (%s): the same hang came back, and another '
                     'restart would not clear it'
                     % (duration(now - step['at']), duration(rehang), c.name('rehang_window')), c.hist, c.recent, now, c.conf, c.state,
                     c.result)


def _budget_spent(c):
    if len(c.recent) < int(c.conf['max_restarts']):
        return None
    failed = [t for t in c.failed_at if t in c.recent]
    failed_words = ', %d of them failed' % len(failed) if failed else ''
    return c.result(FAIL, '%s, but the restart budget is spent: %d restart(s) attempted in the last %s%s (the budget '
                          'counts every restart attempted, a failed one too); the watchdog stops restarting and asks '
                          'a human' % (c.state, len(c.recent), duration(c.window), failed_words))


def _cooling_down(c):
    if c.last_restart is None or c.now - c.last_restart >= c.cooldown:
        return None
    return c.result(NONE, '%s, but in cooldown: the last restart was %s ago and the cooldown is now %s (it grows with '
                          'every restart)' % (c.state, duration(c.now - c.last_restart), duration(c.cooldown)))


def _not_shown_to_serve_the_url(c):
    proved, shown = c.evidence()
    if proved:
        return None
    return c.result(FAIL, '%s, but nothing shows that %s serves %s, the URL the check judged: %s. Not restarted (a '
                          'restart of it may not reach that server, and may stop another); a human must look: name '
                          'what serves the URL (%s, the instance\'s service), or say that it does (%s: true)'
                    % (c.state, c.proof.get('unit') or 'what a restart acts on', c.url or 'the URL', shown,
                       c.name('service'), c.name('assume_url_is_service')))


# The order is the rule: what never restarts first, then what waits (a start, a restart, the GPU, a hang that came
# back), then the budget, the cooldown and the proof that the restart reaches the server the check judged.
GUARDS = (
    _after_a_failed_restart,
    _paused_on_purpose,
    _unknown,
    _frozen,
    _not_restartable,
    _watchdog_paused,
    _starting,
    _restarted_lately,
    _gpu_not_healthy,
    _hung_again,
    _budget_spent,
    _cooling_down,
    _not_shown_to_serve_the_url,
)


def _restart(c):
    """Every guard let it through: restart, recorded in the history."""
    dummy, shown = c.evidence()
    service = c.service
    why = 'stuck' if c.state == 'stuck' else 'down and the service is %s' % (
        'not running (%s)' % (service.get('status') or 'stopped') if not service.get('running')
        else 'running for %s without answering, past the start-up grace' % duration(c.uptime))
    c.hist['restarts'] = c.recent + [c.now]
    c.hist['last_step'] = {'step': RESTART, 'at': c.now, 'state': c.state}
    return c.result(RESTART, 'restart: %s%s (restart %d of at most %d in %s, a failed one counted too)'
                    % (why, '; %s' % shown if shown else '', len(c.hist['restarts']), int(c.conf['max_restarts']),
                       duration(c.window)))


def decide_escalation(history, now, settings, why):
    """The step after a vLLM restart that was stopped half-way (its memory was not released after vLLM stopped,
    so vLLM is not started into it): a host reboot when it is on and the guard rails allow, else a human.
    Returns the same dict as ``decide``."""
    conf = dict(DEFAULTS)
    conf.update(dict((k, v) for k, v in (settings or {}).items() if v is not None))
    hist = normalize_history(history)
    window = float(conf['restart_window'])
    recent = _times(hist['restarts'], now, window)
    hist['restarts'] = recent
    state = hist.get('last_state') if isinstance(hist.get('last_state'), str) else 'stuck'
    out = {'history': hist, 'notes': [], 'uptime': None, 'gpu_errors': []}

    def result(action, reason):
        out.update(action=action, reason=reason, restarts_in_window=len(hist['restarts']),
                   budget_left=max(0, int(conf['max_restarts']) - len(hist['restarts'])),
                   cooldown=required_cooldown(len(hist['restarts']), float(conf['cooldown'])))
        return out

    return _escalate(why, hist, recent, now, conf, state, result)


def _when(at, now):
    if not _finite(at):
        return 'earlier'
    return '%s ago' % duration(max(0.0, now - at))
