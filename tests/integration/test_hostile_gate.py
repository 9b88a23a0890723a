"""The hostile-input tier (issue 8), class 8: the gate fails closed.

``plugins/modules/watchdog_gate.py`` runs as a process (an args file, ``PYTHONPATH`` = the
collections root), the way Ansible runs it on the host, with its one-instance shorthand (``name``,
``state``, ``service``, settings). Every case starts from its own ``state_dir`` (mode 0700), and the
verdict is ``stuck`` with a service that has run for two hours, so that a gate that trusts a bad
input would answer ``restart``. What must hold:

* invalid settings (NaN, inf, zero or negative window, negative cooldown, ...) fail with a message;
* restart times in the future are ignored, and the reason says so;
* an ``Infinity``/NaN/garbage/empty history, or an impossible ``started_at``, never crash and never
  reset the restart budget (an unreadable history is ``action: fail``; a second run does not restart
  either);
* a FIFO as history, pause or lock file never hangs the gate;
* a lock (or history) file planted as a symlink is never followed: its target is never created;
* a group- or world-writable ``state_dir`` is refused;
* never a traceback.

The same through the role is in ``test_hostile_role.py`` (a damaged history there).
"""

import json
import os
import stat
import threading
import time

import pytest

from tests.support.paths import COLLECTIONS

from tests.support import hostile as h

GATE_TIMEOUT = 20.0  # a gate that has not ended by then hangs (it ends in well under a second)
HOUR = 3600.0


@pytest.fixture(scope='module', autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)


def _env():
    return dict(os.environ, PYTHONPATH=COLLECTIONS)


def running_long(now):
    return {'running': True, 'started_at': now - 2 * HOUR, 'status': 'active/running'}


def gate(state_dir, workdir, **args):
    now = time.time()
    params = dict({'name': 'vllm', 'state_dir': str(state_dir), 'state': 'stuck', 'reason': 'hostile test',
                   'service': running_long(now), 'lock_timeout': 5}, **args)
    return h.run_module('watchdog_gate', params, str(workdir), timeout=GATE_TIMEOUT, env=_env())


def base_problems(run):
    """Never a hang, never a traceback, always a result."""
    out = []
    if run.timed_out:
        out.append('the gate hung (killed after %.0f s)' % GATE_TIMEOUT)
        return out
    marker = h.traceback_in(run.stdout, run.stderr)
    if marker or h.has_exception_key(run.result or {}):
        out.append('a traceback: %s' % (run.stderr or run.stdout)[-400:].replace('\n', ' | '))
    if not isinstance(run.result, dict):
        out.append('no JSON result (rc %s): %s' % (run.returncode, (run.stderr or run.stdout)[-300:]))
    elif run.result.get('failed') and not run.result.get('msg'):
        out.append('failed without a message')
    return out


def action(run):
    result = run.result if isinstance(run.result, dict) else {}
    if result.get('failed'):
        return 'failed-task'
    return result.get('action')


def make_dir(path, mode=0o700):
    os.makedirs(str(path))
    os.chmod(str(path), mode)
    return path


def write_history(state_dir, content, name='vllm'):
    with open(os.path.join(str(state_dir), '%s.json' % name), 'w') as handle:
        handle.write(content if isinstance(content, str) else json.dumps(content))


def history(restarts, **more):
    return dict({'restarts': restarts, 'unknown_streak': 0, 'last_state': 'stuck', 'last_check': None}, **more)


# --------------------------------------------------------------------------- the cases

INVALID_SETTINGS = [
    ('restart_window nan', {'restart_window': 'nan'}),
    ('restart_window inf', {'restart_window': 'inf'}),
    ('restart_window 0', {'restart_window': 0}),
    ('restart_window -1', {'restart_window': -1}),
    ('cooldown -1', {'cooldown': -1}),
    ('cooldown nan', {'cooldown': 'nan'}),
    ('max_restarts -1', {'max_restarts': -1}),
    ('unknown_limit 0', {'unknown_limit': 0}),
    ('startup_grace nan', {'startup_grace': 'nan'}),
    ('startup_grace -1', {'startup_grace': -1}),
    ('lock_timeout nan', {'lock_timeout': 'nan'}),
]

UNREADABLE_HISTORIES = [
    ('history file "Infinity"', 'Infinity'),
    ('history file "NaN"', 'NaN'),
    ('history restarts [Infinity, Infinity, Infinity]', '{"restarts": [Infinity, Infinity, Infinity], "unknown_streak": 0}'),
    ('history restarts [NaN, NaN, NaN]', '{"restarts": [NaN, NaN, NaN], "unknown_streak": 0}'),
    ('history of garbage bytes', '\x00\xff\xfe garbage {{{'),
    ('history file empty', ''),
    ('history is a JSON list', '[]'),
    ('history cut short', '{"restarts": [1796'),
    ('history restarts are strings', '{"restarts": ["yesterday", "today", "now"], "unknown_streak": 0}'),
]

IMPOSSIBLE_STARTS = [
    ('started_at 2026-02-31T00:00:00Z', '2026-02-31T00:00:00Z'),
    ('started_at 2026-13-45T99:99:99Z', '2026-13-45T99:99:99Z'),
    ('started_at inf', 'inf'),
    ('started_at @nan', '@nan'),
    ('started_at 1e308', 1e308),
    ('started_at -1', '-1'),
    ('started_at 9999-12-31T23:59:59Z', '9999-12-31T23:59:59Z'),
    ('started_at 2026-11-30T02:10:52.123+99:99', '2026-11-30T02:10:52.123+99:99'),
]


def case_invalid_setting(tmp, args):
    state = make_dir(tmp / 'state')
    run = gate(state, tmp, **args)
    problems = base_problems(run)
    if not run.timed_out and action(run) != 'failed-task':
        problems.append('accepted: action %s (%s)' % (action(run), (run.result or {}).get('reason')))
    return problems


def case_future_restarts(tmp, restarts):
    state = make_dir(tmp / 'state')
    now = time.time()
    write_history(state, history([now + offset for offset in restarts]))
    run = gate(state, tmp)
    problems = base_problems(run)
    reason = str((run.result or {}).get('reason') or '')
    if action(run) != 'restart':
        problems.append('restart times in the future still block: action %s (%s)' % (action(run), reason))
    if 'future' not in reason.lower():
        problems.append('the reason does not say that times in the future were ignored: %s' % reason)
    return problems


def case_unreadable_history(tmp, content):
    state = make_dir(tmp / 'state')
    write_history(state, content)
    problems = []
    for attempt in (1, 2):
        run = gate(state, tmp)
        problems += ['run %d: %s' % (attempt, p) for p in base_problems(run)]
        if action(run) == 'restart':
            problems.append('run %d: restart: an unreadable history was taken for a fresh budget (%s)'
                            % (attempt, (run.result or {}).get('reason')))
        elif attempt == 1 and action(run) not in ('fail', 'failed-task'):
            problems.append('run 1: action %s, expected fail (a human must look at an unreadable history)'
                            % action(run))
    return problems


def case_impossible_start(tmp, started_at):
    state = make_dir(tmp / 'state')
    now = time.time()
    write_history(state, history([now - 3 * HOUR, now - 2 * HOUR, now - 1 * HOUR]))  # the budget is spent
    run = gate(state, tmp, service={'running': True, 'started_at': started_at, 'status': 'active/running'})
    problems = base_problems(run)
    if action(run) == 'restart':
        problems.append('restart although the budget is spent (%s)' % (run.result or {}).get('reason'))
    return problems


def case_fifo(tmp, filename):
    state = make_dir(tmp / 'state')
    os.mkfifo(os.path.join(str(state), filename))
    run = gate(state, tmp)
    problems = base_problems(run)
    if action(run) == 'restart' and filename.endswith('.json'):
        problems.append('restart with a FIFO as the history')
    return problems


def case_symlink_lock(tmp, filename):
    state = make_dir(tmp / 'state')
    outside = tmp / 'outside'
    outside.mkdir()
    target = outside / 'planted-target'
    os.symlink(str(target), os.path.join(str(state), filename))
    run = gate(state, tmp)
    problems = base_problems(run)
    if os.path.lexists(str(target)):
        problems.append('the symlink was followed: %s was created' % target)
    return problems


def case_symlink_history_outside(tmp):
    state = make_dir(tmp / 'state')
    victim = tmp / 'victim.json'
    original = json.dumps(history([]))
    victim.write_text(original)
    os.symlink(str(victim), os.path.join(str(state), 'vllm.json'))
    run = gate(state, tmp)
    problems = base_problems(run)
    if victim.read_text() != original:
        problems.append('the history symlink was followed: the file it points to was written')
    return problems


def case_writable_state_dir(tmp, mode):
    state = make_dir(tmp / 'state', mode)
    os.chmod(str(state), mode)  # past the umask
    run = gate(state, tmp)
    problems = base_problems(run)
    if action(run) != 'failed-task':
        problems.append('a state_dir with mode %o was used: action %s' % (stat.S_IMODE(os.stat(str(state)).st_mode),
                                                                          action(run)))
    if os.path.exists(os.path.join(str(state), 'vllm.json')):
        problems.append('a history was written into a state_dir that others can write')
    return problems


def all_cases():
    cases = []
    for name, args in INVALID_SETTINGS:
        cases.append((name, case_invalid_setting, (args,)))
    cases.append(('a restart time one hour in the future', case_future_restarts, ([HOUR],)))
    cases.append(('three restart times in the future (a spent budget if trusted)', case_future_restarts,
                  ([5 * 60.0, 2 * HOUR, 30 * 24 * HOUR],)))
    for name, content in UNREADABLE_HISTORIES:
        cases.append((name, case_unreadable_history, (content,)))
    for name, value in IMPOSSIBLE_STARTS:
        cases.append((name, case_impossible_start, (value,)))
    for filename in ('vllm.json', 'paused', 'vllm.paused', 'vllm.lock'):
        cases.append(('a FIFO as %s' % filename, case_fifo, (filename,)))
    cases.append(('vllm.lock planted as a symlink to a path that does not exist', case_symlink_lock, ('vllm.lock',)))
    cases.append(('vllm.json planted as a symlink to a path that does not exist', case_symlink_lock, ('vllm.json',)))
    cases.append(('vllm.json planted as a symlink to a file outside', case_symlink_history_outside, ()))
    for mode in (0o777, 0o1777, 0o775, 0o770):
        cases.append(('state_dir mode %o' % mode, case_writable_state_dir, (mode,)))
    return cases


def test_the_gate_fails_closed(tmp_path):
    # The control: a clean state_dir, stuck, running for two hours: the gate does say restart.
    control = make_dir(tmp_path / 'control' / 'state')
    run = gate(control, tmp_path / 'control')
    assert action(run) == 'restart' and not base_problems(run), run

    cases = all_cases()
    results = [None] * len(cases)

    def work(indexes):
        for index in indexes:
            name, func, args = cases[index]
            tmp = tmp_path / ('case%02d' % index)
            tmp.mkdir()
            try:
                results[index] = func(tmp, *args)
            except Exception as exc:  # noqa: BLE001 - a broken case is reported with the others
                results[index] = ['the test case itself raised %s: %s' % (type(exc).__name__, exc)]

    # Two workers: each case is a process that either ends at once or hangs until GATE_TIMEOUT.
    threads = [threading.Thread(target=work, args=(range(i, len(cases), 2),)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    violations = h.Violations()
    for (name, dummy, dummy2), problems in zip(cases, results):
        violations.check(8, name, problems or [])
    violations.assert_none()
