"""The stand-in systemctl (tests/standins) answers for units of files as systemctl does, and for units it does not
know as systemctl does: the tests of the local timer rely on both."""

import json
import os
import subprocess
import sys

import pytest

from tests.support.standins import STANDINS

TIMER = '[Unit]\nDescription=t\n[Timer]\nOnCalendar=*:0/5\n[Install]\nWantedBy=timers.target\n'
SERVICE = '[Unit]\nDescription=s\n[Service]\nType=oneshot\nExecStart=/bin/true\n'


@pytest.fixture
def systemctl(tmp_path):
    units = tmp_path / 'etc'
    units.mkdir()
    (units / 'w.timer').write_text(TIMER)
    (units / 'w.service').write_text(SERVICE)
    config = tmp_path / 'standins.json'
    config.write_text(json.dumps({'control_url': 'http://127.0.0.1:1', 'unit_dirs': [str(units)], 'services': {}}))
    env = dict(os.environ, MODELOPS_STANDIN_CONFIG=str(config), MODELOPS_STANDIN_LOG=str(tmp_path / 'log'),
               MODELOPS_STANDIN_PYTHON=sys.executable)

    def run(*argv):
        return subprocess.run([os.path.join(STANDINS, 'systemctl')] + list(argv), env=env, capture_output=True,
                              text=True, timeout=30, check=False)
    run.units = units
    run.log = tmp_path / 'log'
    return run


def test_a_unit_it_does_not_know_is_answered_as_systemctl_answers_it(systemctl):
    proc = systemctl('show', 'nope.service', '--property=LoadState', '--property=ActiveState')
    assert (proc.returncode, proc.stdout) == (0, 'LoadState=not-found\nActiveState=inactive\n')
    proc = systemctl('is-enabled', 'nope.timer')
    assert (proc.returncode, proc.stderr) == (1, 'Failed to get unit file state for nope.timer: No such file or directory\n')
    proc = systemctl('enable', '--now', 'nope.timer')
    assert (proc.returncode, proc.stderr) == (1, 'Failed to enable unit: Unit file nope.timer does not exist.\n')
    proc = systemctl('disable', 'nope')
    assert (proc.returncode, proc.stderr) == (1, 'Failed to disable unit: Unit file nope.service does not exist.\n')
    proc = systemctl('start', 'nope.timer')
    assert (proc.returncode, proc.stderr) == (5, 'Failed to start nope.timer: Unit nope.timer not found.\n')
    assert sorted(os.listdir(str(systemctl.units))) == ['w.service', 'w.timer']  # nothing linked, nothing made


def test_enable_now_links_the_unit_into_its_target_and_starts_it_disable_undoes_both(systemctl):
    show = ('show', 'w.timer', '--property=LoadState,UnitFileState,ActiveState')
    assert systemctl(*show).stdout == 'LoadState=loaded\nUnitFileState=disabled\nActiveState=inactive\n'
    assert systemctl('is-enabled', 'w.timer').returncode == 1
    proc = systemctl('enable', '--now', 'w.timer')
    link = systemctl.units / 'timers.target.wants' / 'w.timer'
    assert proc.returncode == 0 and proc.stderr == 'Created symlink %s \u2192 %s.\n' % (link, systemctl.units / 'w.timer')
    assert os.readlink(str(link)) == str(systemctl.units / 'w.timer')
    assert systemctl(*show).stdout == 'LoadState=loaded\nUnitFileState=enabled\nActiveState=active\n'
    assert (systemctl('is-enabled', 'w.timer').stdout, systemctl('is-active', 'w.timer').returncode) == ('enabled\n', 0)
    assert 'w.timer' in systemctl('list-timers').stdout
    proc = systemctl('disable', '--now', 'w.timer')
    assert proc.returncode == 0 and proc.stderr == 'Removed "%s".\n' % link and not os.path.lexists(str(link))
    assert systemctl(*show).stdout == 'LoadState=loaded\nUnitFileState=disabled\nActiveState=inactive\n'
    # A unit without an [Install] section is static: enabled by what wants it, never linked.
    assert systemctl('is-enabled', 'w.service').stdout == 'static\n'
    calls = [json.loads(line)['argv'] for line in systemctl.log.read_text().splitlines()]
    assert ['systemctl', 'enable', '--now', 'w.timer'] in calls and ['systemctl', 'disable', '--now', 'w.timer'] in calls


def test_a_oneshot_service_started_has_run_once_and_is_inactive_again(systemctl):
    assert systemctl('start', 'w.service').returncode == 0
    out = systemctl('show', 'w.service', '--timestamp=unix', '--property=ActiveState,Result,ExecMainStartTimestamp').stdout
    lines = out.splitlines()
    assert lines[:2] == ['ActiveState=inactive', 'Result=success'] and lines[2].startswith('ExecMainStartTimestamp=@')
