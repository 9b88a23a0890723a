# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: oneline
type: stdout
short_description: One line per vLLM server and a total; everything else with -v
version_added: 1.0.0
author: modelops.vllm maintainers (@modelops)
description:
  - The output of the collection's playbooks as their reports read, for a terminal, a cron log or an AWX job
    without scrolling. Without C(-v), a playbook prints what it was written to say (the message of every
    C(ansible.builtin.debug) task that runs, such as the check's, the watchdog's and the rollout's line per server and
    their total), every warning, one line per failure (the host, the task and its message, never a result dump; the
    hosts that failed a task the same way share one line, said when the task is done) and a last line with the count
    of hosts that were ok, changed, failed and unreachable.
  - Not printed without C(-v), which prints exactly what P(ansible.builtin.default#callback) prints, are the play and
    task banners, the C(ok), C(changed) and C(skipping) line of each host and task, the C(FAILED - RETRYING) lines, a
    failure that a C(rescue) of its block handles or that C(ignore_errors) ignores, a host that did not answer in a
    task with C(ignore_unreachable) (the collection's playbooks report both in their own lines), and the
    C(PLAY RECAP) table. A diff (C(--diff)) is printed as by the default callback.
  - A failure of Ansible's role argument validation is one line with the validation's errors, not the whole
    argument specification.
  - Ad hoc (C(ansible HOST -m modelops.vllm.health ...)), a result with the collection's C(line) (the verdict in one
    sentence) is that line, and any other result is printed as P(ansible.builtin.minimal#callback) prints it. The
    C(ansible) command uses a configured stdout callback only with C(bin_ansible_callbacks = true).
  - Not the same as P(ansible.builtin.oneline#callback), which prints every task result of every host on one line.
  - Everything it prints, with or without C(-v), is printed as a terminal may show it. A character a terminal acts on
    or shows nothing of, in a host name, a task name, a message, a warning, a diff or a server's own words (ESC and
    the sequences it starts, such as clear screen or a window title, the C1 controls such as U+009B, a bell, a carriage
    return, a zero-width space or joiner, a byte order mark, a bidirectional override, a byte that is not UTF-8) is
    written as its escape (C(\x1b), C(\x9b), C(\r), C(\u200b)); a line break and a tab stay. With colours,
    only the colour sequences Ansible itself writes stay.
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - Set as the stdout callback (C(stdout_callback = modelops.vllm.oneline) in the C([defaults]) section of
    C(ansible.cfg), or C(ANSIBLE_STDOUT_CALLBACK=modelops.vllm.oneline)); for the C(ansible) command, also
    C(bin_ansible_callbacks = true) (C(ANSIBLE_LOAD_CALLBACK_PLUGINS=true)). Under ansible-runner and AWX, the
    environment variable, which ansible-runner keeps under its own callback.
'''

EXAMPLES = r'''
# Select it in ansible.cfg (bin_ansible_callbacks: the ansible command too):
ansible_config: |
  [defaults]
  stdout_callback = modelops.vllm.oneline
  bin_ansible_callbacks = true
# Or in the environment (what an execution environment sets; ansible-runner and AWX keep it under their own callback):
environment_variables: |
  ANSIBLE_STDOUT_CALLBACK=modelops.vllm.oneline
  ANSIBLE_LOAD_CALLBACK_PLUGINS=true
# What `ansible-playbook -i inventory modelops.vllm.check` prints then:
output: |
  gb10-01: idle - nothing in flight and a one-token probe answered in 0.02 s
  gb10-02: busy - 3 request(s) in flight and the engine moved within 5.0 s (...); no probe sent
  vLLM fleet check (host): 2 server(s): 1 idle, 1 busy
  2 host(s): 2 ok, 0 changed, 0 failed, 0 unreachable
'''

import json
import re

from ansible import constants as C
from ansible import context
from ansible.utils import color as ansible_color
from ansible.utils.display import Display
from ansible.playbook.block import Block
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible.plugins.callback.minimal import CallbackModule as MinimalCallback

from ansible_collections.modelops.vllm.plugins.plugin_utils._printable import escape

try:
    from ansible.utils.fqcn import add_internal_fqcns
except ImportError:  # pragma: no cover - older ansible-core
    def add_internal_fqcns(names):
        out = []
        for name in names:
            out += [name, 'ansible.builtin.' + name, 'ansible.legacy.' + name]
        return out

DEBUG = frozenset(add_internal_fqcns(('debug',)))
VALIDATE = frozenset(add_internal_fqcns(('validate_argument_spec',)))
# Their message is written for people: it is the line, without the task's name.
AUTHORED = frozenset(add_internal_fqcns(('fail', 'assert')) + ['modelops.vllm.validate_variables'])


def _result(result):
    """The result dict of a task result (``result`` from ansible-core 2.19, ``_result`` before)."""
    found = getattr(result, 'result', None)
    return found if isinstance(found, dict) else result._result


def _task(result):
    found = getattr(result, 'task', None)
    return found if found is not None and not isinstance(found, str) else result._task


def _host(result):
    found = getattr(result, 'host', None)
    return (found if found is not None else result._host).get_name()


# The SGR parameters of the colours Ansible writes (stringc: ESC [ code m ... ESC [ 0 m, colorNNN, rgbNNN, grayN).
COLORS = frozenset(C.COLOR_CODES.values()) | frozenset(['0']) | frozenset('38;5;%d' % n for n in range(256))
_BLANKS = re.compile(r'[ \t\n]+')


class _EscapingDisplay(Display):
    """Ansible's display as this callback writes through it: the same state (the one Display of the process, its
    lock, verbosity, the warnings said), and every message written as a terminal may show it (``escape``): a
    banner, a warning, an error and a result dump too, as each of them ends in ``display``. With colours, Ansible's
    own colour sequences stay (a diff's, the recap's); never one that came with a message (escaped first)."""

    def display(self, msg, *args, **kwargs):  # pylint: disable=arguments-differ
        colors = COLORS if ansible_color.ANSIBLE_COLOR else ()
        return super(_EscapingDisplay, self).display(escape(msg, colors=colors), *args, **kwargs)

    # A warning and an error escaped before they are formatted too: ansible-core before 2.19 wraps them first, which
    # makes a carriage return a blank.
    def warning(self, msg, *args, **kwargs):  # pylint: disable=arguments-differ
        return super(_EscapingDisplay, self).warning(escape(msg) if isinstance(msg, str) else msg, *args, **kwargs)

    def error(self, msg, *args, **kwargs):  # pylint: disable=arguments-differ
        return super(_EscapingDisplay, self).error(escape(msg) if isinstance(msg, str) else msg, *args, **kwargs)


def escaping(display):
    """``display`` (the process's Display) as ``_EscapingDisplay``: its state shared, not copied."""
    shown = object.__new__(_EscapingDisplay)
    shown.__dict__ = display.__dict__
    return shown


def _escaped_diff(diff):
    """A diff of a result with the texts it compares escaped (a line break and a tab stay), before the default
    callback colours its lines."""
    if not isinstance(diff, dict):
        return diff
    return dict((key, escape(value.replace('\r\n', '\\r\n')) if isinstance(value, str) else value)
                for key, value in diff.items())


def one_line(text):
    """Any message as one line: its lines joined, runs of blanks made one (a carriage return, a vertical tab or a
    line separator stays, to be escaped)."""
    if isinstance(text, (list, tuple)):
        text = '; '.join(str(item) for item in text)
    elif isinstance(text, dict):
        text = json.dumps(text, sort_keys=True, default=str)
    return ' '.join(_BLANKS.split(str(text).replace('\r\n', '\n').strip(' \t\n')))


def rescued(task):
    """Whether a failure of ``task`` goes to the rescue of an enclosing block."""
    parent = getattr(task, '_parent', None)
    while parent is not None:
        if isinstance(parent, Block) and parent.rescue:
            return True
        parent = getattr(parent, '_parent', None)
    return False


class CallbackModule(DefaultCallback):

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'modelops.vllm.oneline'

    # Ad hoc, a result without a line is printed as the minimal callback prints it (its methods need this one).
    _command_generic_msg = MinimalCallback._command_generic_msg

    def __init__(self):
        super(CallbackModule, self).__init__()
        # Every line it prints, as a terminal may show it (the default callback's with -v, too).
        self._display = escaping(self._display)
        self._check_mode = False
        self._controller_play = False
        self._worked = set()  # the hosts of plays that are not for the controller alone (hosts: localhost)
        # The failures of the running task, by what they say: one line for the hosts that failed the same way.
        self._pending = {}

    # ----------------------------------------------------------------------------------------- helpers

    def _compact(self):
        return self._display.verbosity < 1

    @staticmethod
    def _adhoc():
        return bool(context.CLIARGS.get('module_name'))

    def _say(self, text, color=None):
        self._display.display(text, color=color)

    def _failure_text(self, result):
        res = _result(result)
        if _task(result).action in VALIDATE and res.get('argument_errors'):
            return 'Validation of arguments failed: %s' % one_line(res['argument_errors'])
        for key in ('msg', 'stderr', 'module_stderr', 'stdout'):
            if res.get(key):
                return one_line(res[key])
        return 'failed (no message; -v shows the result)'

    def _failure(self, result, caption, color, item=None):
        host = _host(result)
        text = self._failure_text(result)
        if text.startswith(host + ': '):
            text = text[len(host) + 2:]
        task = _task(result)
        where = '' if task.action in AUTHORED and item is None else ' (%s)' % task.get_name().strip()
        if item is not None:
            where = ' (%s, item=%s)' % (task.get_name().strip(), item)
        # Said when the task is done: the hosts that failed the same way share one line (one mistake, one line).
        hosts = self._pending.setdefault((caption, where, text, color), [])
        if host not in hosts:
            hosts.append(host)

    def _flush(self):
        """The failures of the task that ended: one line per way of failing, naming its hosts."""
        pending, self._pending = self._pending, {}
        for (caption, where, text, color), hosts in pending.items():
            hosts = sorted(hosts)
            shown = ', '.join(hosts) if len(hosts) <= 5 else '%s and %d more (%d hosts)' % (
                ', '.join(hosts[:5]), len(hosts) - 5, len(hosts))
            self._say('%s: %s%s: %s' % (shown, caption, where, text), color=color)

    def _debug_lines(self, result):
        res, task, host = _result(result), _task(result), _host(result)
        if 'msg' in res:
            message = res['msg']
        else:  # debug: var=name
            shown = dict((k, v) for k, v in res.items() if not k.startswith('_') and k not in ('changed', 'failed'))
            message = ', '.join('%s = %s' % (k, json.dumps(v, sort_keys=True, default=str)) for k, v in shown.items())
        if isinstance(message, (list, tuple)):
            lines = [one_line(item) if not isinstance(item, str) else item for item in message]
        elif isinstance(message, dict):
            lines = [one_line(message)]
        else:
            lines = [str(message)]
            if not (task.run_once or lines[0].startswith(host)):
                lines = ['%s: %s' % (host, lines[0])]
        for line in lines:
            self._say(line)

    def _adhoc_line(self, result, color):
        """Ad hoc: the collection's one-line verdict, when the result has one."""
        line = _result(result).get('line')
        if not isinstance(line, str) or not line:
            return False
        self._handle_warnings(_result(result))
        host = _host(result)
        self._say(line if line.startswith(host) else '%s | %s' % (host, line), color=color)
        return True

    # ------------------------------------------------------------------------------------- playbook

    def _banners(self):
        """Play and task banners, recaps: with -v, and never ad hoc (the minimal callback prints none)."""
        return not self._compact() and not self._adhoc()

    def v2_playbook_on_start(self, playbook):
        self._check_mode = bool(context.CLIARGS.get('check'))
        if self._banners():
            super(CallbackModule, self).v2_playbook_on_start(playbook)

    def v2_playbook_on_play_start(self, play):
        self._flush()
        self._controller_play = list(getattr(play, 'hosts', None) or []) == ['localhost'] or (
            getattr(play, 'hosts', None) == 'localhost')
        if self._banners():
            return super(CallbackModule, self).v2_playbook_on_play_start(play)
        self._play = play
        return None

    def _seen(self, result):
        if not self._controller_play:
            self._worked.add(_host(result))

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._flush()
        if self._banners():
            super(CallbackModule, self).v2_playbook_on_task_start(task, is_conditional)

    def v2_playbook_on_handler_task_start(self, task):
        self._flush()
        if not self._compact():
            super(CallbackModule, self).v2_playbook_on_handler_task_start(task)

    def v2_playbook_on_include(self, included_file):
        if not self._compact():
            super(CallbackModule, self).v2_playbook_on_include(included_file)

    def v2_playbook_on_no_hosts_matched(self):
        if not self._compact():
            super(CallbackModule, self).v2_playbook_on_no_hosts_matched()

    def v2_playbook_on_no_hosts_remaining(self):
        self._flush()
        if not self._compact():
            super(CallbackModule, self).v2_playbook_on_no_hosts_remaining()

    def v2_playbook_on_notify(self, handler, host):
        if not self._compact():
            super(CallbackModule, self).v2_playbook_on_notify(handler, host)

    def v2_runner_on_start(self, host, task):
        if not self._compact():
            super(CallbackModule, self).v2_runner_on_start(host, task)

    def v2_runner_retry(self, result):
        if not self._compact():
            super(CallbackModule, self).v2_runner_retry(result)

    def v2_runner_on_async_poll(self, result):
        if not self._compact():
            super(CallbackModule, self).v2_runner_on_async_poll(result)

    def v2_runner_on_async_ok(self, result):
        if not self._compact():
            super(CallbackModule, self).v2_runner_on_async_ok(result)

    def v2_runner_on_async_failed(self, result):
        if not self._compact():
            super(CallbackModule, self).v2_runner_on_async_failed(result)

    # --------------------------------------------------------------------------------------- results

    def v2_runner_on_ok(self, result):
        self._seen(result)
        if self._adhoc():
            if self._compact() and self._adhoc_line(result, None):
                return None
            return MinimalCallback.v2_runner_on_ok(self, result)
        if not self._compact():
            return super(CallbackModule, self).v2_runner_on_ok(result)
        self._handle_warnings(_result(result))
        task = _task(result)
        if isinstance(task, TaskInclude):
            return None
        if task.action in DEBUG:
            self._debug_lines(result)
        return None

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._seen(result)
        if self._adhoc():
            if self._compact() and self._adhoc_line(result, C.COLOR_ERROR):
                return None
            return MinimalCallback.v2_runner_on_failed(self, result, ignore_errors)
        if not self._compact():
            return super(CallbackModule, self).v2_runner_on_failed(result, ignore_errors)
        self._handle_warnings(_result(result))
        task = _task(result)
        if ignore_errors or rescued(task):
            return None
        if task.loop and 'results' in _result(result):
            return None  # each failed item had its line
        self._failure(result, 'FAILED', C.COLOR_ERROR)
        return None

    def v2_runner_on_unreachable(self, result):
        self._seen(result)
        if self._adhoc():
            return MinimalCallback.v2_runner_on_unreachable(self, result)
        if not self._compact():
            return super(CallbackModule, self).v2_runner_on_unreachable(result)
        self._handle_warnings(_result(result))
        task = _task(result)
        if task.ignore_unreachable or rescued(task):
            return None
        self._failure(result, 'UNREACHABLE', C.COLOR_UNREACHABLE)
        return None

    def v2_runner_on_skipped(self, result):
        self._seen(result)
        if self._adhoc():
            return MinimalCallback.v2_runner_on_skipped(self, result)
        if not self._compact():
            return super(CallbackModule, self).v2_runner_on_skipped(result)
        self._handle_warnings(_result(result))
        return None

    def v2_runner_item_on_ok(self, result):
        if not self._compact():
            return super(CallbackModule, self).v2_runner_item_on_ok(result)
        self._handle_warnings(_result(result))
        return None

    def v2_runner_item_on_skipped(self, result):
        if not self._compact():
            return super(CallbackModule, self).v2_runner_item_on_skipped(result)
        self._handle_warnings(_result(result))
        return None

    def v2_runner_item_on_failed(self, result):
        if not self._compact():
            return super(CallbackModule, self).v2_runner_item_on_failed(result)
        self._handle_warnings(_result(result))
        task = _task(result)
        if task.ignore_errors or rescued(task):
            return None
        self._failure(result, 'FAILED', C.COLOR_ERROR, item=self._get_item_label(_result(result)))
        return None

    def _get_diff(self, difflist):
        if not isinstance(difflist, list):
            difflist = [difflist]
        return super(CallbackModule, self)._get_diff([_escaped_diff(diff) for diff in difflist])

    def v2_on_file_diff(self, result):
        if self._adhoc():
            return MinimalCallback.v2_on_file_diff(self, result)
        return super(CallbackModule, self).v2_on_file_diff(result)

    # ------------------------------------------------------------------------------------------ total

    def _shown(self, stats, host):
        """Whether the summary counts a host: one the playbook worked on, or any host that failed."""
        summary = stats.summarize(host)
        return host in self._worked or not self._worked or bool(summary['failures'] or summary['unreachable'])

    def v2_playbook_on_stats(self, stats):
        self._flush()
        if self._adhoc():
            return None  # as the minimal callback: the line of each host is all
        if not self._compact():
            return super(CallbackModule, self).v2_playbook_on_stats(stats)
        # The hosts the playbook worked on: a play on the controller alone (the shipped playbooks' check that the
        # host pattern matched) is no host of the fleet, unless it failed there.
        hosts = sorted(host for host in stats.processed if self._shown(stats, host))
        counts = {'ok': [], 'changed': [], 'failed': [], 'unreachable': []}
        for host in hosts:
            summary = stats.summarize(host)
            if summary['unreachable']:
                counts['unreachable'].append(host)
            elif summary['failures']:
                counts['failed'].append(host)
            elif summary['changed']:
                counts['changed'].append(host)
            else:
                counts['ok'].append(host)
        line = '%d host(s): %d ok, %d changed, %d failed, %d unreachable' % (
            len(hosts), len(counts['ok']), len(counts['changed']), len(counts['failed']), len(counts['unreachable']))
        for key in ('failed', 'unreachable'):
            if counts[key]:
                line += '; %s: %s' % (key, ', '.join(counts[key]))
        if self._check_mode:
            line += ' (check mode: nothing was changed)'
        color = C.COLOR_ERROR if counts['failed'] or counts['unreachable'] else (
            C.COLOR_CHANGED if counts['changed'] else C.COLOR_OK)
        self._say(line, color=color)
        if stats.custom and self.get_option('show_custom_stats'):
            for key in sorted(stats.custom.keys()):
                self._say('custom stats %s: %s' % (key, one_line(self._dump_results(stats.custom[key]))))
        return None
