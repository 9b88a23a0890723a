# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The variables modelops.vllm knows, and what is wrong with the ones an inventory sets.

One source of truth, two parts:

* the options of the roles, read from their ``meta/argument_specs.yml`` (what ``ansible-doc -t role``
  shows);
* ``CONVENTIONS`` below: the inventory conventions of docs/fleet.md, the settings of the shipped
  playbooks (their headers), the variables of the Prometheus template and of the rulebook, and the
  facts the collection sets.

tests/unit/plugins/plugin_utils/test_variables.py checks that every ``vllm_*`` variable the
collection's YAML reads is one of them, and that docs/fleet.md's table lists the conventions.
Controller side only (the action ``modelops.vllm.validate_variables``); pure functions.
"""

from __future__ import annotations

import difflib
import json
import os
import re

import yaml

from ansible_collections.modelops.vllm.plugins.module_utils._settings import HEALTH_LIMITS, ROLLOUT_LIMITS, WATCHDOG_LIMITS
from ansible_collections.modelops.vllm.plugins.module_utils._types import range_problems
from ansible_collections.modelops.vllm.plugins.module_utils._urls import url_mistake
from ansible_collections.modelops.vllm.plugins.plugin_utils._printable import as_read, escape, name as shown_name, oddities

ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'roles')

# A variable that looks meant for this collection: vllm_..., and the usual slips of the prefix itself
# (vlm_url, vlllm_url, VLLM_URL).
LOOKS_OURS = re.compile(r'^v+l+m+_', re.IGNORECASE)

# name: (argument spec of the value, group). The groups: inventory (the conventions of docs/fleet.md), check
# (playbooks/fleet_check.yml and check.yml, their header), watchdog (playbooks/watchdog.yml's play settings),
# history (playbooks/history.yml's settings), local_timer (playbooks/local_*.yml's settings),
# prometheus (the variables of extensions/prometheus/vllm.rules.yml.j2), eda (the rulebook's), fact (set by the
# collection: a fact cache keeps them between runs; never a typo, never validated). A value is validated by its
# spec, as the roles' options are by theirs.
CONVENTIONS = {
    # The inventory conventions (docs/fleet.md), read by the check playbooks and, as defaults, by the roles.
    'vllm_url': ({'type': 'str'}, 'inventory'),
    'vllm_kind': ({'type': 'str', 'choices': ['backend', 'proxy']}, 'inventory'),
    'vllm_api_key': ({'type': 'str', 'no_log': True}, 'inventory'),
    'vllm_model': ({'type': 'str'}, 'inventory'),
    'vllm_instances': ({'type': 'list', 'elements': 'dict'}, 'inventory'),
    # One instance across hosts, on its head (docs/multinode.md).
    'vllm_ranks': ({'type': 'list', 'elements': 'dict'}, 'inventory'),
    'vllm_launch': ({'type': 'str', 'choices': ['', 'nnodes', 'ray']}, 'inventory'),
    'vllm_validate_certs': ({'type': 'bool'}, 'inventory'),
    'vllm_ca_path': ({'type': 'str'}, 'inventory'),
    'vllm_strict_variables': ({'type': 'bool'}, 'inventory'),
    'vllm_own_variables': ({'type': 'list', 'elements': 'str'}, 'inventory'),
    # playbooks/fleet_check.yml and check.yml (their header, docs/fleet.md).
    'vllm_check_hosts': ({'type': 'str'}, 'check'),
    'vllm_check_from': ({'type': 'str', 'choices': ['controller', 'host']}, 'check'),
    'vllm_check_interval': ({'type': 'float'}, 'check'),
    'vllm_check_probe_timeout': ({'type': 'float'}, 'check'),
    'vllm_check_metrics_timeout': ({'type': 'float'}, 'check'),
    'vllm_check_freeze_limit': ({'type': 'float'}, 'check'),
    'vllm_check_freeze_wait': ({'type': 'float'}, 'check'),
    'vllm_check_workers': ({'type': 'int'}, 'check'),
    'vllm_check_background_dir': ({'type': 'str'}, 'check'),
    'vllm_check_fail_states': ({'type': 'list', 'elements': 'str'}, 'check'),
    # playbooks/watchdog.yml's play settings (its header).
    'vllm_watchdog_hosts': ({'type': 'str'}, 'watchdog'),
    'vllm_watchdog_become': ({'type': 'bool'}, 'watchdog'),
    'vllm_watchdog_one_host': ({'type': 'bool'}, 'watchdog'),
    # playbooks/history.yml's settings (its header).
    'vllm_history_since': ({'type': 'str'}, 'history'),
    'vllm_history_show': ({'type': 'str', 'choices': ['changes', 'actions', 'all']}, 'history'),
    # playbooks/local_install.yml, local_status.yml and local_remove.yml (their header).
    'vllm_local_become': ({'type': 'bool'}, 'local_timer'),
    # extensions/prometheus/vllm.rules.yml.j2 (docs/prometheus.md).
    'vllm_prometheus_stuck_seconds': ({'type': 'int'}, 'prometheus'),
    'vllm_prometheus_check_seconds': ({'type': 'int'}, 'prometheus'),
    'vllm_prometheus_progress_window_seconds': ({'type': 'int'}, 'prometheus'),
    'vllm_prometheus_stall_seconds': ({'type': 'int'}, 'prometheus'),
    'vllm_prometheus_stall_recent_seconds': ({'type': 'int'}, 'prometheus'),
    'vllm_prometheus_restart_window_seconds': ({'type': 'int'}, 'prometheus'),
    'vllm_prometheus_down_seconds': ({'type': 'int'}, 'prometheus'),
    'vllm_prometheus_target_matcher': ({'type': 'str'}, 'prometheus'),
    'vllm_prometheus_target_labels': ({'type': 'list', 'elements': 'str'}, 'prometheus'),
    'vllm_prometheus_watchdog_stale_seconds': ({'type': 'int'}, 'prometheus'),
    # extensions/eda/rulebooks/vllm_stuck.yml (docs/prometheus.md).
    'vllm_eda_host': ({'type': 'str'}, 'eda'),
    'vllm_eda_port': ({'type': 'int'}, 'eda'),
    'vllm_eda_token': ({'type': 'str', 'no_log': True}, 'eda'),
    'vllm_eda_inventory': ({'type': 'str'}, 'eda'),
    'vllm_health': (None, 'fact'),  # modelops.vllm.health
    'vllm_health_servers': (None, 'fact'),
    'vllm_check': (None, 'fact'),  # playbooks/fleet_check.yml
    'vllm_checks': (None, 'fact'),
    'vllm_watchdog_results': (None, 'fact'),  # modelops.vllm.watchdog_gate
}

NOT_SET = object()

# The variables that hold a server's base URL, and the lists of instances whose items hold one in ``url``: a URL that
# names an endpoint (http://host:8000/v1, .../metrics) or has no scheme is named before any check runs.
URL_VARIABLES = ('vllm_url', 'vllm_watchdog_url', 'vllm_rollout_url')
INSTANCE_LISTS = ('vllm_instances', 'vllm_watchdog_instances')

# The variables that say what a restart acts on (the unit, the container, the command, the instances of a host). A
# misspelled one leaves its default in effect, and on a host with two servers that default is the other server:
# where a run restarts (the watchdog, the rollout), such a name is an error on its host, never a warning. (A
# misspelled URL only leaves the check on the default URL, and the watchdog restarts nothing it cannot show serves
# the URL it judged: a warning.)
TARGETS = ('vllm_instances', 'vllm_watchdog_instances', 'vllm_ranks', 'vllm_watchdog_ranks', 'vllm_watchdog_service',
           'vllm_watchdog_restart_method', 'vllm_watchdog_restart_command', 'vllm_watchdog_compose_project_dir',
           'vllm_rollout_service', 'vllm_rollout_method', 'vllm_rollout_command', 'vllm_rollout_compose_project_dir')

# The numbers whose range the collection's catalogue of settings gives, by the prefix of their variables: the fleet
# check's settings are the health module's options, the roles' their own.
RANGES = (('vllm_check_', HEALTH_LIMITS), ('vllm_watchdog_', WATCHDOG_LIMITS), ('vllm_rollout_', ROLLOUT_LIMITS))

# Values never validated here, so never shown in a message.
SECRET = re.compile(r'(api_key|token|password|secret)', re.IGNORECASE)

# The roles whose options are known; each entry point's options (the rollout's preflight shares main's).
ROLES = ('watchdog', 'rollout', 'local_timer')

_SPECS = {}


def role_options(role, roles_dir=ROLES_DIR):
    """{name: spec} of a role's options (every entry point), from its meta/argument_specs.yml (read once)."""
    key = (roles_dir, role)
    if key not in _SPECS:
        path = os.path.join(roles_dir, role, 'meta', 'argument_specs.yml')
        with open(path) as handle:
            data = yaml.load(handle, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader)) or {}
        options = {}
        for entry in (data.get('argument_specs') or {}).values():
            options.update((entry or {}).get('options') or {})
        _SPECS[key] = options
    return _SPECS[key]


def known_specs(roles_dir=ROLES_DIR):
    """{name: spec or None} of every variable the collection knows."""
    out = dict((name, spec) for name, (spec, group) in CONVENTIONS.items())
    for role in ROLES:
        out.update(role_options(role, roles_dir))
    return out


GROUPS = ('inventory', 'check', 'watchdog', 'rollout', 'history', 'local_timer')


def specs_of(groups, roles_dir=ROLES_DIR):
    """{name: validation spec} of the variables of ``groups`` (a role's name is its options, and for the
    watchdog its playbook's settings too): the values a run of those parts reads."""
    out = {}
    for name, (spec, group) in CONVENTIONS.items():
        if spec and group in groups:
            out[name] = dict(spec)
    for role in ROLES:
        if role in groups:
            out.update((name, validation_spec(spec)) for name, spec in role_options(role, roles_dir).items())
    return out


def looks_ours(name):
    """Whether ``name`` looks meant for this collection, as the eye reads it (an invisible character or a look-alike
    letter in front of it too: ``\\ufeffvllm_url``, ``\\u03bdllm_url``)."""
    return bool(LOOKS_OURS.match(name) or LOOKS_OURS.match(as_read(name)))


def closest(name, known):
    """The known name closest to ``name`` as the eye reads it (``as_read``), or None when none is close: the
    name a human who typed it meant."""
    lowered = as_read(name).lower()
    found = difflib.get_close_matches(lowered, sorted(known), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_names(names_by_host, known, own=()):
    """[{name, hosts, suggestion}] for the names that look like this collection's and are not known
    (nor in ``own``), in the order of the hosts; ``names_by_host`` is [(host, iterable of names)]."""
    seen = {}
    for host, names in names_by_host:
        for name in names:
            if not isinstance(name, str) or not looks_ours(name) or name in known or name in own:
                continue
            entry = seen.setdefault(name, {'name': name, 'hosts': [], 'suggestion': closest(name, known)})
            if host not in entry['hosts']:
                entry['hosts'].append(host)
    return sorted(seen.values(), key=lambda e: e['name'])


def hosts_text(hosts, limit=5):
    """'gb10-01', 'gb10-01, gb10-02', or 'gb10-01, ... and 95 more (100 hosts)'; each name as a terminal may show
    it (``escape``)."""
    hosts = [escape(host) for host in hosts]
    if len(hosts) <= limit:
        return ', '.join(hosts)
    return '%s and %d more (%d hosts)' % (', '.join(hosts[:limit]), len(hosts) - limit, len(hosts))


def _odd(variable):
    """'' or ' (its name has an invisible character (\\u200b ZERO WIDTH SPACE))': what a screen does not show of
    a name."""
    said = oddities(variable)
    return ' (its name has %s)' % said if said else ''


def unknown_message(entry):
    """One line: the name (every character that is not printable ASCII escaped, and said), where it is set, and the
    closest known name: ``vllm_watchdog_reboot\\u200b`` is never "did you mean" a name that looks the same."""
    hint = ('did you mean %s?' % entry['suggestion']) if entry['suggestion'] else 'no variable of it is close.'
    return ('%s (set on %s) is not a variable of modelops.vllm, so nothing reads it%s: %s'
            % (shown_name(entry['name']), hosts_text(entry['hosts']), _odd(entry['name']), hint))


def target_message(entry, values, defaults):
    """One line for a misspelled name whose closest known name says what a restart acts on (``TARGETS``): the typo,
    what it holds, and what the run would act on instead. ``values``: {host: {name: value}} of the names set;
    ``defaults``: {name: default} of the roles' options."""
    meant = entry['suggestion']
    host = entry['hosts'][0]
    given = values.get(host, {}).get(entry['name'], NOT_SET)
    current = values.get(host, {}).get(meant, NOT_SET)
    if current is NOT_SET:
        default = defaults.get(meant, NOT_SET)
        current = 'its default %s' % shown(default) if default is not NOT_SET and '{{' not in str(default) \
            else 'its default'
    else:
        current = shown(current)
    holding = '' if given is NOT_SET or SECRET.search(entry['name']) else ' = %s' % shown(given)
    return ('%s%s (set on %s) is not a variable of modelops.vllm%s: did you mean %s? That one says what a restart acts '
            'on: the run would act on what %s says now (%s), on a host with two servers the other one, so nothing is '
            'checked or restarted on this host until it is spelled %s'
            % (shown_name(entry['name']), holding, hosts_text(entry['hosts']), _odd(entry['name']), meant, meant,
               current, meant))


def targets(entries):
    """The entries (of ``unknown_names``) whose closest known name is one of ``TARGETS``."""
    return [entry for entry in entries if entry['suggestion'] in TARGETS]


def url_problems(name, value):
    """What is wrong with the URLs a variable holds (``URL_VARIABLES``, or the items of ``INSTANCE_LISTS``), one
    sentence each, naming the variable (and the instance)."""
    out = []
    if name in URL_VARIABLES and isinstance(value, str) and '{{' not in value:
        mistake = url_mistake(value)
        if mistake:
            out.append('%s: %s' % (name, escape(mistake, keep='')))
    elif name in INSTANCE_LISTS and isinstance(value, list):
        for item in value:
            url = item.get('url') if isinstance(item, dict) else None
            if isinstance(url, str) and '{{' not in url:
                mistake = url_mistake(url)
                if mistake:
                    out.append('%s[%s]: %s' % (name, escape(item.get('name', '?'), keep=''), escape(mistake, keep='')))
    return out


def range_of(name, value):
    """What is wrong with a number a variable holds, from the catalogue's range of its setting (``RANGES``): a
    sentence naming the variable, or none."""
    for prefix, limits in RANGES:
        if name.startswith(prefix):
            return range_problems({name[len(prefix):]: value}, limits, name=prefix + '%s')
    return []


def native(value):
    """The value as plain Python types (what the templating returns may be tagged subclasses)."""
    if isinstance(value, dict):
        return dict((native(k), native(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [native(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def shown(value, limit=80):
    """A value as it reads in a message: JSON, cut at ``limit`` characters."""
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + '...'


def problem(name, spec, value, errors):
    """One line for a value that failed its spec: the variable, what is allowed, the value."""
    for error in errors:
        if 'must be one of' in str(error):  # Ansible's own line names all three already (the value as it was set)
            return escape(' '.join(str(error).split()))
    want = spec.get('type', 'str')
    if spec.get('elements'):
        want += ' of %s' % spec['elements']
    if spec.get('options'):  # never the value: an item may hold an api_key
        return 'value of %s must be a %s with the keys %s (see ansible-doc -t role)' % (
            name, want, ', '.join(sorted(spec['options'])))
    if spec.get('choices'):
        want += ' (one of: %s)' % ', '.join(str(c) for c in spec['choices'])
    return 'value of %s must be a %s, got: %s' % (name, want, shown(value))


def value_problems(values_by_host, specs, validate, name_hosts=True):
    """[message] for the values that do not match their spec, one per distinct problem, naming the hosts.

    ``values_by_host`` is [(host, {name: value})]; ``validate(spec, values)`` returns the error messages of an
    Ansible argument spec validation. Values of no_log options are never validated (never shown)."""
    found = {}
    for host, values in values_by_host:
        for name in sorted(values):
            spec = specs.get(name)
            if not spec or spec.get('no_log') or SECRET.search(name):
                continue
            value = native(values[name])
            errors = validate({name: spec}, {name: value})
            lines = [problem(name, spec, value, errors)] if errors else url_problems(name, value) + range_of(name, value)
            for line in lines:
                hosts = found.setdefault(line, [])
                if host not in hosts:
                    hosts.append(host)
    return [('%s (on %s)' % (line, hosts_text(hosts))) if name_hosts else line for line, hosts in found.items()]


def validation_spec(spec):
    """The part of a role option's spec that ArgumentSpecValidator takes (no description, no default:
    only the values that are set are validated)."""
    keep = ('type', 'choices', 'elements', 'no_log')
    out = dict((key, spec[key]) for key in keep if key in spec)
    if spec.get('options') and spec.get('type') in ('dict', 'list'):
        out['options'] = dict((name, validation_spec(sub)) for name, sub in spec['options'].items())
    return out
