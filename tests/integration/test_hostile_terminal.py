"""The hostile-input tier (issue 26), class 28: names and messages reach the terminal raw.

Host names, variable names, task names, failure messages and a server's own words (an engine label in a verdict
line) can hold what a terminal acts on: ESC sequences (``ESC c`` resets the terminal, ``ESC ] 0 ; ... BEL`` sets the
window title, ``ESC [ 2J`` clears the screen, ``ESC [ 8m`` hides what follows), the C1 controls (``U+009B`` is a
CSI of its own), a carriage return that overwrites the line, a bell; and what no eye sees: a zero-width space, a
zero-width joiner, a byte order mark, a right-to-left override, a combining mark, a Cyrillic letter that looks
Latin. Through ``ansible-playbook`` and ``ansible`` with the collection's stdout callback (``modelops.vllm.oneline``,
compact, ``-v``, with colours) and through the default callback for what the collection writes itself
(``modelops.vllm.validate_variables``'s warnings), what must hold:

* no raw control, format or separator character (other than a line break and a tab) in stdout or stderr; with
  colours, only the colour sequences Ansible itself writes;
* a human can still read which name was wrong: a variable whose name has an invisible or look-alike character is
  named with that character escaped and said (``vllm_watchdog_reboot\\u200b ... an invisible character (\\u200b
  ZERO WIDTH SPACE); did you mean vllm_watchdog_reboot?``), never the same name twice to the eye, and a name that
  starts with an invisible character is still warned about; a host's line names the host with its escapes visible;
* never a traceback.

The servers are raw ones (tests/support/hostile.py): one stuck whose engine label holds escapes, one whose request
gauge is NaN on such an engine (``unknown``, naming it), idle ones, a closed port. The watchdog runs in check mode.
"""

import json
import re
import socket
import subprocess
import sys
import time
import unicodedata

import pytest
import yaml

from ansible import constants as C

from tests.support import ansible_run
from tests.support import hostile as h

pytestmark = pytest.mark.timeout(900)

CLASS = 28
ONELINE = {'ANSIBLE_STDOUT_CALLBACK': 'modelops.vllm.oneline', 'ANSIBLE_LOAD_CALLBACK_PLUGINS': 'true'}
DEFAULT = {'ANSIBLE_STDOUT_CALLBACK': 'default'}
COLOR = {'ANSIBLE_FORCE_COLOR': '1', 'ANSIBLE_NOCOLOR': '0'}

# What a terminal acts on or shows nothing of, each spelling once.
ESCAPES = {
    'reset': '\x1bc',                       # ESC c: the terminal reset (clears it)
    'title': '\x1b]0;pwned\x07',            # OSC 0: the window title, ended by a bell
    'title-st': '\x1b]2;pwned\x1b\\',       # OSC 2, ended by ST
    'clear': '\x1b[2J\x1b[H',               # CSI: clear the screen, cursor home
    'conceal': '\x1b[8m',                   # SGR 8: what follows is invisible
    'c1-csi': '\x9b2J',                     # a C1 CSI
    'c1-osc': '\x9d0;pwned\x9c',            # a C1 OSC, ended by a C1 ST
    'cr': 'FAKE OK\r',                      # a carriage return: the line is written over
    'bell': '\x07',
    'backspace': '\x08\x08\x08',
    'nul': '\x00',
    'del': '\x7f',
    'rlo': '\u202e',                        # right-to-left override
    'zwsp': '\u200b', 'zwj': '\u200d', 'bom': '\ufeff', 'line-separator': '\u2028',
}
EVIL = ''.join(ESCAPES.values())

# Host names an inventory can have (a YAML inventory refuses '[' in a host name: a CSI has its C1 form here).
HOST_NAMES = {
    'reset': 'gb10-\x1bc',
    'title': 'gb10-\x1b]0;pwned\x07',
    'cr': 'gb10-ok\r02',
    'c1-csi': 'gb10-\x9b2J',
    'rlo': 'gb10\u202e10bg',
    'zwsp': 'gb10-\u200b01',
}

# Variable names that look like the collection's and are not: each must be named so a human sees why.
VARIABLE_NAMES = {
    'zwsp': ('vllm_watchdog_reboot\u200b', 'vllm_watchdog_reboot\\u200b', 'ZERO WIDTH SPACE', 'vllm_watchdog_reboot'),
    'zwj': ('vllm\u200d_url', 'vllm\\u200d_url', 'ZERO WIDTH JOINER', 'vllm_url'),
    'bom-first': ('\ufeffvllm_url', '\\ufeffvllm_url', 'ZERO WIDTH NO-BREAK SPACE', 'vllm_url'),
    'rlo': ('vllm_url\u202e', 'vllm_url\\u202e', 'RIGHT-TO-LEFT OVERRIDE', 'vllm_url'),
    'combining': ('vllm\u0301_url', 'vllm\\u0301_url', 'COMBINING ACUTE ACCENT', 'vllm_url'),
    'cyrillic': ('vllm_w\u0430tchdog_reboot', 'vllm_w\\u0430tchdog_reboot', 'CYRILLIC SMALL LETTER A',
                 'vllm_watchdog_reboot'),
    'greek-first': ('\u03bdllm_url', '\\u03bdllm_url', 'GREEK SMALL LETTER NU', 'vllm_url'),
    'fullwidth': ('\uff56llm_url', '\\uff56llm_url', 'FULLWIDTH LATIN SMALL LETTER V', 'vllm_url'),
    'escape': ('vllm_url\x1b]0;t\x07', 'vllm_url\\x1b]0;t\\x07', 'ESCAPE', 'vllm_url'),
    'trailing-space': ('vllm_watchdog_reboot ', 'vllm_watchdog_reboot\\x20', 'SPACE', 'vllm_watchdog_reboot'),
}

_ANSIBLE_SGR = re.compile(r'\x1b\[([0-9;]*)m')
_ANSIBLE_CODES = set(C.COLOR_CODES.values()) | {'0'}


def raw_characters(text, colors=False):
    """The characters of ``text`` a terminal would act on or show nothing of (controls but a line break and a tab,
    format characters, separators, surrogates), each with its context; with ``colors``, Ansible's own colour sequences
    are allowed (any other SGR, such as ESC [ 8m, is not)."""
    if colors:
        text = _ANSIBLE_SGR.sub(lambda m: '' if (m.group(1) in _ANSIBLE_CODES or re.match(r'^38;5;\d+$', m.group(1)))
                                else m.group(), text)
    found = []
    for index, char in enumerate(text):
        if char in '\n\t':
            continue
        if unicodedata.category(char) in ('Cc', 'Cf', 'Zl', 'Zp', 'Cs'):
            found.append(repr(text[max(0, index - 40):index + 20]))
            if len(found) >= 5:
                break
    return found


def closed_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class _Output(object):
    def __init__(self, proc):
        # Bytes decoded as they are: text mode would turn a raw CR into a line break (and hide it).
        self.returncode = proc.returncode
        self.stdout = proc.stdout.decode('utf-8', 'surrogateescape')
        self.stderr = proc.stderr.decode('utf-8', 'surrogateescape')


def run(args, extra_env=None):
    env = ansible_run.env(extra_env)
    return _Output(subprocess.run([ansible_run._bin(args[0])] + list(args[1:]), capture_output=True,  # pylint: disable=protected-access
                                  env=env, timeout=300, stdin=subprocess.DEVNULL, check=False))


def _servers(pool):
    """{host: url}: a stuck server and an unknown one whose words hold every escape, idle ones, a closed port."""
    start = time.time() - 7200
    stuck = pool.vllm(name='stuck', metrics=h.vllm_text({'0' + EVIL: h.engine_numbers(running=2),
                                                         '1': h.engine_numbers(running=1)}, start=start))
    unknown = pool.vllm(name='unknown', metrics=h.vllm_text({'0' + EVIL: h.engine_numbers(running='NaN')}, start=start))
    idle = pool.vllm(name='idle', metrics=h.with_start_time(h.IDLE, start))
    urls = {'reset': stuck.url, 'title': unknown.url, 'cr': idle.url, 'c1-csi': idle.url,
            'rlo': 'http://127.0.0.1:%d' % closed_port(), 'zwsp': idle.url}
    return stuck, unknown, urls


def _inventory(tmp_path, urls):
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}
    hosts = dict((HOST_NAMES[key], dict(local, vllm_url=urls[key])) for key in HOST_NAMES)
    # One host with an instance whose name hides what follows it, and every odd variable name.
    hosts[HOST_NAMES['zwsp']]['vllm_instances'] = [{'name': 'main\x1b[8mhidden\x07', 'url': urls['zwsp']}]
    hosts[HOST_NAMES['cr']].update((name, True) for name, _shown, _said, _meant in VARIABLE_NAMES.values())
    group_vars = {'vllm_watchdog_become': False, 'vllm_watchdog_interval': 0.3, 'vllm_watchdog_freeze_limit': 0.6,
                  'vllm_watchdog_probe_timeout': 2, 'vllm_watchdog_metrics_timeout': 2,
                  'vllm_watchdog_state_dir': str(tmp_path / 'state') + '/{{ inventory_hostname | hash("md5") }}'}
    path = tmp_path / 'inventory.yml'
    path.write_text(yaml.safe_dump({'all': {'children': {'vllm': {'hosts': hosts, 'vars': group_vars}}}}))
    return str(path)


PLAY = """
- name: "A play \\e[2J named with escapes"
  hosts: vllm
  gather_facts: false
  vars:
    evil: %(evil)s
    evil_text: %(evil_text)s  # without the NUL, which would make the file binary (no diff)
  tasks:
    - name: "A task \\e]0;pwned\\a named with escapes"
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}: says {{ evil }}"
    - name: A list, once
      ansible.builtin.debug:
        msg: ["first {{ evil }}", "second \\rFAKE"]
      run_once: true
    - name: A variable shown
      ansible.builtin.debug:
        var: evil
      run_once: true
    - name: The variables, named
      modelops.vllm.validate_variables:
        validate: [inventory]
    - name: A file changed, with its diff
      ansible.builtin.copy:
        content: "before\\n"
        dest: "%(diff_file)s"
        mode: "0600"
      run_once: true
      delegate_to: localhost
    - name: The diff of a text with escapes
      ansible.builtin.copy:
        content: "after {{ evil_text }}\\n"
        dest: "%(diff_file)s"
        mode: "0600"
      run_once: true
      delegate_to: localhost
      diff: true
    - name: "A failure \\e[5m in a loop"
      ansible.builtin.command: "{{ item }}"
      loop: ["true", "false {{ evil }}"]
      when: inventory_hostname == %(first)s
    - name: A failure with escapes
      ansible.builtin.fail:
        msg: "{{ inventory_hostname }}: failed {{ evil }}"
      when: inventory_hostname == %(second)s
"""


def _play(tmp_path):
    path = tmp_path / 'play.yml'
    path.write_text(PLAY % {'evil': json.dumps(EVIL), 'evil_text': json.dumps(EVIL.replace('\x00', '')), 'diff_file': str(tmp_path / 'diff.txt'),
                            'first': json.dumps(HOST_NAMES['title']), 'second': json.dumps(HOST_NAMES['rlo'])})
    return str(path)


def _check_run(violations, name, proc, colors=False, must=(), text=None):
    text = proc.stdout + proc.stderr if text is None else text
    problems = ['raw: %s' % ', '.join(raw_characters(text, colors=colors))] if raw_characters(text, colors) else []
    if h.traceback_in(text):
        problems.append('a traceback: %s' % text[-800:])
    problems += ['does not say %r' % words for words in must if words not in text]
    violations.check(CLASS, name, problems)
    return text


def test_nothing_a_terminal_acts_on_reaches_it_and_every_name_reads_as_what_it_is(tmp_path):
    violations = h.Violations()
    marks = tmp_path / 'restarts'
    with h.Servers() as pool:
        stuck, unknown, urls = _servers(pool)
        inventory = _inventory(tmp_path, urls)
        play = _play(tmp_path)
        # What a human must be able to read: each host's line with its name escaped, the server's words escaped.
        hosts_said = ['gb10-\\x1bc/vllm: stuck', 'gb10-\\x1b]0;pwned\\x07/vllm: unknown', 'gb10\\u202e10bg/vllm: down',
                      'gb10-\\u200b01/main\\x1b[8mhidden\\x07: idle', 'gb10-\\x9b2J/vllm: idle']
        watchdog = ['ansible-playbook', '-i', inventory, 'modelops.vllm.watchdog', '--check',
                    '-e', 'vllm_watchdog_restart_method=command',
                    '-e', json.dumps({'vllm_watchdog_restart_command': ['sh', '-c', 'echo restart >> "$0"',
                                                                        str(marks)]})]
        for label, args, env, colors, must in (
                ('watchdog playbook', watchdog, ONELINE, False, hosts_said),
                ('watchdog playbook -v', watchdog + ['-v'], ONELINE, False, ()),
                ('watchdog playbook, colours', watchdog, dict(ONELINE, **COLOR), True, ()),
                ('watchdog playbook -v, colours', watchdog + ['-v'], dict(ONELINE, **COLOR), True, ()),
                ('a play of escapes', ['ansible-playbook', '-i', inventory, play, '--diff'], ONELINE, False,
                 ['FAILED (A failure \\x1b[5m in a loop, item=false \\x1bc', '\\rFAKE', '+after \\x1bc\\x1b]0;pwned']),
                ('a play of escapes -v', ['ansible-playbook', '-i', inventory, play, '--diff', '-v'], ONELINE, False,
                 ['TASK [A task \\x1b]0;pwned\\x07 named with escapes]']),
                ('a play of escapes -v, colours', ['ansible-playbook', '-i', inventory, play, '--diff', '-vv'],
                 dict(ONELINE, **COLOR), True, ()),
                ('the check playbook', ['ansible-playbook', '-i', inventory, 'modelops.vllm.check'], ONELINE, False,
                 ['gb10-\\x1bc']),
                ('ad hoc, the stuck server', ['ansible', 'localhost', '-m', 'modelops.vllm.health', '-a',
                                              'url=%s interval=0.3 freeze_limit=0.6' % stuck.url], ONELINE, False,
                 ['stuck - ', '0\\x1bc\\x1b]0;pwned\\x07']),
                ('ad hoc -v, the unknown server', ['ansible', 'localhost', '-m', 'modelops.vllm.health', '-a',
                                                   'url=%s interval=0.3' % unknown.url, '-v'], ONELINE, False, ()),
        ):
            proc = run(args, dict(env, ANSIBLE_ASYNC_DIR=str(tmp_path / 'async')))
            _check_run(violations, label, proc, colors=colors, must=must)
        assert not marks.exists(), 'check mode restarted a server'

        # The names: each warned about, escaped and said, with the name it resembles; the same with the default
        # callback (the action escapes its own messages).
        for callback_label, env in (('oneline', ONELINE), ('default', DEFAULT)):
            proc = run(['ansible-playbook', '-i', inventory, 'modelops.vllm.watchdog', '--check'], env)
            warnings = [line for line in proc.stderr.split('\n') if line.startswith('[WARNING]: ')]
            # The default callback prints host names (ok: [name]) and modules' warnings raw itself: only the lines of
            # validate_variables count there.
            ours = [line for line in warnings if 'is not a variable of modelops.vllm' in line]
            text = _check_run(violations, 'variable names, %s callback' % callback_label, proc,
                              text=None if env is ONELINE else '\n'.join(ours))
            for key, (_name, shown, said, meant) in sorted(VARIABLE_NAMES.items()):
                mine = [line for line in warnings if line.startswith('[WARNING]: %s (set on gb10-ok\\r02) ' % shown)]
                problems = []
                if len(mine) != 1:
                    problems.append('not warned once as %s: %s' % (shown, warnings or text[-600:]))
                elif said not in mine[0] or ('did you mean %s?' % meant) not in mine[0]:
                    problems.append('the warning does not say %s or mean %s: %s' % (said, meant, mine[0]))
                violations.check(CLASS, 'variable name %s (%s callback)' % (key, callback_label), problems)
    violations.assert_none()


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)
