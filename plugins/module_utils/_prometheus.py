# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A small, strict parser of the Prometheus text exposition format (0.0.4).

Private to this collection. It needs nothing beyond the standard library, so
the managed host does not need ``prometheus_client``.

``parse(text)`` returns a list of ``(name, labels, value)`` tuples, where
``labels`` is a tuple of ``(label, value)`` pairs in the order they were
written. ``wanted`` can restrict the result to some sample names (the others
are still checked for a valid name and value, but their labels are not
unpacked, which is where the time goes).

Anything that is not valid exposition raises ``ExpositionError`` with the line
number and a short reason: an HTML error page, a truncated body, a bad label,
a bad value, the same series twice, a line longer than ``MAX_LINE``
characters (no vLLM line comes near it; the cap bounds the work one line can
cost), or more than ``MAX_LINES`` lines (the cap bounds the work of a body of
tiny lines: 16 MB of ``a 1`` is four million lines, half a minute of parsing).

Cost is linear in the text and memory is bounded by the samples kept: lines
are visited one at a time (``iter_samples``), and the label pattern is written
so that the regular expression engine keeps no backtracking state per
character (``"[^"\\]*(?:\\.[^"\\]*)*"``, not ``"(?:[^"\\]|\\.)*"``, which
costs about 160 bytes per character of a label value).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# A metric name, then optionally {labels}, then a value, then optionally a timestamp.
_NAME = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
_NAME_RE = re.compile(_NAME + r'\Z')
_ESCAPE_RE = re.compile(r'\\(.)', re.S)
_ESCAPES = {'\\': '\\', '"': '"', 'n': '\n'}
# The longest line of a real vLLM 0.32 exposition is about 1,400 characters.
MAX_LINE = 65536
# Real vLLM 0.32 writes about 630 lines (about 85 bytes each) per engine: a body of real lines at the 16 MB cap
# of a read is about 200,000 lines.
MAX_LINES = 500000

# Numbers as the text format writes them; float() also accepts "nan",
# "inf", "infinity" in any case, which the format allows as NaN, +Inf, -Inf.
_SPECIAL_VALUES = {'nan': float('nan'), '+inf': float('inf'), 'inf': float('inf'), '-inf': float('-inf')}


class ExpositionError(ValueError):
    """The text is not valid Prometheus text exposition."""

    def __init__(self, line_no, reason, line=None):
        self.line_no = line_no
        self.reason = reason
        self.line = line
        excerpt = ''
        if line is not None:
            excerpt = ': %r' % (line[:80] + ('...' if len(line) > 80 else ''),)
        super(ExpositionError, self).__init__('line %d: %s%s' % (line_no, reason, excerpt))


def _unescape(value):
    if '\\' not in value:
        return value

    def repl(match):
        char = match.group(1)
        # An unknown escape keeps its backslash, as the reference parser does.
        return _ESCAPES.get(char, '\\' + char)

    return _ESCAPE_RE.sub(repl, value)


def parse_value(text):
    """Parse a sample value: a float, NaN, +Inf, -Inf, exponent notation."""
    try:
        return float(text)
    except ValueError:
        special = _SPECIAL_VALUES.get(text.lower())
        if special is None:
            raise
        return special


# One sample line: name, optional {labels}, value, optional timestamp. The label set is checked
# whole by the pattern (quoted values may hold any character, escaped as \\, \" and \n).
_LABEL_VALUE = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_LABEL_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*' + _LABEL_VALUE + r'\s*'
_LABEL_LIST = r'\s*(?:' + _LABEL_PAIR + r'(?:,\s*' + _LABEL_PAIR + r')*(?:,\s*)?)?'
_SAMPLE_RE = re.compile(r'([^{\s]+)\s*(?:\{(' + _LABEL_LIST + r')\})?\s*(.*)\Z', re.S)
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*(?:\\.[^"\\]*)*)"', re.S)


def _parse_labels(body, line_no, line):
    """The (name, value) pairs of a label set the sample pattern has already checked."""
    pairs = _LABEL_RE.findall(body)
    if '\\' in body:
        pairs = [(name, _unescape(value)) for name, value in pairs]
    if len(pairs) > 1 and len(set(name for name, dummy in pairs)) != len(pairs):
        raise ExpositionError(line_no, 'label name repeated', line)
    return tuple(pairs)


def _split_sample(line, line_no):
    """Split one sample line into (name, raw_labels or None, rest)."""
    match = _SAMPLE_RE.match(line)
    if match is None or (match.group(2) is None and '{' in line):
        if '{' in line and '}' not in line[line.index('{'):]:
            raise ExpositionError(line_no, 'unterminated label set', line)
        raise ExpositionError(line_no, 'malformed label set', line)
    if not match.group(3):
        raise ExpositionError(line_no, 'sample without a value', line)
    return match.groups()


def parse(text, wanted=None):
    """Parse exposition text into a list of (name, labels, value) samples.

    ``wanted``: None for every sample, or a set/frozenset of sample names, or
    a callable(name) -> bool. Samples not wanted are validated but dropped.
    """
    return list(iter_samples(text, wanted))


def _lines(text):
    """(line number, line) of every line, without building a list of them all."""
    start = 0
    line_no = 0
    end = len(text)
    while start < end:
        stop = text.find('\n', start)
        if stop < 0:
            stop = end
        line_no += 1
        yield line_no, text[start:stop]
        start = stop + 1


def iter_samples(text, wanted=None):
    """``parse``, one sample at a time (the caller may stop early)."""
    if not isinstance(text, str):
        raise TypeError('text must be str')
    if text and not text.endswith('\n'):
        # The format ends every line with a newline: a body without one was cut off.
        raise ExpositionError(text.count('\n') + 1, 'truncated: the last line has no newline')
    if wanted is None:
        keep = None
    elif callable(wanted):
        keep = wanted
    else:
        keep = frozenset(wanted).__contains__

    seen = set()
    for line_no, line in _lines(text):
        if line_no > MAX_LINES:
            raise ExpositionError(line_no, 'over %d lines: more than any vLLM writes (about 630 per engine)'
                                  % MAX_LINES)
        if len(line) > MAX_LINE:
            raise ExpositionError(line_no, 'the line is over %d characters' % MAX_LINE, line)
        if not line or line.isspace():
            continue
        if line[0] == '#':
            continue
        first = line.lstrip()[:1]
        if first == '<':
            raise ExpositionError(line_no, 'this is HTML, not Prometheus text', line)
        if first in ('{', '['):
            raise ExpositionError(line_no, 'this looks like JSON, not Prometheus text', line)
        name, raw_labels, rest = _split_sample(line, line_no)
        if not _NAME_RE.match(name):
            raise ExpositionError(line_no, 'invalid metric name', line)
        fields = rest.split()
        if not fields or len(fields) > 2:
            raise ExpositionError(line_no, 'expected a value and an optional timestamp', line)
        try:
            value = parse_value(fields[0])
            if len(fields) == 2:
                float(fields[1])
        except ValueError:
            raise ExpositionError(line_no, 'invalid value', line)
        if keep is not None and not keep(name):
            continue
        labels = () if raw_labels is None else _parse_labels(raw_labels, line_no, line)
        # The hash of the parsed series, not its text: ``x`` and ``x{}``, ``x{a="b"}`` and ``x{a="b",}`` are one
        # series. The hash, not the series: a body of many series must not be kept twice in memory.
        key = hash((name, labels if len(labels) < 2 else tuple(sorted(labels))))
        if key in seen:
            raise ExpositionError(line_no, 'the same series appears twice', line)
        seen.add(key)
        yield name, labels, value
