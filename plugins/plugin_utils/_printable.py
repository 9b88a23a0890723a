# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Text from outside as a terminal may show it: the characters a terminal acts on, and those no eye sees,
written as escapes a human can read.

Host names, variable names, task names, failure messages and a server's own words reach the collection's stdout
callback (``modelops.vllm.oneline``) and the warnings of ``modelops.vllm.validate_variables``. A terminal acts on
control characters (ESC starts a sequence that clears the screen or sets the window title, BEL rings, CR returns to
the start of the line and overwrites it, the C1 controls U+0080-U+009F are such sequences of their own), some
characters print as nothing (a zero-width space, a zero-width joiner, a byte order mark) and some turn the text
around (the bidirectional overrides). ``escape`` writes each of them as ``\\x1b``, ``\\r``, ``\\u200b``: the line
stays one line, readable, and says exactly what it holds.

A variable's name is shown stricter (``name``): every character that is not printable ASCII is escaped, so a
Cyrillic letter that looks Latin or a combining mark is visible too, ``oddities`` says which characters those are,
and ``as_read`` is the name as the eye reads it (what the closest known name is looked up with).

Controller side (the callback and the action); pure functions, standard library only.
"""

from __future__ import annotations

import re
import unicodedata

# Kept as they are by escape: a line break and a tab (what a multi-line message is made of).
KEEP = '\n\t'

# A character escape() may have to escape: anything outside printable ASCII (each is then looked at).
_SUSPECT = re.compile(r'[^\x20-\x7e]')
# In a name, anything but printable ASCII other than the space is escaped.
_NOT_NAME = re.compile(r'[^\x21-\x7e]')
# The categories of the characters escaped in any text: controls (C0, DEL, C1), format characters (zero-width
# space and joiners, byte order mark, the bidirectional controls, the soft hyphen, the tag characters), surrogates
# (bytes that were not UTF-8, decoded with surrogateescape), the line and paragraph separators, and code points
# Unicode has not assigned (this Python's tables: a later version may have made them format characters).
_HIDDEN = frozenset(('Cc', 'Cf', 'Cs', 'Zl', 'Zp', 'Cn'))
# Letters and symbols that print as blank space, not in those categories: the Hangul fillers, the braille blank.
_BLANK = frozenset('\u115f\u1160\u3164\uffa0\u2800')
# A colour sequence (SGR: ESC [ digits and semicolons m); escape() keeps those whose parameters it is given.
_SGR = re.compile(r'(\x1b\[([0-9;]*)m)')
_SHORT = {'\n': '\\n', '\r': '\\r', '\t': '\\t'}

# Letters of other scripts that look like Latin letters (Cyrillic, Greek, a few Latin variants): what as_read
# reads them as. NFKC already makes fullwidth and mathematical letters plain.
_LOOKALIKES = dict(zip(
    '\u0430\u0432\u0435\u043a\u043c\u043d\u043e\u0440\u0441\u0442\u0443\u0445\u0455\u0456\u0458\u0501\u051b'
    '\u051d\u04bb\u04cf\u0261\u0131\u03bf\u03b1\u03bd\u03c1\u03b9\u03ba\u03c5\u03c7\u0410\u0412\u0415\u041a'
    '\u041c\u041d\u041e\u0420\u0421\u0422\u0423\u0425\u0405\u0406\u0408\u0391\u0392\u0395\u0396\u0397\u0399'
    '\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7',
    'abekmhopctyxsijdqwhlgioavpikuxABEKMHOPCTYXSIJABEZHIKMNOPTYX'))


def _code(char):
    if char in _SHORT:
        return _SHORT[char]
    point = ord(char)
    if point < 0x100:
        return '\\x%02x' % point
    if point < 0x10000:
        return '\\u%04x' % point
    return '\\U%08x' % point


def hidden(char):
    """Whether a terminal acts on ``char`` or shows nothing of it (a control, format or separator character, a
    blank letter, a code point not assigned)."""
    return unicodedata.category(char) in _HIDDEN or char in _BLANK


def _escape_part(text, keep):
    def replace(match):
        char = match.group()
        return char if char in keep or not hidden(char) else _code(char)
    return _SUSPECT.sub(replace, text)


def escape(text, keep=KEEP, colors=()):
    """``text`` with every control, format and separator character written as an escape (``\\x1b``, ``\\r``,
    ``\\u200b``, ``\\U000e0041``); the characters of ``keep`` (a line break and a tab) stay. A CR LF is a line break.
    Not a str: its ``str()``. ``colors``: the SGR parameters (``'0;31'``, ``'0'``) of the colour sequences
    (``ESC [ 0;31 m``) that stay as they are, Ansible's own; any other sequence (``ESC [ 8m`` hides what follows)
    is escaped like the rest."""
    if not isinstance(text, str):
        text = '%s' % (text,)
    if '\n' in keep:
        text = text.replace('\r\n', '\n')
    if not colors or '\x1b' not in text:
        return _escape_part(text, keep)
    out, last = [], 0
    for match in _SGR.finditer(text):
        if match.group(2) in colors:
            out += [_escape_part(text[last:match.start()], keep), match.group(1)]
            last = match.end()
    out.append(_escape_part(text[last:], keep))
    return ''.join(out)


def name(text):
    """A name as a message shows it: printable ASCII as it is, anything else escaped (``vllm_url\\u200b``,
    ``vllm_w\\u0430tchdog_reboot``), so two names that look the same on a screen never read the same."""
    return _NOT_NAME.sub(lambda match: _code(match.group()), '%s' % (text,))


# What oddities calls a character escaped in a name: (one, many).
_KINDS = {
    'control': ('a control character', 'control characters'),
    'invisible': ('an invisible character', 'invisible characters'),
    'bytes': ('a byte that is not UTF-8', 'bytes that are not UTF-8'),
    'mark': ('a combining mark', 'combining marks'),
    'space': ('a space', 'spaces'),
    'unassigned': ('a code point Unicode does not assign', 'code points Unicode does not assign'),
    'other': ('a character that is not ASCII', 'characters that are not ASCII'),
}
# The names of the controls a terminal acts on (Unicode gives controls no name).
_CONTROL_NAMES = {0x00: 'NULL', 0x07: 'BELL', 0x08: 'BACKSPACE', 0x09: 'TAB', 0x0a: 'LINE FEED',
                  0x0b: 'LINE TABULATION', 0x0c: 'FORM FEED', 0x0d: 'CARRIAGE RETURN', 0x1b: 'ESCAPE', 0x7f: 'DELETE',
                  0x85: 'NEXT LINE', 0x90: 'DEVICE CONTROL STRING', 0x9b: 'CONTROL SEQUENCE INTRODUCER',
                  0x9c: 'STRING TERMINATOR', 0x9d: 'OPERATING SYSTEM COMMAND'}


def _kind(char):
    category = unicodedata.category(char)
    if category == 'Cc':
        return 'control'
    if category in ('Cf', 'Zl', 'Zp') or char in _BLANK:
        return 'invisible'
    if category == 'Cn':
        return 'unassigned'
    if category == 'Cs':
        return 'bytes'
    if category.startswith('M'):
        return 'mark'
    if category.startswith('Z'):
        return 'space'
    return 'other'


def oddities(text, limit=3):
    """What ``name`` escapes in ``text``, said for a human: '' when nothing, else for example
    'an invisible character (\\u200b ZERO WIDTH SPACE)', 'control characters (\\x1b ESCAPE, \\x07 BELL)' or
    'a character that is not ASCII (\\u0430 CYRILLIC SMALL LETTER A)'; at most ``limit`` characters, then how many
    more."""
    found = []
    for char in _NOT_NAME.findall('%s' % (text,)):
        if char not in found:
            found.append(char)
    kinds = {}
    for char in found[:limit]:
        label = unicodedata.name(char, '') or _CONTROL_NAMES.get(ord(char), '')
        kinds.setdefault(_kind(char), []).append(_code(char) + (' ' + label if label else ''))
    said = ['%s (%s)' % (_KINDS[kind][len(chars) > 1], ', '.join(chars)) for kind, chars in kinds.items()]
    if len(found) > limit:
        said.append('%d more' % (len(found) - limit))
    if len(said) < 2:
        return ''.join(said)
    return '%s and %s' % (', '.join(said[:-1]), said[-1])


def as_read(text):
    """A name as the eye reads it: compatibility forms made plain (NFKC: fullwidth, mathematical letters), what
    shows nothing or only marks a letter dropped (format, control and combining characters), letters of other scripts
    that look Latin read as those, surrounding space removed."""
    text = unicodedata.normalize('NFKD', '%s' % (text,))
    kept = ''.join(_LOOKALIKES.get(char, char) for char in text
                   if not (hidden(char) or unicodedata.category(char).startswith('M')))
    return unicodedata.normalize('NFKC', kept).strip()
