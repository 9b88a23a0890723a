"""Text from outside as a terminal may show it (plugins/plugin_utils/_printable.py): nothing a terminal acts on or
shows nothing of survives ``escape``, a name is shown with every character that is not printable ASCII escaped, its
oddities are said, and ``as_read`` reads it as the eye does. Several spellings per class."""

import unicodedata

import pytest

from ansible_collections.modelops.vllm.plugins.plugin_utils import _printable as p

# The characters a terminal acts on or shows nothing of (category C*, Zl, Zp) but a line break and a tab.
RAW = ('Cc', 'Cf', 'Cs', 'Cn', 'Zl', 'Zp')

# class: spellings, each (text, what escape makes of it)
SPELLINGS = {
    'clear screen': [('\x1b[2J\x1b[H', '\\x1b[2J\\x1b[H'), ('\x1bc', '\\x1bc'), ('\x1b[3J', '\\x1b[3J')],
    'window title (OSC)': [('\x1b]0;pwned\x07', '\\x1b]0;pwned\\x07'), ('\x1b]2;pwned\x1b\\', '\\x1b]2;pwned\\x1b\\'),
                           ('\x1b]8;;http://x\x1b\\link', '\\x1b]8;;http://x\\x1b\\link')],
    'hidden text (SGR 8)': [('\x1b[8mhidden', '\\x1b[8mhidden')],
    'bell': [('\x07', '\\x07'), ('ding\x07\x07', 'ding\\x07\\x07')],
    'carriage return': [('FAKE OK\rreal', 'FAKE OK\\rreal'), ('\rX', '\\rX')],
    'backspace, NUL, DEL, VT, FF': [('ab\x08\x08', 'ab\\x08\\x08'), ('\x00', '\\x00'), ('\x7f', '\\x7f'),
                                    ('\x0b\x0c', '\\x0b\\x0c')],
    'C1 controls': [('\x9b2J', '\\x9b2J'), ('\x9d0;pwned\x9c', '\\x9d0;pwned\\x9c'), ('\x85', '\\x85'),
                    ('\x90q\x9c', '\\x90q\\x9c')],
    'zero-width': [('a\u200bb', 'a\\u200bb'), ('a\u200db', 'a\\u200db'), ('a\u200cb', 'a\\u200cb'),
                   ('a\u2060b', 'a\\u2060b')],
    'byte order mark': [('\ufeffname', '\\ufeffname')],
    'bidi overrides': [('gb10\u202e10bg', 'gb10\\u202e10bg'), ('\u202dx\u202c', '\\u202dx\\u202c'),
                       ('\u2066x\u2069', '\\u2066x\\u2069'), ('\u200f', '\\u200f')],
    'separators': [('a\u2028b', 'a\\u2028b'), ('a\u2029b', 'a\\u2029b')],
    'tags, soft hyphen, blanks': [('\U000e0041', '\\U000e0041'), ('a\xadb', 'a\\xadb'), ('\u3164', '\\u3164'),
                                  ('\u2800', '\\u2800')],
    'surrogate-escaped bytes': [(b'ok\xff\x9b2J'.decode('utf-8', 'surrogateescape'), 'ok\\udcff\\udc9b2J'),
                                (b'\xc3'.decode('utf-8', 'surrogateescape'), '\\udcc3')],
    'not assigned': [('\U000e0080', '\\U000e0080'), ('\ufffe', '\\ufffe')],
}
CASES = [(cls, text, want) for cls, spellings in sorted(SPELLINGS.items()) for text, want in spellings]


def raw(text):
    return [char for char in text if char not in '\n\t' and unicodedata.category(char) in RAW]


@pytest.mark.parametrize('cls, text, want', CASES, ids=['%s %d' % (c, i) for i, (c, _t, _w) in enumerate(CASES)])
def test_escape_writes_what_a_terminal_acts_on_as_its_escape(cls, text, want):
    del cls
    shown = p.escape(text)
    assert shown == want
    assert not raw(shown)
    assert p.escape(shown) == shown  # once is enough: escaping again changes nothing
    # in a name, too, and said
    named = p.name(text)
    assert not raw(named) and all(0x21 <= ord(char) <= 0x7e for char in named)
    assert p.oddities(text)


def test_escape_keeps_line_breaks_tabs_and_what_prints():
    text = 'gb10-01: idle - nothing in flight\n\tengine 0: 0.02 s, caf\xe9 \u2192 \u6f22\u5b57 \u0430'
    assert p.escape(text) == text
    assert p.escape('a\r\nb') == 'a\nb'  # a CR LF is a line break
    assert p.escape('a\r\nb', keep='') == 'a\\r\\nb'
    assert p.escape('a\tb\n', keep='') == 'a\\tb\\n'
    assert p.escape(42) == '42' and p.escape(None) == 'None' and p.escape(['\x1b']) == "['\\x1b']"


def test_escape_keeps_only_the_colours_it_is_given():
    colors = frozenset(['0', '0;31', '1;35'])
    text = '\x1b[0;31mfailed \x1b[8mhidden \x1b]0;t\x07 \x1b[2J\x1b[0m'
    assert p.escape(text, colors=colors) == '\x1b[0;31mfailed \\x1b[8mhidden \\x1b]0;t\\x07 \\x1b[2J\x1b[0m'
    assert p.escape(text) == '\\x1b[0;31mfailed \\x1b[8mhidden \\x1b]0;t\\x07 \\x1b[2J\\x1b[0m'
    # a colour's parameters, not its look: ESC [ 0;31;8 m is not ESC [ 0;31 m
    assert p.escape('\x1b[0;31;8m', colors=colors) == '\\x1b[0;31;8m'
    assert p.escape('\x9b0;31m', colors=colors) == '\\x9b0;31m'  # the C1 CSI is no colour of Ansible's


@pytest.mark.parametrize('text, shown', [
    ('vllm_watchdog_reboot\u200b', 'vllm_watchdog_reboot\\u200b'),
    ('vllm_w\u0430tchdog_reboot', 'vllm_w\\u0430tchdog_reboot'),
    ('\ufeffvllm_url', '\\ufeffvllm_url'),
    ('vllm_url ', 'vllm_url\\x20'),
    ('vllm url', 'vllm\\x20url'),
    ('vllm\u0301_url', 'vllm\\u0301_url'),
    ('\uff56llm_url', '\\uff56llm_url'),
    ('\U0001d42fllm_url', '\\U0001d42fllm_url'),
    ('vllm_url\x1b]0;t\x07', 'vllm_url\\x1b]0;t\\x07'),
    ('vllm_url', 'vllm_url'),
])
def test_a_name_shows_every_character_that_is_not_printable_ascii(text, shown):
    assert p.name(text) == shown
    assert (p.name(text) == text) == (not p.oddities(text))


@pytest.mark.parametrize('text, said', [
    ('vllm_watchdog_reboot\u200b', 'an invisible character (\\u200b ZERO WIDTH SPACE)'),
    ('vllm\u200d_url', 'an invisible character (\\u200d ZERO WIDTH JOINER)'),
    ('\ufeffvllm_url', 'an invisible character (\\ufeff ZERO WIDTH NO-BREAK SPACE)'),
    ('vllm_url\u202e', 'an invisible character (\\u202e RIGHT-TO-LEFT OVERRIDE)'),
    ('vllm_w\u0430tchdog', 'a character that is not ASCII (\\u0430 CYRILLIC SMALL LETTER A)'),
    ('vllm\u0301_url', 'a combining mark (\\u0301 COMBINING ACUTE ACCENT)'),
    ('a\x1b\x07', 'control characters (\\x1b ESCAPE, \\x07 BELL)'),
    ('a\x9b', 'a control character (\\x9b CONTROL SEQUENCE INTRODUCER)'),
    ('a\r', 'a control character (\\r CARRIAGE RETURN)'),
    ('vllm_url ', 'a space (\\x20 SPACE)'),
    (b'vllm_\xff'.decode('utf-8', 'surrogateescape'), 'a byte that is not UTF-8 (\\udcff)'),
    ('x\u200b\u0430', 'an invisible character (\\u200b ZERO WIDTH SPACE) and a character that is not ASCII '
                      '(\\u0430 CYRILLIC SMALL LETTER A)'),
    ('\u200b\u200c\u200d\u2060\ufeff', 'invisible characters (\\u200b ZERO WIDTH SPACE, \\u200c ZERO WIDTH NON-JOINER, '
                                       '\\u200d ZERO WIDTH JOINER) and 2 more'),
    ('a\u200ba\u200b', 'an invisible character (\\u200b ZERO WIDTH SPACE)'),  # each character once
    ('vllm_url', ''),
])
def test_oddities_say_what_a_screen_does_not_show(text, said):
    assert p.oddities(text) == said


@pytest.mark.parametrize('text, read', [
    ('vllm_watchdog_reboot\u200b', 'vllm_watchdog_reboot'),
    ('vllm\u200d_url', 'vllm_url'),
    ('\ufeffvllm_url', 'vllm_url'),
    ('vllm_url\u202e', 'vllm_url'),
    ('vllm_w\u0430tchdog_reboot', 'vllm_watchdog_reboot'),          # Cyrillic a
    ('vllm_watchd\u043eg_r\u0435b\u043e\u043et', 'vllm_watchdog_reboot'),  # Cyrillic o, e
    ('\u0455\u0456\u0458', 'sij'),
    ('\u03bdllm_url', 'vllm_url'),                                   # Greek nu
    ('VLLM_\u0421HECK', 'VLLM_CHECK'),                               # Cyrillic capital Es
    ('\uff56llm_url', 'vllm_url'),                                   # fullwidth
    ('\U0001d42fllm_url', 'vllm_url'),                               # mathematical bold
    ('vllm\u0301_url', 'vllm_url'),                                  # a combining mark
    ('vll\xe9_url', 'vlle_url'),                                     # a letter with its mark
    ('vllm_url\x1b\x07', 'vllm_url'),
    (' vllm_url \t', 'vllm_url'),
    (b'vllm_url\xff'.decode('utf-8', 'surrogateescape'), 'vllm_url'),
    ('vllm_url', 'vllm_url'),
])
def test_as_read_is_the_name_as_the_eye_reads_it(text, read):
    assert p.as_read(text) == read


def test_hidden_is_what_escape_escapes():
    for point in list(range(0, 0x300)) + [0x200b, 0x200d, 0x202e, 0x2028, 0xfeff, 0x3164, 0xe0041, 0xdc9b]:
        char = chr(point)
        escaped = p.escape(char, keep='') != char
        assert escaped == p.hidden(char), repr(char)
    assert not p.hidden('a') and not p.hidden('\xe9') and not p.hidden('\u0430') and not p.hidden(' ')
