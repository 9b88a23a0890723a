# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The values and errors every layer passes around: the bottom of module_utils.

Private to this collection. Standard library only, and nothing else from the collection: what only
checks or shows a URL, the HTTP client and the wait after a restart import these without loading the
metrics parser or the decision procedure (``_verdict``). tests/unit/plugins/module_utils/test_layers.py
keeps it so.

- ``CheckError``: the check cannot run as configured (a request that could not be sent).
- ``Fetched``: what one HTTP request gave, a status and body or one of ``FETCH_ERRORS``.
- ``STATES``: every verdict a check can give.
- ``clip`` and the bounds on strings that come from outside (``MAX_MESSAGE``, ``MAX_NAME``, ``MAX_IDS``).
- ``model_ids``: the model ids of a ``/v1/models`` answer.
- ``duration``: seconds as a sentence says them ('12m05s'); ``moment``: an epoch time as a sentence says
  it ('2026-12-02T20:31:05Z').
- ``in_range`` and ``range_words``: the one check of a number setting against its limits
  ``(smallest, largest, smallest allowed itself)``, and how its messages say the range.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import datetime
import json
import math
import re
import time

# Every verdict a check can give, and what it means to the rest of the collection, one row each: a new verdict is a
# row here (and its words in the modules' documentation and the rollout's list, which tests compare with it).
#   serves:       the server answers its users; a failed restart is cleared by it.
#   restart:      the watchdog may restart for it, under its guard rails (the service manager and the proof that
#                 the service serves the URL are asked only for these).
#   resets_stall: the process changed, or its engine is frozen on purpose: every stall streak ends.
VERDICT_TABLE = (
    # (verdict, serves, restart, resets_stall)
    ('idle', True, False, False),
    ('busy', True, False, False),
    ('frozen', False, False, False),
    ('stuck', False, True, False),
    ('restarted', True, False, True),
    ('starting', False, False, True),
    ('down', False, True, False),
    ('sleeping', True, False, True),
    ('paused', True, False, True),
    ('up', True, False, False),
    ('unknown', False, False, False),
)
STATES = tuple(row[0] for row in VERDICT_TABLE)
SERVING = tuple(row[0] for row in VERDICT_TABLE if row[1])
RESTARTABLE = tuple(row[0] for row in VERDICT_TABLE if row[2])
RESETS_STALL = tuple(row[0] for row in VERDICT_TABLE if row[3])

# What the watchdog decides for one server (_decide), and the outcome of a restart that changed nothing (its command
# failed, or the same process still answered after it).
NONE = 'none'
RESTART = 'restart'
REBOOT = 'reboot'
FAIL = 'fail'
FAILED = 'failed'

# Why a request got no HTTP answer.
FETCH_ERRORS = (
    'refused',      # nothing listens (connection refused, host unreachable, name does not resolve)
    'timeout',      # no answer at all in time (not even a status line)
    'incomplete',   # an answer started (status line and headers) but did not complete in time
    'deadline',     # the check's overall deadline left no time for it (see _verdict.check_deadline)
    'dropped',      # the connection was closed or reset before an answer
    'too_large',    # the body is over the size cap
    'tls',          # certificate or TLS handshake failure
    'redirect',     # a redirect to another server, or too many
    'invalid',      # the answer is not what the endpoint gives (set by the verdict code)
    'client',       # the HTTP client failed on the answer (not the server's silence)
)

# Lengths kept of strings that come from the server or from exceptions.
MAX_MESSAGE = 300
# Model ids kept of a /v1/models answer.
MAX_IDS = 16
# A model name longer than this is not used (the probe then asks /v1/models).
MAX_NAME = 256


def clip(text, limit=MAX_MESSAGE):
    """A string from outside, cut to a length that keeps results small."""
    text = '%s' % (text,)
    return text if len(text) <= limit else text[:limit] + '...'


class CheckError(Exception):
    """The check cannot run as configured (TLS failure, a bad URL, ...)."""


class Fetched(object):
    """What one HTTP request gave: a status and body, or an error."""

    __slots__ = ('status', 'text', 'error', 'message', 'seconds')

    def __init__(self, status=None, text=None, error=None, message=None, seconds=None):
        self.status = status
        self.text = text
        self.error = error
        self.message = message
        self.seconds = seconds

    def json(self):
        try:
            return json.loads(self.text or '')
        except (ValueError, RecursionError):
            # RecursionError: JSON nested deeper than the interpreter's stack (the body is capped at 1 MiB).
            return None

    def describe(self):
        if self.error:
            return '%s (%s)' % (self.error, clip(self.message)) if self.message else self.error
        return 'HTTP %s' % self.status


def model_ids(fetched):
    """The model ids of a /v1/models answer (at most MAX_IDS, each of a sane length), or None."""
    if fetched.error or fetched.status != 200:
        return None
    body = fetched.json()
    if not isinstance(body, dict) or not isinstance(body.get('data'), list):
        return None
    ids = [m.get('id') for m in body['data'][:MAX_IDS] if isinstance(m, dict) and isinstance(m.get('id'), str)]
    ids = [name for name in ids if 0 < len(name) <= MAX_NAME]
    return ids or None


def json_object(text):
    """A state file's text as a JSON object: (dict, None), or (None, why) for an empty file, text that is not JSON
    (deep nesting too) or JSON that is not an object. Never raises."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None, 'it is empty' if not text.strip() else 'it is not JSON'
    if not isinstance(data, dict):
        return None, 'it is not a JSON object'
    return data, None


def in_range(value, limits, strings=False):
    """``value`` as a finite number within ``limits`` = (smallest, largest, smallest allowed itself), else None.

    A boolean is never a number. With ``strings`` a number written as a string counts (what a Jinja template
    gives a filter); without, only int and float do (what a module's argument spec or a JSON file gives)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif strings and isinstance(value, str) and len(value) <= 64:
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    low, high, closed = limits
    if not math.isfinite(number) or number > high or number < low or (number == low and not closed):
        return None
    return number


def range_words(limits, at_least='at least'):
    """How a message says the range of ``limits``: 'at least 0 and at most 60', 'greater than 0 and at most 1'."""
    low, high, closed = limits
    return '%s %s and at most %s' % (at_least if closed else 'greater than', low, high)


def range_problems(values, limits, name='%s'):
    """A sentence for each of ``values`` ({setting: value}) that is not a number within its range in ``limits``
    ({setting: range}); ``name % setting`` is what the sentence calls the setting (a role says its variable). Settings
    without a range are not looked at; numbers written as strings count (what a template gives)."""
    return ['%s must be a number %s, got %r' % (name % key, range_words(limits[key], at_least='from'), values[key])
            for key in sorted(values) if key in limits and in_range(values[key], limits[key], strings=True) is None]


def duration(seconds):
    """Seconds as a person reads them in a sentence: '45s', '12m05s', '3h20m'."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return '%dh%02dm' % (seconds // 3600, (seconds % 3600) // 60)
    if seconds >= 60:
        return '%dm%02ds' % (seconds // 60, seconds % 60)
    return '%ds' % seconds


def moment(epoch):
    """An epoch time as a sentence says it, in UTC ('2026-12-02T20:31:05Z'); '?' for one that is no time."""
    try:
        return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(epoch))
    except (TypeError, ValueError, OverflowError, OSError):
        return '?'


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
        return float(value) if math.isfinite(value) and value > 0 else None
    text = str(value).strip()[:64]
    if not text or text in ('n/a', '0'):
        return None
    if text.startswith('@'):
        text = text[1:]
    try:
        number = float(text)
        return number if math.isfinite(number) and number > 0 else None
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
