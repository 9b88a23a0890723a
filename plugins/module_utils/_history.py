# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The watchdog's history on a host, read back for a human: what each run found, what it did, what came of it.

Private to this collection. The watchdog keeps, per instance, in its state directory (``_statedir.paths``): a
verdict line per run (``<name>.verdicts.jsonl``, rotated to ``.1`` and ``.2``), the restart history
(``<name>.json``), the record of a failed restart (``<name>.restart-failed``) and the evidence of each restart
(``evidence/<name>-<UTC time>.json``). ``read_instance`` reads them, bounded (the end of each file, at most
``max_bytes``; a file that is a link or a FIFO is not read, and said); the rest is pure:

* ``since_epoch``: ``24h``, ``90m``, ``2d``, ``1w``, ``1h30m``, a date or a time (UTC unless it says its
  offset), or ``all``;
* ``events``: the runs in the window, consecutive runs with the same verdict and action as one event, every
  restart and host reboot an event of its own with its outcome (what the next run found, or the record of its
  failure) and its evidence file;
* ``lines``: one line per event, and ``summary``: one line per instance.

Everything read from the files is text from outside: one line, control characters blanked, clipped.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import json
import math
import os
import re
import time

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir

SHOW = ('changes', 'actions', 'all')
# What is read of each verdict file (the end of it), by default and at most; the gate rotates them at 1 MiB.
MAX_BYTES = 4 * 1024 * 1024
MAX_BYTES_LIMIT = 64 * 1024 * 1024
# Runs kept per instance (a run every 5 minutes for 70 days), lines returned per instance, instances per host.
MAX_RECORDS = 20000
MAX_LINES = 500
MAX_INSTANCES = 200
MAX_EVIDENCE = 5000
# Characters of a reason or a decision in a line.
TEXT = 300
# An evidence file belongs to the restart recorded at most this long before its name's time.
EVIDENCE_AFTER = 600

ACTION_WORDS = {'none': 'no action', 'restart': 'restart', 'reboot': 'host reboot', 'fail': 'NEEDS A HUMAN'}
STEPS = ('restart', 'reboot')

_UNITS = {'s': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 7 * 86400}
_DURATION = re.compile(r'^(?:\d+(?:\.\d+)?[smhdw])+$')
_PART = re.compile(r'(\d+(?:\.\d+)?)([smhdw])')
_DATE = re.compile(r'^(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d)(?:\.\d+)?)?)?\s*(Z|[+-]\d\d:?\d\d)?$')
_STAMP = re.compile(r'^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z$')
_EVIDENCE = re.compile(r'^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z\.json$')
_VERDICTS = re.compile(r'^(.+)\.verdicts\.jsonl(?:\.[12])?$')
_CONTROL = re.compile(r'[\x00-\x1f\x7f-\x9f\u2028\u2029]')


def one_line(value, limit=TEXT):
    """Text from a file as one line of at most ``limit`` characters (control characters blanked)."""
    text = ' '.join(_CONTROL.sub(' ', value if isinstance(value, str) else json.dumps(value, default=str)).split())
    return text if len(text) <= limit else text[:limit] + '...'


def _epoch(parts, zone=None):
    year, month, day, hour, minute, second = (int(p or 0) for p in parts)
    in_range = 1971 <= year <= 9999 and 1 <= month <= 12 and 1 <= day <= 31
    if not in_range or hour > 23 or minute > 59 or second > 60:
        return None
    try:
        epoch = calendar.timegm((year, month, day, hour, minute, min(second, 59), 0, 0, 0))
        time.strptime('%04d-%02d-%02d' % (year, month, day), '%Y-%m-%d')  # an impossible date raises
    except (ValueError, OverflowError):
        return None
    if zone and zone != 'Z':
        digits = zone[1:].replace(':', '')
        offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
        epoch -= offset if zone[0] == '+' else -offset
    return float(epoch)


def since_epoch(value, now):
    """The start of the window: ``now`` minus a duration (``24h``, ``90m``, ``2d``, ``1w``, ``1h30m``), a date or a
    time (``2026-12-01``, ``2026-12-01T03:00``, ``2026-12-01 03:00:00+01:00``; UTC unless an offset is given), or
    None for ``all`` (everything kept). ValueError with the forms when it is none of them."""
    text = str(value if value is not None else '').strip()[:64]
    lowered = text.lower()
    if lowered in ('all', 'ever', 'forever'):
        return None
    if _DURATION.match(lowered):
        seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(lowered))
        return now - seconds
    match = _DATE.match(text)
    if match:
        found = _epoch(match.groups()[:6], match.group(7))
        if found is not None:
            return found
    raise ValueError('since must be a duration (24h, 90m, 2d, 1w, 1h30m), a date or a time in UTC '
                     '(2026-12-01, 2026-12-01T03:00, or with an offset: 2026-12-01T03:00+01:00) or all; got %r'
                     % one_line(text, 64))


def stamp_epoch(text):
    """A verdict line's time (``2026-12-01T11:42:31Z``, as the gate writes it) in epoch seconds, or None."""
    match = _STAMP.match(text) if isinstance(text, str) else None
    return _epoch(match.groups()) if match else None


def iso(epoch):
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(epoch))


def instance_names(filenames):
    """The instances that have a verdict history, from a directory's file names: (names, how many were left out).
    Only plain file names (what the watchdog writes), sorted, at most MAX_INSTANCES."""
    names = set()
    for filename in filenames:
        match = _VERDICTS.match(filename) if isinstance(filename, str) else None
        if match and statedir.file_name(match.group(1)) == match.group(1):
            names.add(match.group(1))
    ordered = sorted(names)
    return ordered[:MAX_INSTANCES], max(0, len(ordered) - MAX_INSTANCES)


def evidence_times(filenames, name):
    """[(epoch, file name)] of an instance's evidence files (``<name>-<UTC time>.json``), oldest first."""
    found = []
    prefix = name + '-'
    for filename in filenames:
        if isinstance(filename, str) and filename.startswith(prefix):
            match = _EVIDENCE.match(filename[len(prefix):])
            at = _epoch(match.groups()) if match else None
            if at is not None:
                found.append((at, filename))
    return sorted(found)


def _listing(path, limit):
    """The first ``limit`` names of a directory (sorted), [] when it is missing; StateError when it cannot be read."""
    try:
        with os.scandir(path) as entries:
            names = []
            for entry in entries:
                names.append(entry.name)
                if len(names) >= limit * 4:
                    break
    except OSError as exc:
        if not os.path.lexists(path):
            return []
        raise statedir.StateError('%s cannot be read: %s' % (path, exc.strerror))
    return sorted(names)[:limit]


def list_instances(state_dir):
    """The instances with a verdict history in ``state_dir``: (names, left out, why it cannot be read or None)."""
    try:
        return instance_names(_listing(state_dir, MAX_INSTANCES * 4)) + (None,)
    except statedir.StateError as exc:
        return [], 0, str(exc)


def _json_file(path):
    """A small JSON object the watchdog writes (the restart history, the failed restart): the dict, or None; and why
    it could not be read (None when it is fine or missing)."""
    try:
        text = statedir.read_text(path)
    except statedir.StateError as exc:
        return None, str(exc)
    if text is None:
        return None, None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None, '%s is not JSON' % path
    return (data, None) if isinstance(data, dict) else (None, '%s is not a JSON object' % path)


def read_instance(state_dir, name, max_bytes=MAX_BYTES):
    """What the state directory keeps about one instance, read safely and bounded.

    Returns ``records`` (the verdict lines, oldest first: ``.2``, ``.1``, then the current file; the end of each, at
    most ``max_bytes``, and at most MAX_RECORDS), ``damaged`` (the lines that are not a JSON object, named),
    ``cut`` (the files of which only the end was read), ``problems`` (files that could not be read, and why),
    ``history`` (``<name>.json``), ``failed`` (``<name>.restart-failed``, with ``path``) and ``evidence``
    ([(epoch, path)] of its evidence files)."""
    paths = statedir.paths(state_dir, name)
    out = {'records': [], 'damaged': [], 'cut': [], 'problems': [], 'history': None, 'failed': None, 'evidence': [],
           'max_bytes': max_bytes}
    for path in ('%s.2' % paths['verdicts'], '%s.1' % paths['verdicts'], paths['verdicts']):
        try:
            text, cut = statedir.read_tail(path, max_bytes)
        except statedir.StateError as exc:
            out['problems'].append(str(exc))
            continue
        if text is None:
            continue
        lines = text.splitlines()
        if cut:
            out['cut'].append(path)
        records, damaged = statedir.json_lines(lines[-MAX_RECORDS:])
        out['records'].extend(records)
        out['damaged'].extend('%s %s' % (path, problem) for problem in damaged[:5])
        if len(damaged) > 5:
            out['damaged'].append('%s: %d more line(s) that are not a JSON object' % (path, len(damaged) - 5))
    out['records'] = out['records'][-MAX_RECORDS:]
    for key, path in (('history', paths['history']), ('failed', paths['failed'])):
        data, problem = _json_file(path)
        if problem:
            out['problems'].append(problem)
        if data is not None:
            out[key] = dict(data, path=path) if key == 'failed' else data
    try:
        if os.path.islink(paths['evidence']):
            raise statedir.StateError('%s is a symbolic link: not followed' % paths['evidence'])
        names = _listing(paths['evidence'], MAX_EVIDENCE)
    except statedir.StateError as exc:
        out['problems'].append(str(exc))
        names = []
    out['evidence'] = [(at, os.path.join(paths['evidence'], filename)) for at, filename in evidence_times(names, name)]
    return out


def dated(records):
    """[(epoch, record)] of the records with a time the gate writes, in their order; and how many had none."""
    out, undated = [], 0
    for record in records:
        at = stamp_epoch(record.get('time')) if isinstance(record, dict) else None
        if at is None:
            undated += 1
        else:
            out.append((at, record))
    return out, undated


def _text(record, key, limit=TEXT):
    value = record.get(key)
    return one_line(value, limit) if value not in (None, '') else ''


def _state(record):
    return _text(record, 'state', 40) or 'unknown'


def _action(record):
    action = _text(record, 'action', 40) or 'none'
    return action


def _failed_at(failed):
    at = (failed or {}).get('at')
    return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at) else None


def outcome(later, failed=None, at=None):
    """What came of a restart or a host reboot: from the first record after it (``later``), else the record of a
    failed restart written after it, else that no run followed."""
    if later:
        when, record = later[0]
        if record.get('step') and record.get('outcome'):
            # What the role found after the restart (watchdog_gate's record_outcome): now idle, or failed and why.
            return one_line(record['outcome'])[:300]
        if record.get('step'):
            # The restart stopped half-way (the memory did not come back); the gate took the next step at once.
            return 'stopped: %s; then %s (%s)' % (_text(record, 'reason'), ACTION_WORDS.get(_action(record),
                                                                                            _action(record)),
                                                  _text(record, 'decision'))
        said = 'next run %s: %s' % (iso(when), _state(record))
        if _action(record) != 'none':
            said += ', %s (%s)' % (ACTION_WORDS.get(_action(record), _action(record)), _text(record, 'decision'))
        return said
    failed_at = _failed_at(failed)
    if failed_at is not None and at is not None and failed_at >= at - 5:
        return 'FAILED: %s (%s is kept: the host fails on every run until the server serves again or a human ' \
               'removes it)' % (one_line(failed.get('error') or '?'), failed.get('path'))
    return 'no run since'


def _evidence_for(evidence, at):
    for when, path in evidence:
        if at - 5 <= when <= at + EVIDENCE_AFTER:
            return path
    return None


def events(records, since, show='changes', evidence=(), failed=None):
    """The events of the window (records at or after ``since``; None: all), oldest first.

    ``records``: [(epoch, record)] (``dated``), all of them, so that the outcome of the window's last restart can be
    read from the run after it. ``show``: ``changes`` (consecutive runs with the same verdict and action are one
    event), ``actions`` (only restarts, host reboots, the steps after them and the runs that asked a human) or
    ``all`` (every run). Each event: ``kind`` (``runs``, ``restart``, ``reboot``, ``step``), ``time``, ``until`` and
    ``runs`` (for a group of runs), ``state``, ``action``, ``reason``, ``decision``, ``outcome``, ``evidence``."""
    if show not in SHOW:
        raise ValueError('show must be one of %s, got %r' % (', '.join(SHOW), show))
    out = []
    for index, (at, record) in enumerate(records):
        if since is not None and at < since:
            continue
        if record.get('step') and record.get('outcome') and index > 0 and _action(records[index - 1][1]) in STEPS:
            continue  # the outcome of the restart just before: said on that restart's line
        action, state = _action(record), _state(record)
        event = {'time': iso(at), 'until': None, 'runs': 1, 'state': state, 'action': action,
                 'reason': _text(record, 'reason'), 'decision': _text(record, 'decision'), 'outcome': None,
                 'evidence': None}
        if record.get('step'):
            event['kind'] = 'step'
            event['runs'] = 0
        elif action in STEPS:
            event['kind'] = action
            event['outcome'] = outcome(records[index + 1:index + 2], failed, at)
            event['evidence'] = _evidence_for(evidence, at)
        else:
            event['kind'] = 'runs'
            if action == 'fail':
                event['evidence'] = _evidence_for(evidence, at)
        if show == 'actions' and event['kind'] == 'runs' and action != 'fail':
            continue
        last = out[-1] if out else None
        same_run = last is not None and (last['state'], last['action']) == (state, action)
        if show != 'all' and same_run and event['kind'] == 'runs' and last['kind'] == 'runs':
            last['runs'] += 1
            last['until'] = event['time']
            # The latest words: a group says what its last run found.
            last['reason'], last['decision'] = event['reason'], event['decision']
            last['evidence'] = event['evidence'] or last['evidence']
            continue
        out.append(event)
    return out


def event_line(who, event):
    """One event as one line."""
    if event['kind'] == 'step':
        head = '%s: %s %s - %s' % (who, event['time'], event['state'], event['reason'])
    else:
        head = '%s: %s %s - %s' % (who, event['time'], event['state'], event['reason'] or '(no reason recorded)')
    if event['action'] != 'none':
        head += '; watchdog: %s (%s)' % (ACTION_WORDS.get(event['action'], event['action']), event['decision'])
    if event.get('outcome'):
        head += ' -> %s' % event['outcome']
    if event['runs'] > 1:
        head += ' [%d runs, the last %s]' % (event['runs'], event['until'])
    if event.get('evidence'):
        head += ' [evidence %s]' % event['evidence']
    return head


def counts(records, since):
    """Runs in the window by verdict, and the restarts, host reboots and runs that asked a human."""
    states, numbers = {}, {'runs': 0, 'restart': 0, 'reboot': 0, 'fail': 0}
    for at, record in records:
        if (since is not None and at < since) or record.get('step'):
            continue
        numbers['runs'] += 1
        state = _state(record)
        states[state] = states.get(state, 0) + 1
        action = _action(record)
        if action in numbers:
            numbers[action] += 1
    return states, numbers


def summary(who, records, since, failed=None):
    """One line for the instance: its runs in the window, by verdict, its restarts and the last run."""
    states, numbers = counts(records, since)
    window = 'since %s' % iso(since) if since is not None else 'in all its history'
    if not numbers['runs']:
        line = '%s: no run %s' % (who, window)
    else:
        said = ', '.join('%d %s' % (states[s], s) for s in sorted(states, key=lambda s: (-states[s], s)))
        line = '%s: %d run(s) %s: %s; %d restart(s), %d host reboot(s), %d run(s) that asked a human' % (
            who, numbers['runs'], window, said, numbers['restart'], numbers['reboot'], numbers['fail'])
    runs = [item for item in records if not item[1].get('step')]
    if runs:
        at, record = runs[-1]
        action = _action(record)
        line += '; the last run %s: %s, %s' % (iso(at), _state(record), ACTION_WORDS.get(action, action))
    if failed is not None:
        line += '; a failed restart is recorded in %s (%s): the host fails on every run until the server serves ' \
                'again or a human removes it' % (failed.get('path'), one_line(failed.get('error') or '?', 200))
    return line


def report(who, found, since, show='changes', max_lines=MAX_LINES):
    """What the history playbook says about one instance: ``lines`` (its events, then the notes on what could not
    be read, then its summary), ``events``, ``counts``, ``restarts`` (the number in the window), ``last``."""
    records, undated = dated(found['records'])
    listed = events(records, since, show, found['evidence'], found['failed'])
    lines = [event_line(who, event) for event in listed]
    left = max(0, len(lines) - max_lines)
    if left:
        lines = ['%s: %d earlier line(s) of the window left out (a later since shows fewer)' % (who, left)] \
            + lines[-max_lines:]
    notes = []
    if found['damaged'] or undated:
        notes.append('%s: %d line(s) of the verdict history skipped (not a JSON object, or no time): %s' % (
            who, len(found['damaged']) + undated, one_line('; '.join(found['damaged'][:2]) or 'no time', 300)))
    for problem in found['problems']:
        notes.append('%s: not read: %s' % (who, one_line(problem)))
    if found['cut'] and records and (since is None or records[0][0] > since):
        notes.append('%s: the history before %s was not read (only the end of %s, %d bytes each, is read)' % (
            who, iso(records[0][0]), ', '.join(found['cut']), found.get('max_bytes', MAX_BYTES)))
    states, numbers = counts(records, since)
    last = None
    runs = [item for item in records if not item[1].get('step')]
    if runs:
        at, record = runs[-1]
        last = {'time': iso(at), 'state': _state(record), 'action': _action(record)}
    return {'lines': lines + notes + [summary(who, records, since, found['failed'])],
            'events': listed[-max_lines:], 'counts': states, 'runs': numbers['runs'],
            'restarts': numbers['restart'], 'reboots': numbers['reboot'], 'needs_human': numbers['fail'],
            'last': last, 'failed_restart': found['failed'] is not None}
