"""docs/runbook.md covers every verdict and every case where the watchdog asks a human, in the words the watchdog
prints: a verdict or a reason for a human that the code gains without the runbook fails here."""

import ast
import os
import re

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._types import STATES
from tests.support.paths import REPO

with open(os.path.join(REPO, 'docs', 'runbook.md')) as _handle:
    RUNBOOK = _handle.read()
SECTIONS = set(re.findall(r'^### (\S+)$', RUNBOOK, re.M))
# The runbook's words as one line (a quoted message may wrap).
FLAT = ' '.join(RUNBOOK.split())
# Not a verdict of the check: the role's word for a host that did not answer.
ROLE_STATES = ('unreachable',)


@pytest.mark.parametrize('state', list(STATES) + list(ROLE_STATES))
def test_every_verdict_has_its_section(state):
    assert state in SECTIONS, '%s: docs/runbook.md has no "### %s" (what the watchdog does, what to check, the command)' % (
        state, state)


def literal(node):
    """The text of a string literal, or of the format string of ``'...' % (...)``; None for anything else."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        node = node.left
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def words(text):
    """The longest fixed part of a format string: what every instance of the message says."""
    return max(re.split(r'%[sdr]|%\.\d+f', text), key=len).strip()


def reasons_for_a_human():
    """Every message that leads to a human (action fail), in the code that decides and runs the gate."""
    found = []
    path = os.path.join(REPO, 'plugins', 'module_utils', '_decide.py')
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        # result(FAIL, ...) and a guard's c.result(FAIL, ...)
        called = getattr(node.func, 'id', None) or getattr(node.func, 'attr', None)
        if called == 'result' and node.args and getattr(node.args[0], 'id', None) == 'FAIL':
            found.append(literal(node.args[1]))
        elif called == '_escalate' and node.args:
            found.append(literal(node.args[0]))
    path = os.path.join(REPO, 'plugins', 'module_utils', '_gate.py')
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, 'attr', None) == 'update':
            keywords = dict((k.arg, k.value) for k in node.keywords)
            if getattr(keywords.get('action'), 'id', None) == 'FAIL' and 'decision' in keywords:
                found.append(literal(keywords['decision']))
        if isinstance(node, ast.Dict):
            pairs = dict((getattr(k, 'value', None), v) for k, v in zip(node.keys, node.values))
            if getattr(pairs.get('action'), 'id', None) == 'FAIL' and 'decision' in pairs:
                found.append(literal(pairs['decision']))
    return [text for text in found if text]


def test_the_reasons_are_found():
    # Known ones: a reader that found none would pass everything below.
    found = reasons_for_a_human()
    assert len(found) >= 12, found
    assert any('restart budget is spent' in text for text in found)
    assert any('cannot be trusted' in text for text in found)


@pytest.mark.parametrize('reason', reasons_for_a_human(), ids=lambda text: words(text)[:50])
def test_every_reason_for_a_human_is_in_the_runbook(reason):
    part = ' '.join(words(reason).split())
    assert part in FLAT, 'the watchdog asks a human with %r, which docs/runbook.md does not cover (%r)' % (
        reason, part)


@pytest.mark.parametrize('words_of_the_role', [
    'restart FAILED', 'restart STOPPED, NEEDS A HUMAN', 'reboot FAILED', 'host UNREACHABLE',
    'TEXTFILE NOT WRITTEN', 'the watchdog could not decide', 'not ready after the host reboot',
    'the host did not come back', 'the memory did not come back after vLLM stopped'])
def test_the_role_s_own_words_for_a_human_are_in_the_runbook(words_of_the_role):
    assert words_of_the_role in FLAT
    sources = ''
    for path in ('plugins/module_utils/_results.py', 'plugins/filter/_watchdog_summary.py', 'plugins/modules/restart.py',
                 'roles/watchdog/tasks/reboot.yml', 'plugins/filter/_watchdog_reboot_done.py'):
        with open(os.path.join(REPO, path)) as handle:
            sources += handle.read()
    assert words_of_the_role in sources, '%r is no longer what the watchdog prints: docs/runbook.md says it' % (
        words_of_the_role,)
