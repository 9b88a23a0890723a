"""The collection's stdout callback writes nothing raw (plugins/callback/oneline.py): its display is Ansible's own
(the same state) with every message escaped on the way out, Ansible's colours kept only when colours are on; a
diff's texts are escaped before the default callback colours them; a message made one line keeps a carriage return
to be escaped. The whole callback, driven by ansible-playbook, is tests/integration/test_hostile_terminal.py."""

import unicodedata

import pytest

from ansible.utils import color as ansible_color
from ansible.utils.display import Display

from ansible_collections.modelops.vllm.plugins.callback import oneline

EVIL = 'a\x1b]0;pwned\x07b\x1b[2J\x9b2J\r\u200b\u202e\ufeff\x1b[8mc'


def _raw(text, colors=False):
    if colors:
        for code in oneline.COLORS:
            text = text.replace('\x1b[%sm' % code, '')
    return [char for char in text if char not in '\n\t' and unicodedata.category(char) in
            ('Cc', 'Cf', 'Cs', 'Cn', 'Zl', 'Zp')]


@pytest.fixture
def shown(monkeypatch):
    display = Display()
    monkeypatch.setattr(display, 'verbosity', 3)
    return oneline.escaping(display), display


@pytest.mark.parametrize('colors', [False, True])
def test_every_message_is_escaped_and_only_ansibles_colours_stay(shown, capsys, monkeypatch, colors):
    escaping, display = shown
    monkeypatch.setattr(ansible_color, 'ANSIBLE_COLOR', colors)
    assert escaping.verbosity == 3 and escaping._lock is display._lock  # pylint: disable=protected-access
    escaping.display('host %s' % EVIL, color='red')
    escaping.display('\x1b[0;32m+ added %s\x1b[0m' % EVIL)  # a line the default callback coloured itself
    escaping.banner('TASK [%s]' % EVIL)
    escaping.warning('warned %s %s' % (colors, EVIL))  # (a warning and an error are said once per process)
    escaping.error('failed %s %s' % (colors, EVIL))
    escaping.vvv('verbose %s' % EVIL)
    out, err = capsys.readouterr()
    assert not _raw(out, colors) and not _raw(err, colors), (out, err)
    for text in (out, err):
        assert 'a\\x1b]0;pwned\\x07b\\x1b[2J\\x9b2J\\r\\u200b\\u202e\\ufeff\\x1b[8mc' in text
    assert ('\x1b[0;32m+ added' in out) == colors
    assert out.count('\n') >= 5  # line breaks stay


def test_a_diff_is_escaped_before_it_is_coloured():
    diff = oneline._escaped_diff({'before': 'x\r\n', 'after': 'x %s\n' % EVIL, 'before_header': 'f\x1bc',  # pylint: disable=protected-access
                                  'after_header': 'f', 'src_binary': True})
    assert diff == {'before': 'x\\r\n', 'after': 'x a\\x1b]0;pwned\\x07b\\x1b[2J\\x9b2J\\r\\u200b\\u202e\\ufeff'
                                                 '\\x1b[8mc\n',
                    'before_header': 'f\\x1bc', 'after_header': 'f', 'src_binary': True}


@pytest.mark.parametrize('text, line', [
    ('first\nsecond\r\nthird', 'first second third'),
    ('  a \t b\n', 'a b'),
    ('FAKE OK\rreal', 'FAKE OK\rreal'),  # the callback's display escapes it: never folded into a blank
    (['a', 'b\x1b'], 'a; b\x1b'),
])
def test_one_line_joins_lines_and_keeps_what_is_escaped_later(text, line):
    assert oneline.one_line(text) == line
