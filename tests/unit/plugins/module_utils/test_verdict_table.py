"""What each verdict means to the collection is one row of _types.VERDICT_TABLE (issue 30): which verdicts serve (they
clear a failed restart), which the watchdog may restart for, which end every stall streak. Nothing else in the
Python spells a list of verdicts."""

import ast
import glob
import os

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _decide, _stall
from ansible_collections.modelops.vllm.plugins.module_utils._types import (
    RESETS_STALL, RESTARTABLE, SERVING, STATES, VERDICT_TABLE)

from tests.support.paths import REPO


def test_the_verdicts_and_what_they_mean():
    # The order is the modules' documented order (the gate's choices, the textfile's states).
    assert STATES == ('idle', 'busy', 'frozen', 'stuck', 'restarted', 'starting', 'down', 'sleeping', 'paused', 'up',
                      'unknown')
    assert SERVING == ('idle', 'busy', 'restarted', 'sleeping', 'paused', 'up')
    assert RESTARTABLE == ('stuck', 'down')
    assert RESETS_STALL == ('restarted', 'starting', 'sleeping', 'paused')
    assert all(len(row) == 4 and all(isinstance(flag, bool) for flag in row[1:]) for row in VERDICT_TABLE)
    assert not set(SERVING) & set(RESTARTABLE)


NOW = 1000000.0
PROVEN = {'listens': True, 'unit': 'the systemd unit vllm', 'process': 'its main process 4242 (vllm serve)',
          'endpoint': '127.0.0.1:8000', 'can_prove': True}
SERVICES = ({'running': True, 'started_at': NOW - 7200, 'status': 'active/running'},
            {'running': False, 'started_at': NOW - 7200, 'status': 'failed'})


@pytest.mark.parametrize('state', STATES)
def test_only_a_restartable_verdict_is_ever_restarted(state):
    """decide() for a unit proven to serve the URL, long started, running or stopped, no restart before: a restart
    follows a verdict of the table's restart column, and no other."""
    restarts = [_decide.decide(state, service, None, NOW, dict(_decide.DEFAULTS), url_proof=PROVEN)['action']
                for service in SERVICES]
    assert (_decide.RESTART in restarts) == (state in RESTARTABLE), (state, restarts)


@pytest.mark.parametrize('state', STATES)
def test_the_stall_memory_ends_every_streak_on_a_resetting_verdict(state):
    dummy, dummy2, summary = _stall.observe(None, [], state, 600)
    assert ('every streak ended' in summary.get('note', '')) == (state in RESETS_STALL), (state, summary)


def _verdict_lists(path):
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in STATES for e in node.elts):
            found.append((node.lineno, [e.value for e in node.elts]))
    return found


@pytest.mark.parametrize('path', sorted(
    path for path in glob.glob(os.path.join(REPO, 'plugins', '**', '*.py'), recursive=True)
    if not path.endswith(os.path.join('module_utils', '_types.py'))), ids=lambda path: os.path.relpath(path, REPO))
def test_no_other_file_spells_a_list_of_verdicts(path):
    assert _verdict_lists(path) == []
