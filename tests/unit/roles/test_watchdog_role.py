"""The watchdog role's settings: its defaults and argument specs agree, and its async budget is the check's deadline."""

import os

import jinja2
import pytest
import yaml

from ansible_collections.modelops.vllm.plugins.filter.check_budget import check_budget
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import check_deadline

from tests.support.paths import REPO

ROLE = os.path.join(REPO, 'roles', 'watchdog')


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def test_every_default_is_documented_with_the_same_value_and_every_option_has_a_default():
    """Every variable of defaults/main.yml is an option, with the same default; except that a templated default of an
    option that is not a str is no ``default:`` of the spec (ansible-doc and antsibull-docs check a spec's default
    against its type, and a Jinja expression is no bool, float or list) and its description says what it defaults to.
    The role's defaults/main.yml is what sets the value either way (role argument validation sets no default)."""
    defaults = load('defaults', 'main.yml')
    options = load('meta', 'argument_specs.yml')['argument_specs']['main']['options']
    assert sorted(defaults) == sorted(options)
    for name, spec in options.items():
        assert spec.get('description'), name
        if templated_non_str(defaults[name], spec):
            assert 'default' not in spec, (name, spec['default'])
            assert 'Defaults to' in ' '.join(as_list(spec['description'])), name
        else:
            assert spec.get('default') == defaults[name], name


def templated_non_str(value, spec):
    """Whether a default is a Jinja expression for an option whose type is not str."""
    return isinstance(value, str) and '{{' in value and spec.get('type', 'str') != 'str'


def as_list(value):
    return value if isinstance(value, list) else [value]


def test_the_spec_defaults_are_of_their_types():
    """What antsibull-docs lint-collection-docs checks, on every default the spec gives."""
    options = load('meta', 'argument_specs.yml')['argument_specs']['main']['options']
    types = {'str': str, 'bool': bool, 'int': int, 'float': (int, float), 'list': list, 'dict': dict, 'path': str}
    for name, spec in options.items():
        if 'default' in spec:
            assert isinstance(spec['default'], types[spec.get('type', 'str')]), (name, spec['default'])


@pytest.mark.parametrize('interval, probe, metrics', [(5, 30, 10), (1, 5, 5), (0.5, 2, 2), (2.5, 7.5, 1.25)])
def test_the_async_budget_is_the_check_s_own_deadline_plus_start_up(interval, probe, metrics):
    expression = load('vars', 'main.yml')['_vllm_watchdog_check_budget']
    environment = jinja2.Environment()
    environment.filters['modelops.vllm.check_budget'] = check_budget  # the collection's filter, as Ansible names it
    budget = int(environment.from_string(expression).render(
        vllm_watchdog_interval=interval, vllm_watchdog_probe_timeout=probe, vllm_watchdog_metrics_timeout=metrics))
    deadline = check_deadline(interval, probe, metrics)
    assert deadline + 30 <= budget < deadline + 31
