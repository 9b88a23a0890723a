"""The catalogue of settings (module_utils/_settings.py) is the one place a setting's type, default and range are
written: the modules build their argument specs from it, and this test keeps what cannot be built from it equal to
it: the modules' documentation, the watchdog role's defaults and argument specs, and the rollout role's fallbacks
(issue 30)."""

import os
import re

import jinja2
import pytest
import yaml

from ansible_collections.modelops.vllm.plugins.module_utils import _settings as catalogue
from ansible_collections.modelops.vllm.plugins.module_utils._types import in_range

from tests.support.paths import REPO

# Which tables each module takes its options from (whole tables, or the names given).
MODULES = {
    'health': [catalogue.CHECK_SETTINGS, catalogue.MEMORY_OF_CHECKS, catalogue.HEALTH_SETTINGS],
    'health_results': [{'results_timeout': catalogue.GATE_SETTINGS['results_timeout']}],
    'restart': [catalogue.READY_SETTINGS, catalogue.MEMORY_SETTINGS, {'metrics_timeout': catalogue.CHECK_SETTINGS['metrics_timeout']}],
    'watchdog_gate': [catalogue.GUARD_RAILS, catalogue.GATE_SETTINGS],
}
TABLES = [catalogue.CHECK_SETTINGS, catalogue.MEMORY_OF_CHECKS, catalogue.READY_SETTINGS, catalogue.MEMORY_SETTINGS,
          catalogue.GUARD_RAILS, catalogue.GATE_SETTINGS, catalogue.ROLE_SETTINGS]
EVERY = {}
for _table in TABLES:
    EVERY.update(_table)


def _yaml(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def _documentation(module):
    with open(os.path.join(REPO, 'plugins', 'modules', module + '.py')) as handle:
        source = handle.read()
    return yaml.safe_load(re.search(r"DOCUMENTATION = r'''(.*?)'''", source, re.S).group(1))['options']


def _rendered(value, variables):
    """A role default as the role would have it with nothing set in the inventory (its templates rendered)."""
    for dummy in range(5):
        if not (isinstance(value, str) and '{{' in value):
            return value
        value = jinja2.Environment().from_string(value).render(**variables)
        if '{{' not in value:
            return yaml.safe_load(value)
    raise AssertionError('not rendered: %r' % value)


WATCHDOG_DEFAULTS = _yaml('roles', 'watchdog', 'defaults', 'main.yml')
WATCHDOG_SPECS = _yaml('roles', 'watchdog', 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
ROLE_SETTINGS = sorted(name for name in EVERY if 'vllm_watchdog_' + name in WATCHDOG_DEFAULTS)


def test_the_tables_are_read():
    # Known entries: a catalogue read wrong (nothing in common with the role) would pass every test below.
    assert {'interval', 'startup_grace', 'lock_timeout', 'command_timeout', 'memory_fraction', 'freeze_limit',
            'reboot_timeout', 'evidence_timeout'} <= set(ROLE_SETTINGS)
    assert catalogue.DECIDE_DEFAULTS['startup_grace'] == 900


@pytest.mark.parametrize('module', sorted(MODULES))
def test_a_module_documents_each_setting_with_the_catalogue_s_type_and_default(module):
    documented = _documentation(module)
    for table in MODULES[module]:
        for name, (kind, default, dummy) in table.items():
            assert name in documented, (module, name)
            assert documented[name].get('type', 'str') == kind, (module, name)
            assert documented[name].get('default') == default, (module, name, documented[name].get('default'))


@pytest.mark.parametrize('module', sorted(MODULES))
def test_a_module_builds_its_argument_spec_from_the_catalogue(module):
    """No default typed in the module's own argument spec for a catalogued setting (sanity's validate-modules then
    holds the documentation to the spec, and this test to the catalogue)."""
    with open(os.path.join(REPO, 'plugins', 'modules', module + '.py')) as handle:
        source = handle.read()
    spec = source[re.search(r'argument_spec=dict\(|def argument_spec\(', source).start():]
    for table in MODULES[module]:
        for name in table:
            assert not re.search(r'\b%s=dict\(' % name, spec), (module, name)


@pytest.mark.parametrize('name', ROLE_SETTINGS)
def test_the_watchdog_role_s_default_is_the_catalogue_s(name):
    kind, default, limits = EVERY[name]
    want = catalogue.WATCHDOG_ROLE_DEFAULTS.get(name, default)
    got = _rendered(WATCHDOG_DEFAULTS['vllm_watchdog_' + name], WATCHDOG_DEFAULTS)
    assert float(got) == float(want), (name, got, want)
    spec = WATCHDOG_SPECS['vllm_watchdog_' + name]
    assert spec.get('type', 'str') == kind, (name, spec.get('type'))
    if limits is not None:
        assert in_range(got, limits, strings=True) is not None, (name, got, limits)


def test_a_role_default_that_differs_from_the_module_s_says_why():
    with open(os.path.join(REPO, 'plugins', 'module_utils', '_settings.py')) as handle:
        source = handle.read()
    lines = source[source.index('WATCHDOG_ROLE_DEFAULTS = {'):].splitlines()
    lines = lines[:lines.index('}')]
    for name in catalogue.WATCHDOG_ROLE_DEFAULTS:
        assert name in ROLE_SETTINGS, name
        assert catalogue.WATCHDOG_ROLE_DEFAULTS[name] != EVERY[name][1], name  # else it is no exception
        at = [i for i, line in enumerate(lines) if line.strip().startswith("'%s':" % name)][0]
        assert lines[at - 1].strip().startswith('#'), (name, lines[at - 1])  # the comment above it says why


def test_every_number_the_watchdog_preflight_checks_is_a_catalogued_role_setting():
    assert set(catalogue.WATCHDOG_LIMITS) - set(EVERY) == set()
    role_numbers = set(name for name in ROLE_SETTINGS if EVERY[name][2] is not None)
    assert role_numbers <= set(catalogue.WATCHDOG_LIMITS), sorted(role_numbers - set(catalogue.WATCHDOG_LIMITS))


ROLLOUT_DEFAULTS = _yaml('roles', 'rollout', 'defaults', 'main.yml')
FALLBACK = re.compile(r'^\{\{ vllm_watchdog_(\w+) \| default\(([^()]*)\) \}\}$')


def test_the_rollout_falls_back_to_the_watchdog_s_defaults():
    """``vllm_rollout_x: "{{ vllm_watchdog_x | default(N) }}"``: N is what vllm_watchdog_x is when unset."""
    compared = []
    for value in ROLLOUT_DEFAULTS.values():
        match = FALLBACK.match(value) if isinstance(value, str) else None
        if match and match.group(1) in EVERY:
            name = match.group(1)
            fallback = float(yaml.safe_load(match.group(2)))
            assert fallback == float(_rendered(WATCHDOG_DEFAULTS['vllm_watchdog_' + name], WATCHDOG_DEFAULTS)), name
            compared.append(name)
    assert {'interval', 'probe_timeout', 'metrics_timeout', 'freeze_limit', 'lock_timeout'} <= set(compared), compared


def test_the_watchdog_preflight_is_given_every_catalogued_number_of_the_role():
    """The role hands its preflight the settings to check by name (``_vllm_watchdog_setting_keys``): a catalogued
    number of the role left out of that list would go unchecked until a module refused it."""
    keys = _yaml('roles', 'watchdog', 'vars', 'main.yml')['_vllm_watchdog_setting_keys']
    role_numbers = set(name for name in ROLE_SETTINGS if EVERY[name][2] is not None)
    assert set(keys) == role_numbers, (sorted(role_numbers - set(keys)), sorted(set(keys) - role_numbers))
