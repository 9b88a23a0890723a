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

NONE = 'none'
RESTART = 'restart'
FAIL = 'fail'

DEFAULTS = {
    'startup_grace': 900,
    'cooldown': 600,
    'max_restarts': 3,
    'restart_window': 86400,
    'unknown_limit': 3,
    'paused_limit': 3600,
}

# (setting, smallest, largest, whether the smallest itself is allowed)
LIMITS = {
    'startup_grace': (0, 7 * 86400, True),
    'cooldown': (0, 7 * 86400, True),
    'max_restarts': (0, 1000, True),
    'restart_window': (0, 366 * 86400, False),
    'unknown_limit': (1, 100000, True),
    'paused_limit': (0, 366 * 86400, False),
}

# Verdicts of a server that serves: they clear a failed restart.
HEALTHY = ('idle', 'busy', 'restarted', 'sleeping', 'paused', 'up')
# Clock differences between the host and what it reports tolerated before a time counts as "in the future".
SKEW = 60.0


def invalid_settings(settings):
    """Messages for the settings that are not finite numbers in their range."""
    errors = []
    for key, (low, high, closed) in sorted(LIMITS.items()):
        value = settings.get(key, DEFAULTS[key])
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and low <= value <= high and (closed or value > low)
        if not ok:
            errors.append('%s must be a number %s %s and at most %s, got %r'
                          % (key, 'at least' if closed else 'greater than', low, high, value))
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


def _fmt(seconds):
    seconds = int(round(seconds))
    if seconds >= 3600:
        return '%dh%02dm' % (seconds // 3600, (seconds % 3600) // 60)
    if seconds >= 60:
        return '%dm%02ds' % (seconds // 60, seconds % 60)
    return '%ds' % seconds


def required_cooldown(restarts_in_window, base):
    """Cooldown after the last restart: base, doubled for every further restart
    in the window (negative feedback: each restart makes the next one later)."""
    if restarts_in_window <= 0:
        return 0
    return base * (2 ** min(restarts_in_window - 1, 30))


def decide(state, service, history, now, settings, paused=False, process_start=None, failed_restart=None):
    """Decide what the watchdog does about one server.

    state: the health verdict (``stuck``, ``down``, ...).
    service: {'running': True/False/None, 'started_at': a start time or None, 'status': str}.
    history: as kept on the host (see empty_history; read it with load_history).
    process_start: vLLM's own process_start_time_seconds, when the check saw it.
    failed_restart: {'at': epoch, 'error': str} when the last restart attempt failed.
    Returns a dict: action (none/restart/fail), reason, history (updated; a restart is recorded
    in it when the action is restart), numbers, and ``notes`` (times that were ignored, ...).
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
    recent = [t for t in hist['restarts'] if now - t < window and t <= now + SKEW]
    hist['restarts'] = recent
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
    last_restart = recent[-1] if recent else None
    cooldown = required_cooldown(len(recent), float(conf['cooldown']))
    out = {
        'history': hist,
        'restarts_in_window': len(recent),
        'budget_left': max(0, int(conf['max_restarts']) - len(recent)),
        'cooldown': cooldown,
        'uptime': uptime,
        'notes': notes,
    }

    def result(action, reason):
        out['action'] = action
        out['reason'] = reason + (' (%s)' % '; '.join(notes) if notes else '')
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
                          % (_fmt(held), _when(since, now), _fmt(limit)))
        return result(NONE, 'paused on purpose (vLLM says so): never restarted; a human is asked after %s paused '
                            '(%s so far)' % (_fmt(limit), _fmt(held)))
    hist.pop('paused_since', None)
    if state == 'unknown':
        if hist['unknown_streak'] >= int(conf['unknown_limit']):
            return result(FAIL, 'the check could not judge the server %d runs in a row: it is not restarted on '
                                'unknown; a human should look at the evidence' % hist['unknown_streak'])
        return result(NONE, 'unknown is never a reason to restart (%d of %d runs in a row before asking a human)'
                      % (hist['unknown_streak'], int(conf['unknown_limit'])))
    if state not in ('stuck', 'down'):
        return result(NONE, '%s: nothing to do' % state)
    if paused:
        return result(NONE, 'the watchdog is paused: it would consider a restart of a %s server' % state)
    grace = float(conf['startup_grace'])
    which = ' and '.join(sorted(starts)) if starts else ''
    if state == 'down':
        running = service.get('running')
        if running is None:
            return result(NONE, 'down, and the service manager cannot say whether it is starting (%s): not restarting'
                          % (service.get('status') or 'no status'))
        if running and uptime is None:
            return result(NONE, 'down, and the service runs for an unknown time (%s, no start time): it may still be '
                                'starting (loading weights), so it is not restarted; only one that ran past the start-up '
                                'grace of %s is' % (service.get('status') or 'running', _fmt(grace)))
        if running and uptime < grace:
            return result(NONE, 'down, but the service has been running for %s, within the start-up grace of %s: it is '
                                'starting (loading weights), not restarted' % (_fmt(uptime), _fmt(grace)))
    elif uptime is not None and uptime < grace:
        return result(NONE, 'stuck, but it started %s ago (by %s), within the start-up grace of %s: not restarted yet'
                      % (_fmt(uptime), which, _fmt(grace)))
    if last_restart is not None and now - last_restart < grace:
        return result(NONE, '%s, but it was restarted %s ago, within the start-up grace of %s'
                      % (state, _fmt(max(0.0, now - last_restart)), _fmt(grace)))
    if len(recent) >= int(conf['max_restarts']):
        return result(FAIL, '%s, but the restart budget is spent: %d restart(s) in the last %s; the watchdog stops '
                            'restarting and asks a human' % (state, len(recent), _fmt(window)))
    if last_restart is not None and now - last_restart < cooldown:
        return result(NONE, '%s, but in cooldown: the last restart was %s ago and the cooldown is now %s (it grows with '
                            'every restart)' % (state, _fmt(now - last_restart), _fmt(cooldown)))
    why = 'stuck' if state == 'stuck' else 'down and the service is %s' % (
        'not running (%s)' % (service.get('status') or 'stopped') if not service.get('running')
        else 'running for %s without answering, past the start-up grace' % _fmt(uptime))
    hist['restarts'] = recent + [now]
    out['restarts_in_window'] = len(hist['restarts'])
    out['budget_left'] = max(0, int(conf['max_restarts']) - len(hist['restarts']))
    out['cooldown'] = required_cooldown(len(hist['restarts']), float(conf['cooldown']))
    return result(RESTART, 'restart: %s (restart %d of at most %d in %s)'
                  % (why, len(hist['restarts']), int(conf['max_restarts']), _fmt(window)))


def _when(at, now):
    if not _finite(at):
        return 'earlier'
    return '%s ago' % _fmt(max(0.0, now - at))
