# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The one place that decides whether the watchdog restarts a vLLM server.

Private to this collection. A pure function: the verdict of the health check,
what the service manager says, the restart history kept on the host, the
clock and the settings in; an action and the new history out.

The guard rails (design.md): restart only on a confirmed ``stuck``, or a
``down`` that the service manager confirms is not starting; never inside the
start-up grace; a cooldown that grows with every restart in the window; a
restart budget past which it fails loudly for a human; ``unknown`` never
restarts, and one that persists fails for a human; a pause switch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
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
}


def parse_started_at(value):
    """A start time as the service managers give it, in epoch seconds, or None.

    Accepts a number, systemd's ``@1796004614`` (``--timestamp=unix``), and
    Docker's RFC 3339 ``2026-11-30T02:10:52.123456789Z`` (or with an offset).
    Docker's ``0001-01-01T00:00:00Z`` (never started) and empty values are None.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    text = str(value).strip()
    if not text or text in ('n/a', '0'):
        return None
    if text.startswith('@'):
        text = text[1:]
    try:
        number = float(text)
        return number if number > 0 else None
    except ValueError:
        pass
    match = re.match(r'(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d+)?\s*(Z|[+-]\d\d:?\d\d)?$', text)
    if not match:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    if year < 1971:
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


def normalize_history(history):
    """A history read from the host, made safe to use (a damaged file is a fresh one)."""
    clean = empty_history()
    if not isinstance(history, dict):
        return clean
    restarts = history.get('restarts')
    if isinstance(restarts, list):
        clean['restarts'] = sorted(float(t) for t in restarts if isinstance(t, (int, float)))
    streak = history.get('unknown_streak')
    if isinstance(streak, int) and streak >= 0:
        clean['unknown_streak'] = streak
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
    return base * (2 ** (restarts_in_window - 1))


def decide(state, service, history, now, settings, paused=False):
    """Decide what the watchdog does about one server.

    state: the health verdict (``stuck``, ``down``, ...).
    service: {'running': True/False/None, 'started_at': epoch seconds or None, 'status': str}.
    history: as kept on the host (see empty_history).
    Returns a dict: action (none/restart/fail), reason, history (updated; a
    restart is recorded in it when the action is restart), and numbers.
    """
    conf = dict(DEFAULTS)
    conf.update(dict((k, v) for k, v in (settings or {}).items() if v is not None))
    hist = normalize_history(history)
    service = service or {}
    window = float(conf['restart_window'])
    recent = [t for t in hist['restarts'] if now - t < window]
    hist['restarts'] = recent
    hist['last_check'] = now
    hist['last_state'] = state
    hist['unknown_streak'] = hist['unknown_streak'] + 1 if state == 'unknown' else 0
    started_at = parse_started_at(service.get('started_at'))
    uptime = now - started_at if started_at is not None else None
    last_restart = recent[-1] if recent else None
    cooldown = required_cooldown(len(recent), float(conf['cooldown']))
    out = {
        'history': hist,
        'restarts_in_window': len(recent),
        'budget_left': max(0, int(conf['max_restarts']) - len(recent)),
        'cooldown': cooldown,
        'uptime': uptime,
    }

    def result(action, reason):
        out['action'] = action
        out['reason'] = reason
        return out

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
    if state == 'down':
        running = service.get('running')
        if running is None:
            return result(NONE, 'down, and the service manager cannot say whether it is starting (%s): not restarting'
                          % (service.get('status') or 'no status'))
        if running and (uptime is None or uptime < grace):
            since = 'for %s' % _fmt(uptime) if uptime is not None else 'for an unknown time'
            return result(NONE, 'down, but the service has been running %s, within the start-up grace of %s: it is '
                                'starting (loading weights), not restarted' % (since, _fmt(grace)))
    elif uptime is not None and uptime < grace:
        return result(NONE, 'stuck, but the service started %s ago, within the start-up grace of %s: not restarted yet'
                      % (_fmt(uptime), _fmt(grace)))
    if last_restart is not None and now - last_restart < grace:
        return result(NONE, '%s, but it was restarted %s ago, within the start-up grace of %s'
                      % (state, _fmt(now - last_restart), _fmt(grace)))
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
