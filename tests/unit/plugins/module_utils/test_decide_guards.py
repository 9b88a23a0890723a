"""The decision as ordered guards (_decide.GUARDS): for each, a case that it decides, and which guard decides it.

test_decide.py checks every decision's action and words through decide(); this file pins which guard decides, so
that a guard moved, merged or left out of GUARDS is named."""

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _decide
from ansible_collections.modelops.vllm.plugins.module_utils._decide import GUARDS
from ansible_collections.modelops.vllm.plugins.module_utils._types import FAIL, NONE, REBOOT, RESTART

NOW = 1000000.0
LONG = {'running': True, 'started_at': NOW - 7200, 'status': 'active/running'}
STOPPED = {'running': False, 'started_at': NOW - 7200, 'status': 'failed'}
PROVEN = {'listens': True, 'unit': 'the systemd unit vllm', 'process': 'its main process 4242 (vllm serve)',
          'endpoint': '127.0.0.1:8000', 'can_prove': True}
XID = {'time': NOW - 60, 'kind': 'xid', 'line': 'NVRM: Xid (PCI:0000:01:00): 79'}


def history(**values):
    hist = _decide.empty_history()
    hist.update(values)
    return hist


def decided_by(state, service=None, hist=None, settings=None, **kwargs):
    """(the name of the guard that decided, or 'restart', the decision)."""
    kwargs.setdefault('url_proof', PROVEN)
    case = _decide._Case(state, LONG if service is None else service, hist, NOW, settings or {},  # pylint: disable=protected-access
                         kwargs.get('paused', False), kwargs.get('process_start'), kwargs.get('failed_restart'),
                         kwargs.get('url', 'http://127.0.0.1:8000'), kwargs['url_proof'], kwargs.get('kernel'))
    for guard in GUARDS:
        decided = guard(case)
        if decided is not None:
            return guard.__name__, decided
    return 'restart', _decide._restart(case)  # pylint: disable=protected-access


@pytest.mark.parametrize('guard, action, args', [
    ('_after_a_failed_restart', FAIL, dict(state='stuck', failed_restart={'at': NOW - 60, 'error': 'exit 1'})),
    ('_paused_on_purpose', NONE, dict(state='paused')),
    ('_unknown', NONE, dict(state='unknown')),
    ('_frozen', NONE, dict(state='frozen')),
    ('_not_restartable', NONE, dict(state='busy')),
    ('_watchdog_paused', NONE, dict(state='stuck', paused=True)),
    ('_starting', NONE, dict(state='stuck', service={'running': True, 'started_at': NOW - 60})),
    ('_starting', NONE, dict(state='down', service={'running': None, 'status': '?'})),
    ('_restarted_lately', NONE, dict(state='stuck', hist=history(restarts=[NOW - 60]))),
    ('_gpu_not_healthy', FAIL, dict(state='stuck', kernel=[XID], hist=history(healthy={'at': NOW - 3600}))),
    ('_gpu_not_healthy', REBOOT, dict(state='stuck', kernel=[XID], hist=history(healthy={'at': NOW - 3600}),
                                      settings={'reboot': True})),
    ('_hung_again', FAIL, dict(state='stuck', hist=history(
        restarts=[NOW - 1000], last_step={'step': 'restart', 'at': NOW - 1000, 'state': 'stuck'}))),
    ('_budget_spent', FAIL, dict(state='stuck', hist=history(restarts=[NOW - 5000, NOW - 4000, NOW - 3000]))),
    ('_cooling_down', NONE, dict(state='stuck', hist=history(restarts=[NOW - 1000]),
                                 settings={'rehang_window': 0, 'cooldown': 3000})),
    ('_not_shown_to_serve_the_url', FAIL, dict(state='stuck', url_proof={'listens': False, 'listening_on': ['x:1']})),
    ('restart', RESTART, dict(state='stuck')),
    ('restart', RESTART, dict(state='down', service=STOPPED)),
])
def test_each_guard_decides_its_case(guard, action, args):
    name, decision = decided_by(**args)
    assert (name, decision['action']) == (guard, action), decision['reason']
    # decide() is the guards in order, then the restart: the same decision.
    state = args.pop('state')
    service = args.pop('service', LONG)
    hist = args.pop('hist', None)
    settings = args.pop('settings', {})
    args.setdefault('url_proof', PROVEN)
    args.setdefault('url', 'http://127.0.0.1:8000')
    again = _decide.decide(state, service, hist, NOW, settings, **args)
    assert (again['action'], again['reason']) == (decision['action'], decision['reason'])


def test_every_guard_has_its_case_here():
    cases = set(name for name, dummy, dummy2 in test_each_guard_decides_its_case.pytestmark[0].args[1])
    assert cases - {'restart'} == set(guard.__name__ for guard in GUARDS)
