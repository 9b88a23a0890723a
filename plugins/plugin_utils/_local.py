# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The watchdog as a systemd timer on the vLLM host itself (the role modelops.vllm.local_timer): pure functions.

Private to this collection; controller side (the filters ``local_settings`` and ``local_status``).

* ``settings``: the ``vllm_*`` settings of the install's run that the timer's watchdog reads (the inventory
  conventions, the watchdog role's options, the check's timings), for the timer's own inventory;
* ``restarts``: what the watchdog will restart there (the systemd units, the methods), and what the install cannot
  give its user the right to do;
* ``show``: the text of ``systemctl show`` as a dict; ``status``: the timer and its last run, in one line.
"""

from __future__ import annotations

import re
import time

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.modelops.vllm.plugins.plugin_utils import _variables

# The watchdog's settings that the inventory's vllm_check_* give it: every vllm_check_* its defaults read
# (roles/watchdog/defaults/main.yml; test_local.py keeps the two equal).
CHECK_TIMINGS = ('vllm_check_interval', 'vllm_check_probe_timeout', 'vllm_check_metrics_timeout',
                 'vllm_check_freeze_limit')
# Set by the install itself in the timer's inventory, never copied: where the state is, and no privilege escalation
# (the timer runs as its own user).
SET_BY_INSTALL = ('vllm_watchdog_state_dir', 'vllm_watchdog_become', 'vllm_watchdog_hosts', 'vllm_watchdog_one_host')
UNIT_SUFFIXES = ('.service', '.socket', '.target', '.timer', '.mount', '.scope', '.slice', '.path', '.swap')
# What `systemctl show` prints for a time that is not set.
NO_TIME = ('', 'n/a', '0', 'infinity', '@0')


def known_names():
    """The names whose values the timer's watchdog reads: the inventory conventions, the watchdog role's options and
    the check's timings; not those the install sets itself."""
    names = set(name for name, (spec, group) in _variables.CONVENTIONS.items() if group == 'inventory')
    names.update(_variables.role_options('watchdog'))
    names.update(CHECK_TIMINGS)
    return names - set(SET_BY_INSTALL)


def settings(variables, names=None):
    """{name: value} of the known settings that ``variables`` (a host's variables: inventory, extra vars) sets, each
    of the type its spec says (``-e vllm_check_interval=1`` is the number 1.0, not the string '1'); as given when a
    value does not validate (validate_variables says what is wrong)."""
    wanted = known_names() if names is None else set(names)
    values = dict((name, variables[name]) for name in sorted(wanted) if name in variables)
    spec = dict((name, one) for name, one in _variables.specs_of(('inventory', 'check', 'watchdog')).items()
                if name in values)
    result = ArgumentSpecValidator(spec).validate(dict((name, values[name]) for name in spec))
    if not result.error_messages:
        values.update((name, result.validated_parameters[name]) for name in spec)
    return values


def unit_name(service):
    """A systemd unit as systemd names it: ``vllm`` is ``vllm.service``."""
    service = str(service)
    return service if service.endswith(UNIT_SUFFIXES) else service + '.service'


def restarts(values, user):
    """What the timer's watchdog restarts, from its settings: ``units`` (the systemd units, each once), ``methods``,
    ``groups`` (what its user must be a member of: ``docker`` for the docker methods) and ``problems`` (sentences:
    what the install cannot give a user of its own)."""
    default_method = values.get('vllm_watchdog_restart_method') or 'systemd'
    default_service = values.get('vllm_watchdog_service') or 'vllm'
    instances = values.get('vllm_watchdog_instances') or values.get('vllm_instances') or []
    pairs = []
    if isinstance(instances, (list, tuple)) and instances:
        for item in instances:
            item = item if isinstance(item, dict) else {}
            pairs.append((item.get('restart_method') or default_method, item.get('service') or default_service))
    else:
        pairs.append((default_method, default_service))
    units, methods, groups, problems = [], [], [], []
    for method, service in pairs:
        if method not in methods:
            methods.append(method)
        if method == 'systemd' and unit_name(service) not in units:
            units.append(unit_name(service))
        if method in ('docker', 'compose') and 'docker' not in groups:
            groups.append('docker')
        if method == 'command' and user != 'root':
            problems.append('the restart method command runs a command of your own, and the install cannot know '
                            'what it needs: run the timer as root (vllm_local_user: root), or use systemd')
    return {'units': units, 'methods': methods, 'groups': groups, 'problems': problems}


def show(text):
    """``systemctl show`` of one unit as {property: value}."""
    out = {}
    for line in str(text or '').splitlines():
        key, sep, value = line.partition('=')
        if sep and re.match(r'^[A-Za-z]+$', key):
            out[key] = value.strip()
    return out


def when(value):
    """A time as ``systemctl show --timestamp=unix`` prints it (``@1796004614``), in UTC; None when it is not set."""
    value = str(value or '').strip()
    if value in NO_TIME:
        return None
    if value.startswith('@'):
        try:
            return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(float(value[1:])))
        except (ValueError, OverflowError, OSError):
            return None
    return ' '.join(value.split())[:60]


def status(timer, service, unit):
    """The timer and its service's last run: {ok, line, why}. ``timer`` and ``service``: ``show`` of each."""
    name = '%s.timer' % unit
    if timer.get('LoadState') in (None, '', 'not-found'):
        return {'ok': False, 'why': 'not installed',
                'line': '%s is not installed on this host (ansible-playbook modelops.vllm.local_install installs it)'
                        % name}
    problems = []
    if timer.get('UnitFileState') != 'enabled':
        problems.append('not enabled (%s): it does not start at boot; systemctl enable --now %s'
                        % (timer.get('UnitFileState') or '?', name))
    if timer.get('ActiveState') != 'active':
        problems.append('not active (%s): it runs nothing; systemctl start %s' % (timer.get('ActiveState') or '?', name))
    ran = when(service.get('ExecMainStartTimestamp'))
    result = service.get('Result') or '?'
    if ran and result != 'success':
        problems.append('its last run (%s) failed (%s, exit status %s): a human is needed, or the watchdog could not '
                        'run; the lines below say why, journalctl -u %s.service says more'
                        % (ran, result, service.get('ExecMainStatus') or '?', unit))
    said = 'the last run %s (%s)' % (ran, result) if ran else 'no run yet'
    nxt = when(timer.get('NextElapseUSecRealtime'))
    said += '; the next %s' % nxt if nxt else ''
    if problems:
        return {'ok': False, 'why': '; '.join(problems), 'line': '%s: %s; %s' % (name, '; '.join(problems), said)}
    return {'ok': True, 'why': '', 'line': '%s: enabled and active; %s' % (name, said)}
