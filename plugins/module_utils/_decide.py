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

A ``down`` server whose service runs needs proof that the URL is that service: its process listens on
the URL's port, or it was seen serving at this URL before (``url_evidence``); without it, a human is
asked and nothing is restarted (a misspelt ``vllm_url`` must never restart a busy server).

The ladder, under the same budget: a vLLM restart; then, when the same hang comes back within
``rehang_window`` of a restart, when the kernel's log shows an NVIDIA Xid or ``NV_ERR_NO_MEMORY`` since
vLLM was last seen healthy (the GPU is not healthy: a restart would start vLLM into it), or when the
memory was not released after vLLM stopped (``decide_escalation``), a host reboot (``reboot``, off by
default); then a human. Every step is recorded in the history (``last_step``, the budget's ``restarts``,
``reboots``) and has its own cooldown.

It fails closed: settings that are not finite numbers in range are refused
(``invalid_settings``); a history that cannot be read is a human's problem,
never a fresh budget (``load_history``); start and restart times in the future
are ignored, and the reason says so; a restart that failed keeps failing the
host until the server is healthy again or a human clears it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import datetime
import json
import math
import re

from ansible_collections.modelops.vllm.plugins.module_utils._types import duration, in_range, range_words

NONE = 'none'
RESTART = 'restart'
REBOOT = 'reboot'
FAIL = 'fail'

DEFAULTS = {
    'startup_grace': 900,
    'cooldown': 600,
    'max_restarts': 3,
    'restart_window': 86400,
    'unknown_limit': 3,
    'paused_limit': 3600,
    'reboot': False,
    'reboot_cooldown': 21600,
    'rehang_window': 3600,
}

# (setting, smallest, largest, whether the smallest itself is allowed)
LIMITS = {
    'startup_grace': (0, 7 * 86400, True),
    'cooldown': (0, 7 * 86400, True),
    'max_restarts': (0, 1000, True),
    'restart_window': (0, 366 * 86400, False),
    'unknown_limit': (1, 100000, True),
    'paused_limit': (0, 366 * 86400, False),
    'reboot_cooldown': (0, 366 * 86400, True),
    'rehang_window': (0, 366 * 86400, True),
}

# Verdicts of a server that serves: they clear a failed restart.
HEALTHY = ('idle', 'busy', 'restarted', 'sleeping', 'paused', 'up')
# The kernel's lines that say the GPU is not healthy (the kinds of _host.KERNEL_PATTERNS).
GPU_KINDS = ('xid', 'nv_err_no_memory')
# Clock differences between the host and what it reports tolerated before a time counts as "in the future".
SKEW = 60.0


def invalid_settings(settings):
    """Messages for the settings that are not finite numbers in their range."""
    errors = []
    if not isinstance(settings.get('reboot', False), bool):
        errors.append('reboot must be true or false, got %r' % (settings.get('reboot'),))
    for key, limits in sorted(LIMITS.items()):
        value = settings.get(key, DEFAULTS[key])
        if in_range(value, limits) is None:
            errors.append('%s must be a number %s, got %r' % (key, range_words(limits), value))
    return errors


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_started_at(value):
    """A start time as the service managers give it, in epoch seconds, or None.

    Accepts a number, systemd's ``@1796004614`` (``--timestamp=unix``), and
    Docker's RFC 3339 ``2026-11-30T02:10:52.123456789Z`` (or with an offset).
    Docker's ``0001-01-01T00:00:00Z`` (never started), empty values, impossible
    dates and numbers that are not finite are None.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if _finite(value) and value > 0 else None
    text = str(value).strip()[:64]
    if not text or text in ('n/a', '0'):
        return None
    if text.startswith('@'):
        text = text[1:]
    try:
        number = float(text)
        return number if _finite(number) and number > 0 else None
    except ValueError:
        pass
    match = re.match(r'(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d+)?\s*(Z|[+-]\d\d:?\d\d)?$', text)
    if not match:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if year < 1971:
        return None
    try:
        datetime.datetime(year, month, day, hour, minute, min(second, 59))  # an impossible date raises
    except ValueError:
        return None
    fraction = float(match.group(7) or 0)
    zone = match.group(8) or 'Z'
    offset = 0
    if zone != 'Z':
        sign = -1 if zone[0] == '-' else 1
        digits = zone[1:].replace(':', '')
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    epoch = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    return epoch + fraction - offset


def empty_history():
    return {'restarts': [], 'unknown_streak': 0, 'last_state': None, 'last_check': None}


def load_history(text):
    """The history from its file's text: (history, None), or (None, why) when it cannot be trusted.

    No file (None) is a fresh history. An empty file, text that is not JSON, or entries that
    are not what the watchdog writes are damage: the restart budget they held is unknown.
    """
    if text is None:
        return empty_history(), None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None, 'it is empty' if not text.strip() else 'it is not JSON'
    if not isinstance(data, dict):
        return None, 'it is not a JSON object'
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


def url_evidence(proof, history, url, now):
    """Whether something shows that ``url`` is the service that runs: (True/False, words).

    ``proof`` (gathered by the gate on the host): ``listens`` True (a process of the service listens on the URL's
    address and port), False (it does not; ``listening_on`` the addresses it does listen on), None (cannot be
    told: no main process, another network namespace); ``process`` names the process, ``endpoint`` the URL's
    address and port, ``why`` why it cannot be told. ``history['served']``: where and when the instance was last
    seen serving. A process that listens elsewhere outweighs an old sighting (the service moved: the URL is stale).
    """
    proof = proof if isinstance(proof, dict) else {}
    who = proof.get('process') or 'its main process'
    where = proof.get('endpoint') or 'the URL\'s port'
    served = (history or {}).get('served')
    seen = None
    if isinstance(served, dict) and url and served.get('url') == url and _finite(served.get('at')) \
            and served['at'] <= now + SKEW:
        seen = served['at']
    listens, elsewhere = proof.get('listens'), [str(e) for e in proof.get('listening_on') or []][:3]
    if listens is True:
        return True, '%s listens on %s' % (who, where)
    if listens is False and elsewhere:
        return False, '%s listens on %s, not on %s' % (who, ', '.join(elsewhere), where)
    if seen is not None:
        return True, 'it was seen serving at this URL %s' % _when(seen, now)
    if listens is False:
        return False, 'it was never seen serving at this URL, and %s listens on no TCP port' % who
    return False, 'it was never seen serving at this URL, and %s' % (
        proof.get('why') or 'no process of the service can be found to see what it listens on')


def gpu_errors(kernel, since):
    """The kernel's lines since ``since`` that say the GPU is not healthy (an NVIDIA Xid, NV_ERR_NO_MEMORY).

    ``since`` is when vLLM was first seen healthy after its latest start (else its start plus the start-up
    grace): NV_ERR_NO_MEMORY lines also appear while a healthy vLLM starts on a DGX Spark (vllm#56824), so
    a line of the start-up is never a reason. Lines without a time are never counted.
    """
    if since is None or not isinstance(kernel, list):
        return []
    gpu = [line for line in kernel if isinstance(line, dict) and line.get('kind') in GPU_KINDS]
    return [line for line in gpu if _finite(line.get('time')) and line['time'] >= since]


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
        return result(FAIL, '%s; the next step, a host reboot, is off (vllm_watchdog_reboot): a human must look'
                      % why)
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

    state: the health verdict (``stuck``, ``down``, ...).
    service: {'running': True/False/None, 'started_at': a start time or None, 'status': str}.
    history: as kept on the host (see empty_history; read it with load_history).
    process_start: vLLM's own process_start_time_seconds, when the check saw it.
    failed_restart: {'at': epoch, 'error': str} when the last restart attempt failed.
    url: the instance's URL (as shown); where it is seen serving is remembered (``history['served']``).
    url_proof: what the host shows about the URL and the service's process (see ``url_evidence``), and
    ``default_url``: the URL is only the role's fallback.
    kernel: the kernel's lines that matter ({'time', 'kind', 'line'}), or None when not read.
    Returns a dict: action (none/restart/reboot/fail), reason, history (updated; a restart or a reboot is recorded
    in it), numbers, and ``notes`` (times that were ignored, ...).
    """
    conf = dict(DEFAULTS)
    conf.update(dict((k, v) for k, v in (settings or {}).items() if v is not None))
    hist = normalize_history(history)
    service = service or {}
    notes = []
    window = float(conf['restart_window'])
    future = [t for t in hist['restarts'] if t > now + SKEW]
    if future:
        notes.append('%d restart time(s) in the future were ignored (a clock that went back, or a forged history)'
                     % len(future))
    # Restarts count against the budget inside the restart window; the last one is kept while it is inside the
    # start-up grace too (a window shorter than the grace must not let a restart 100 s ago pass for none).
    kept = [t for t in hist['restarts'] if now - t < max(window, float(conf['startup_grace'])) and t <= now + SKEW]
    recent = [t for t in kept if now - t < window]
    hist['restarts'] = kept
    hist['last_check'] = now
    hist['last_state'] = state
    hist['unknown_streak'] = hist['unknown_streak'] + 1 if state == 'unknown' else 0
    starts = {}
    for label, value in (('the service', parse_started_at(service.get('started_at'))),
                         ('vLLM', parse_started_at(process_start))):
        if value is None:
            continue
        if value > now + SKEW:
            notes.append('%s start time is in the future: ignored' % label)
        else:
            starts[label] = value
    started_at = max(starts.values()) if starts else None
    uptime = now - started_at if started_at is not None else None
    last_restart = kept[-1] if kept else None
    cooldown = required_cooldown(len(recent), float(conf['cooldown']))
    grace = float(conf['startup_grace'])
    healthy_at = healthy_since(hist, started_at, grace)
    if state in HEALTHY:
        if url:
            hist['served'] = {'url': url, 'at': now}
        healthy = hist.get('healthy')
        known = isinstance(healthy, dict) and _finite(healthy.get('at'))
        if not (known and (started_at is None or healthy['at'] >= started_at)):
            hist['healthy'] = {'at': now, 'start': started_at}
    proof = url_proof if isinstance(url_proof, dict) else {}
    if state == 'down' and proof.get('default_url'):
        notes.append('the URL %s is only the role\'s default fallback: no vllm_url, vllm_watchdog_url or instance '
                     'url is set for this host' % (url or '?'))
    out = {
        'history': hist,
        'restarts_in_window': len(recent),
        'budget_left': max(0, int(conf['max_restarts']) - len(recent)),
        'cooldown': cooldown,
        'uptime': uptime,
        'notes': notes,
        'gpu_errors': [],
    }

    def result(action, reason):
        out['action'] = action
        out['reason'] = reason + (' (%s)' % '; '.join(notes) if notes else '')
        in_window = len([t for t in hist['restarts'] if now - t < window])
        out['restarts_in_window'] = in_window
        out['budget_left'] = max(0, int(conf['max_restarts']) - in_window)
        out['cooldown'] = required_cooldown(in_window, float(conf['cooldown']))
        return out

    if failed_restart:
        if state in HEALTHY:
            hist.pop('failed_restart', None)
            notes.append('the failed restart of %s is cleared: the server is %s again'
                         % (_when(failed_restart.get('at'), now), state))
        else:
            return result(FAIL, 'the restart attempted %s failed (%s) and the server is still %s: the watchdog '
                                'does not try again; a human must look, then clear it'
                          % (_when(failed_restart.get('at'), now), str(failed_restart.get('error') or '?')[:300],
                             state))
    if state == 'paused':
        since = hist.get('paused_since')
        if not _finite(since) or since > now + SKEW:
            since = now
        hist['paused_since'] = since
        held, limit = now - since, float(conf['paused_limit'])
        if held >= limit:
            return result(FAIL, 'paused on purpose for %s (seen paused on every run since %s), longer than the %s '
                                'it may stay paused: a trainer that held the pause may have died. Never restarted '
                                'while paused; a human should look (POST /resume resumes it)'
                          % (duration(held), _when(since, now), duration(limit)))
        return result(NONE, 'paused on purpose (vLLM says so): never restarted; a human is asked after %s paused '
                            '(%s so far)' % (duration(limit), duration(held)))
    hist.pop('paused_since', None)
    if state == 'unknown':
        if hist['unknown_streak'] >= int(conf['unknown_limit']):
            return result(FAIL, 'the check could not judge the server %d runs in a row: it is not restarted on '
                                'unknown; a human should look at the evidence' % hist['unknown_streak'])
        return result(NONE, 'unknown is never a reason to restart (%d of %d runs in a row before asking a human)'
                      % (hist['unknown_streak'], int(conf['unknown_limit'])))
    if state == 'frozen':
        return result(NONE, 'frozen: no movement yet for as long as the freeze limit that proves a hang (a long '
                            'engine step looks the same): never restarted on frozen')
    if state not in ('stuck', 'down'):
        return result(NONE, '%s: nothing to do' % state)
    if paused:
        return result(NONE, 'the watchdog is paused: it would consider a restart of a %s server' % state)
    which = ' and '.join(sorted(starts)) if starts else ''
    proved = ''
    if state == 'down':
        running = service.get('running')
        if running is None:
            return result(NONE, 'down, and the service manager cannot say whether it is starting (%s): not restarting'
                          % (service.get('status') or 'no status'))
        if running and uptime is None:
            return result(NONE, 'down, and the service runs for an unknown time (%s, no start time): it may still be '
                                'starting (loading weights), so it is not restarted; only one that ran past the start-up '
                                'grace of %s is' % (service.get('status') or 'running', duration(grace)))
        if running and uptime < grace:
            return result(NONE, 'down, but the service has been running for %s, within the start-up grace of %s: it is '
                                'starting (loading weights), not restarted' % (duration(uptime), duration(grace)))
        if running:
            ok, words = url_evidence(proof, hist, url, now)
            if not ok:
                return result(FAIL, 'down, and the service has been running for %s, but nothing shows that %s is '
                                    'this service: %s. The URL may be wrong: not restarted; a human must look'
                              % (duration(uptime), url or 'the URL', words))
            proved = '; %s' % words
    elif uptime is not None and uptime < grace:
        return result(NONE, 'stuck, but it started %s ago (by %s), within the start-up grace of %s: not restarted yet'
                      % (duration(uptime), which, duration(grace)))
    if last_restart is not None and now - last_restart < grace:
        return result(NONE, '%s, but it was restarted %s ago, within the start-up grace of %s'
                      % (state, duration(max(0.0, now - last_restart)), duration(grace)))
    errors = gpu_errors(kernel, healthy_at)
    if errors:
        out['gpu_errors'] = errors[-5:]
        return _escalate('%s, and the kernel log shows %d GPU error(s) since vLLM was last seen healthy (the last: '
                         '%s): the GPU is not healthy, and a vLLM restart would start vLLM into it'
                         % (state, len(errors), str(errors[-1].get('line'))[:200]), hist, recent, now, conf, state,
                         result)
    step = hist.get('last_step') if isinstance(hist.get('last_step'), dict) else {}
    rehang = float(conf['rehang_window'])
    if state == 'stuck' and rehang > 0 and step.get('state') == 'stuck' and _finite(step.get('at')) \
            and 0 <= now - step['at'] < rehang and step.get('step') in (RESTART, REBOOT):
        if step['step'] == REBOOT:
            return result(FAIL, 'stuck again %s after a host reboot, within %s: neither a restart nor a reboot '
                                'cleared this hang; a human must look' % (duration(now - step['at']), duration(rehang)))
        return _escalate('stuck again %s after a vLLM restart, within %s (vllm_watchdog_rehang_window): the same '
                         'hang came back, and another restart would not clear it'
                         % (duration(now - step['at']), duration(rehang)), hist, recent, now, conf, state, result)
    if len(recent) >= int(conf['max_restarts']):
        return result(FAIL, '%s, but the restart budget is spent: %d restart(s) in the last %s; the watchdog stops '
                            'restarting and asks a human' % (state, len(recent), duration(window)))
    if last_restart is not None and now - last_restart < cooldown:
        return result(NONE, '%s, but in cooldown: the last restart was %s ago and the cooldown is now %s (it grows with '
                            'every restart)' % (state, duration(now - last_restart), duration(cooldown)))
    why = 'stuck' if state == 'stuck' else 'down and the service is %s' % (
        'not running (%s)' % (service.get('status') or 'stopped') if not service.get('running')
        else 'running for %s without answering, past the start-up grace%s' % (duration(uptime), proved))
    hist['restarts'] = recent + [now]
    hist['last_step'] = {'step': RESTART, 'at': now, 'state': state}
    return result(RESTART, 'restart: %s (restart %d of at most %d in %s)'
                  % (why, len(hist['restarts']), int(conf['max_restarts']), duration(window)))


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
