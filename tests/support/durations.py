"""A pytest plugin: every test's time, kept in a file and ranked at the end of the run.

``scripts/pytest-tier.sh`` loads it (``-p tests.support.durations``) for every pytest tier (unit,
integration, the version tier's unit). It writes ``.cache/durations/<tier>.json`` (or the file named by
``MODELOPS_DURATIONS``): each test's setup, call and teardown seconds, its CPU seconds (``cpu``: its
worker's own and that of the processes the worker reaped meanwhile, such as ``ansible-playbook`` runs and
servers stopped; a server of a class or module is counted where it is stopped), outcome and xdist worker, each
file's total, the run's wall time and the machine's load average at its start and end (the machine is
shared: a time means little without the load beside it). At the end it prints the slowest tests and the
slowest files. ``MODELOPS_DURATIONS_TOP`` sets how many (default 15). What went wrong is kept too
(``problems``: each failed or erroring test, collection error, internal error or interruption, with the first
line of its report: its crash message where pytest has one), so that ``scripts/run-tiers.sh`` can name them
at the end of ``make test``, where CI's log is cut.

Under pytest-xdist the controller writes the file (the workers send it their reports).
"""

import json
import os
import resource
import time

import pytest

from tests.support import paths

_PHASES = ('setup', 'call', 'teardown')


def _worker(report):
    node = getattr(report, 'node', None)
    gateway = getattr(node, 'gateway', None)
    return getattr(gateway, 'id', None) or 'main'


def _nodeid(report):
    # --dist loadgroup names an item "path::test[params]@group" (xdist's own rule: an @ after the parameters)
    nodeid = report.nodeid
    return nodeid[:nodeid.rfind('@')] if nodeid.rfind('@') > nodeid.rfind(']') else nodeid


def _crash(report):
    """The line that says why a report failed: its crash's message (first line) where pytest has one."""
    crash = getattr(report.longrepr, 'reprcrash', None)
    message = (getattr(crash, 'message', None) or '').strip()
    if message:
        return '%s:%s: %s' % (os.path.basename(str(crash.path)), crash.lineno, message.splitlines()[0])
    return report.longreprtext


def _cpu_seconds():
    """CPU seconds of this process and of every child it has reaped (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _measured(item, when):
    start = _cpu_seconds()
    yield
    item.stash.setdefault(_CPU, {})[when] = _cpu_seconds() - start


_CPU = pytest.StashKey()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _measured(item, 'setup')


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _measured(item, 'call')


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _measured(item, 'teardown')


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's CPU seconds ride on its report (user_properties cross from an xdist worker to the controller)."""
    outcome = yield
    seconds = item.stash.get(_CPU, {}).get(call.when)
    if seconds is not None:
        outcome.get_result().user_properties.append(('cpu_seconds', round(seconds, 3)))


class Durations:
    def __init__(self, config, path, tier):
        self.config = config
        self.path = path
        self.tier = tier
        self.tests = {}
        self.started = time.time()
        self.load_start = os.getloadavg()
        self.problems = []

    def _problem(self, nodeid, when, text):
        lines = [line.strip() for line in (text or '').splitlines() if line.strip()]
        self.problems.append({'nodeid': nodeid, 'when': when, 'line': (lines[0] if lines else '')[:300]})

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report):
        entry = self.tests.setdefault(_nodeid(report), {'setup': 0.0, 'call': 0.0, 'teardown': 0.0, 'cpu': 0.0,
                                                        'outcome': 'passed', 'worker': _worker(report)})
        if report.when in _PHASES:
            entry[report.when] += report.duration
            entry['cpu'] = round(entry['cpu'] + sum(value for key, value in report.user_properties
                                                    if key == 'cpu_seconds'), 3)
        if report.failed:
            entry['outcome'] = 'failed' if report.when == 'call' else 'error'
            self._problem(_nodeid(report), report.when, _crash(report))
        elif report.skipped and entry['outcome'] == 'passed':
            entry['outcome'] = 'skipped'
        entry['total'] = round(entry['setup'] + entry['call'] + entry['teardown'], 3)

    @pytest.hookimpl(trylast=True)
    def pytest_collectreport(self, report):
        if report.failed:
            self._problem(report.nodeid or '(collection)', 'collect', _crash(report))

    def pytest_internalerror(self, excrepr):
        self._problem('(pytest)', 'internal error', str(excrepr))

    def pytest_keyboard_interrupt(self, excinfo):
        self._problem('(pytest)', 'interrupted', excinfo.exconly())

    def files(self, key='total'):
        out = {}
        for nodeid, entry in self.tests.items():
            name = nodeid.split('::', 1)[0]
            out[name] = out.get(name, 0.0) + entry.get(key, 0.0)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def pytest_sessionfinish(self, session):
        wall = time.time() - self.started
        data = {
            'tier': self.tier,
            'args': list(self.config.invocation_params.args),
            'workers': getattr(self.config.option, 'numprocesses', None) or 0,
            'started': time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(self.started)),
            'wall_seconds': round(wall, 1),
            'load_average_start': [round(x, 2) for x in self.load_start],
            'load_average_end': [round(x, 2) for x in os.getloadavg()],
            'exit_status': int(session.exitstatus),
            'stopped': str(session.shouldstop or session.shouldfail or ''),
            'problems': self.problems,
            'test_seconds': round(sum(e['total'] for e in self.tests.values()), 1),
            'cpu_seconds': round(sum(e.get('cpu', 0.0) for e in self.tests.values()), 1),
            'files': {k: round(v, 1) for k, v in self.files().items()},
            'files_cpu': {k: round(v, 1) for k, v in self.files('cpu').items()},
            'tests': dict(sorted(self.tests.items(), key=lambda kv: -kv[1]['total'])),
        }
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + '.%d' % os.getpid()
        with open(tmp, 'w', encoding='utf-8') as handle:
            json.dump(data, handle, indent=1)
            handle.write('\n')
        os.replace(tmp, self.path)

    def pytest_terminal_summary(self, terminalreporter):
        top = int(os.environ.get('MODELOPS_DURATIONS_TOP', '15'))
        if not self.tests or top <= 0:
            return
        wall = time.time() - self.started
        rep = terminalreporter
        rep.section('durations (%s): %d tests, %.0f s of test time (%.0f s of CPU) in %.0f s, load average %s -> %s'
                    % (self.tier, len(self.tests), sum(e['total'] for e in self.tests.values()),
                       sum(e.get('cpu', 0.0) for e in self.tests.values()), wall,
                       '/'.join('%.2f' % x for x in self.load_start),
                       '/'.join('%.2f' % x for x in os.getloadavg())))
        cpu = self.files('cpu')
        rep.write_line('slowest files (wall, CPU):')
        for name, seconds in list(self.files().items())[:top]:
            rep.write_line('  %7.1f s %7.1f s  %s' % (seconds, cpu.get(name, 0.0), name))
        rep.write_line('slowest tests (setup + call + teardown; CPU):')
        for nodeid, entry in sorted(self.tests.items(), key=lambda kv: -kv[1]['total'])[:top]:
            rep.write_line('  %7.1f s %7.1f s  %s [%s]' % (entry['total'], entry.get('cpu', 0.0), nodeid, entry['worker']))
        rep.write_line('all of them: %s' % os.path.relpath(self.path))


def pytest_configure(config):
    if hasattr(config, 'workerinput'):  # an xdist worker: the controller records
        return
    tier = os.environ.get('MODELOPS_TIER', 'pytest')
    path = os.environ.get('MODELOPS_DURATIONS') or os.path.join(paths.REPO, '.cache', 'durations', tier + '.json')
    config.pluginmanager.register(Durations(config, path, tier), 'modelops-durations')
