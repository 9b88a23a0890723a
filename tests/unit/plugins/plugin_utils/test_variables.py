"""The variables the collection knows: one list, in step with what its YAML reads and its docs say, and the
messages about the ones it does not know or whose value is wrong (one line, the closest name, no secret)."""

import glob
import os
import re
import unicodedata

import jinja2
import jinja2.meta
import pytest
import yaml

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.modelops.vllm.plugins.module_utils import _settings as catalogue
from ansible_collections.modelops.vllm.plugins.plugin_utils import _variables as v
from tests.support.paths import REPO

# Keys whose values Ansible reads as bare Jinja expressions.
CONDITIONALS = ('when', 'that', 'failed_when', 'changed_when', 'until')
YAML_READERS = sorted(glob.glob(os.path.join(REPO, 'roles', '*', '*', '*.yml'))
                      + glob.glob(os.path.join(REPO, 'playbooks', '*.yml'))
                      + glob.glob(os.path.join(REPO, 'extensions', 'eda', 'rulebooks', '*.yml')))
TEMPLATES = sorted(glob.glob(os.path.join(REPO, 'extensions', 'prometheus', '*.j2')))
# The names of the groups of docs/fleet.md (an inventory's keys, not variables).
GROUPS = ('vllm', 'vllm_proxies', 'vllm_fleet_check_self')
# The Prometheus template fails a render with bad settings by reading one of these on purpose.
TEMPLATE_ERRORS = 'vllm_prometheus_invalid_settings_'


class Anything(dict):
    """Every filter and test exists (Ansible's, the collection's): only the variables are looked at."""

    def __contains__(self, key):
        return True

    def __missing__(self, key):
        return _anything

    def get(self, key, default=None):
        return dict.get(self, key, _anything)


def _anything(*args, **kwargs):
    return None


ENV = jinja2.Environment()
ENV.filters = Anything(ENV.filters)
ENV.tests = Anything(ENV.tests)


def read_names(source):
    """The free variables of a template (what it reads), by Jinja's own parser."""
    return jinja2.meta.find_undeclared_variables(ENV.parse(source))


def strings(node, key=None):
    """(key, text) of every string in a parsed YAML document, and the key it is the value of."""
    if isinstance(node, dict):
        for k, value in node.items():
            yield from strings(value, k)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value, key)
    elif isinstance(node, str):
        yield key, node


def names_read_by(path):
    with open(path) as handle:
        text = handle.read()
    if path.endswith('.j2'):
        return read_names(text)
    found = set()
    for key, value in strings(yaml.safe_load(text)):
        if key in CONDITIONALS:
            found |= read_names('{{ %s }}' % value)
        elif '{{' in value or '{%' in value:
            found |= read_names(value)
    return found


@pytest.mark.parametrize('path', YAML_READERS + TEMPLATES, ids=lambda p: os.path.relpath(p, REPO))
def test_every_vllm_variable_the_collection_reads_is_known(path):
    """A variable the YAML reads that the list does not know would be warned about as a typo (or the list
    is behind the code): each one is a role option, a documented convention or a fact the collection sets."""
    known = v.known_specs()
    unknown = sorted(name for name in names_read_by(path) if v.looks_ours(name) and name not in known
                     and not name.startswith(TEMPLATE_ERRORS))
    assert unknown == [], '%s reads %s, which modelops.vllm.validate_variables does not know' % (
        os.path.relpath(path, REPO), unknown)


def test_the_test_above_sees_what_the_yaml_reads():
    """The reader finds the names of bare conditionals, templates and Jinja blocks alike."""
    reads = names_read_by(os.path.join(REPO, 'playbooks', 'watchdog.yml'))
    assert {'vllm_watchdog_hosts', 'vllm_watchdog_become', 'vllm_watchdog_one_host'} <= reads
    reads = names_read_by(os.path.join(REPO, 'roles', 'watchdog', 'defaults', 'main.yml'))
    assert {'vllm_url', 'vllm_api_key', 'vllm_kind', 'vllm_model', 'vllm_instances', 'vllm_check_interval'} <= reads
    assert 'vllm_prometheus_stuck_seconds' in names_read_by(TEMPLATES[0])
    assert 'vllm_eda_token' in names_read_by(os.path.join(REPO, 'extensions', 'eda', 'rulebooks', 'vllm_stuck.yml'))


@pytest.mark.parametrize('role', v.ROLES)
def test_every_role_option_and_default_is_known(role):
    options = v.role_options(role)
    with open(os.path.join(REPO, 'roles', role, 'defaults', 'main.yml')) as handle:
        defaults = yaml.safe_load(handle)
    assert set(defaults) <= set(options)
    assert set(options) <= set(v.known_specs())


def yaml_keys_of_docs():
    """(page, key) of every vllm_* key of a YAML block in the docs (inventories, group_vars)."""
    found = []
    for page in ['README.md'] + sorted(glob.glob(os.path.join(REPO, 'docs', '*.md'))):
        with open(os.path.join(REPO, page)) as handle:
            text = handle.read()
        for block in re.findall(r'```ya?ml\n(.*?)\n```', text, re.S):
            found += [(os.path.relpath(page, REPO), key) for key in re.findall(r'^\s*(?:- )?(vllm_\w+):', block, re.M)]
            found += [(os.path.relpath(page, REPO), key) for key in re.findall(r'[{,]\s*(vllm_\w+):', block)]
    return found


def test_every_vllm_variable_the_docs_and_molecule_set_is_known():
    """The examples people copy never teach a name the collection would warn about. (vllm_host is a Prometheus
    target label in the scrape configs, not a variable.)"""
    known = set(v.known_specs())
    found = [(page, key) for page, key in yaml_keys_of_docs() if key not in known and key != 'vllm_host'
             and key not in GROUPS]
    for path in glob.glob(os.path.join(REPO, 'molecule', '*', 'molecule.yml')):
        with open(path) as handle:
            inventory = (yaml.safe_load(handle).get('provisioner') or {}).get('inventory') or {}
        for section in ('host_vars', 'group_vars'):
            for values in (inventory.get(section) or {}).values():
                found += [(os.path.relpath(path, REPO), key) for key in values if v.looks_ours(key) and key not in known]
    assert yaml_keys_of_docs(), 'the docs have vllm_* keys in YAML blocks: the reader above finds none'
    assert found == []


def test_the_conventions_are_in_the_docs():
    """docs/fleet.md's table lists the inventory conventions, each playbook's header its settings, the
    Prometheus page the template's variables, the rulebook the EDA ones."""
    with open(os.path.join(REPO, 'docs', 'fleet.md')) as handle:
        fleet = handle.read()
    table = fleet[fleet.index('## Inventory conventions'):]
    table = table[:table.index('\n\n', table.index('|---'))]
    in_table = set(re.findall(r'^\| `(vllm_\w+)`', table, re.M))
    inventory = set(name for name, (spec, group) in v.CONVENTIONS.items() if group == 'inventory')
    assert in_table == inventory
    where = {'check': 'playbooks/fleet_check.yml', 'watchdog': 'playbooks/watchdog.yml', 'history': 'playbooks/history.yml',
             'local_timer': 'playbooks/local_install.yml',
             'prometheus': 'docs/prometheus.md', 'eda': 'extensions/eda/rulebooks/vllm_stuck.yml',
             'fact': 'docs/fleet.md'}
    for name, (spec, group) in v.CONVENTIONS.items():
        if group == 'inventory':
            continue
        with open(os.path.join(REPO, where[group])) as handle:
            assert name in handle.read(), '%s (%s) is not in %s' % (name, group, where[group])


@pytest.mark.parametrize('typo, meant', [
    ('vllm_ulr', 'vllm_url'),
    ('vllm_watchdog_restart_methd', 'vllm_watchdog_restart_method'),
    ('vllm_rollout_serail', 'vllm_rollout_serial'),
    ('vllm_check_form', 'vllm_check_from'),
    ('vlm_url', 'vllm_url'),
    ('VLLM_URL', 'vllm_url'),
    ('vllm_watchdog_stateDir', 'vllm_watchdog_state_dir'),
])
def test_a_typo_gets_the_closest_known_name(typo, meant):
    known = v.known_specs()
    assert v.looks_ours(typo)
    found = v.unknown_names([('gb10-01', [typo, 'vllm_url', 'ansible_host'])], known)
    assert found == [{'name': typo, 'hosts': ['gb10-01'], 'suggestion': meant}]
    line = v.unknown_message(found[0])
    assert '\n' not in line and typo in line and 'did you mean %s?' % meant in line and 'gb10-01' in line


def test_only_names_that_look_like_ours_are_looked_at():
    known = v.known_specs()
    names = ['ansible_host', 'inventory_hostname', 'my_vllm_url', 'vllmish', '_vllm_watchdog_done', 'vllm_url']
    assert v.unknown_names([('h', names)], known) == []
    assert v.unknown_names([('h', ['vllm_ulr'])], known, own=['vllm_ulr']) == []


def test_a_name_set_on_many_hosts_is_one_entry_naming_them():
    known = v.known_specs()
    hosts = ['gb10-%02d' % i for i in range(1, 101)]
    found = v.unknown_names([(h, ['vllm_watchdog_restart_methd']) for h in hosts], known)
    assert len(found) == 1 and found[0]['hosts'] == hosts
    line = v.unknown_message(found[0])
    assert 'gb10-01, gb10-02, gb10-03, gb10-04, gb10-05 and 95 more (100 hosts)' in line
    assert v.unknown_names([('h', ['vllm_zzzzzzzzzzzzzzzzzzzz'])], known)[0]['suggestion'] is None


def validate(spec, values):
    return ArgumentSpecValidator(spec).validate(values).error_messages


def test_a_bad_value_is_one_line_naming_the_variable_the_value_and_what_is_allowed():
    specs = v.specs_of(['inventory', 'check', 'watchdog'])
    found = v.value_problems([('gb10-01', {'vllm_watchdog_restart_method': 'dokcer', 'vllm_watchdog_cooldown': 'abc',
                                           'vllm_kind': 'prxy', 'vllm_watchdog_service': 'vllm'}),
                              ('gb10-02', {'vllm_watchdog_restart_method': 'dokcer'})], specs, validate)
    assert sorted(found) == sorted([
        'value of vllm_kind must be one of: backend, proxy, got: prxy (on gb10-01)',
        'value of vllm_watchdog_cooldown must be a float, got: "abc" (on gb10-01)',
        'value of vllm_watchdog_restart_method must be one of: systemd, docker, compose, command, got: dokcer '
        '(on gb10-01, gb10-02)',
    ])
    assert v.value_problems([('gb10-01', {'vllm_watchdog_restart_method': 'systemd', 'vllm_watchdog_cooldown': 60,
                                          'vllm_kind': 'proxy'})], specs, validate) == []


def test_a_number_out_of_its_catalogued_range_is_one_line_naming_the_variable_and_the_hosts():
    """The range is the catalogue's (the module's own check): said before any check runs, once for every host."""
    specs = v.specs_of(['inventory', 'check', 'watchdog', 'rollout'])
    found = v.value_problems([('a', {'vllm_check_interval': 0, 'vllm_watchdog_cooldown': -1, 'vllm_rollout_interval': '5000',
                                     'vllm_watchdog_max_restarts': 3, 'vllm_check_freeze_wait': 0}),
                              ('b', {'vllm_check_interval': 0.0, 'vllm_rollout_verify_retries': 0})], specs, validate)
    assert sorted(found) == sorted([
        'vllm_check_interval must be a number greater than 0 and at most 3600, got 0 (on a)',
        'vllm_check_interval must be a number greater than 0 and at most 3600, got 0.0 (on b)',
        "vllm_rollout_interval must be a number greater than 0 and at most 3600, got '5000' (on a)",
        'vllm_rollout_verify_retries must be a number from 1 and at most 1000, got 0 (on b)',
        'vllm_watchdog_cooldown must be a number from 0 and at most 604800, got -1 (on a)',
    ])
    # In range, at the edges: nothing.
    assert v.value_problems([('a', {'vllm_check_interval': 3600, 'vllm_watchdog_cooldown': 0, 'vllm_rollout_idle_timeout': 0,
                                    'vllm_check_workers': 1})], specs, validate) == []


@pytest.mark.parametrize('prefix, limits', v.RANGES)
def test_every_variable_of_a_catalogued_setting_gets_its_range(prefix, limits):
    """A variable the collection knows whose setting has a range in the catalogue is checked against it (the check's
    are the health module's options, which the fleet check playbook passes)."""
    ranged = {}
    for table in (catalogue.CHECK_SETTINGS, catalogue.MEMORY_OF_CHECKS, catalogue.READY_SETTINGS,
                  catalogue.MEMORY_SETTINGS, catalogue.GUARD_RAILS, catalogue.GATE_SETTINGS, catalogue.ROLE_SETTINGS,
                  catalogue.ROLLOUT_SETTINGS):
        ranged.update(catalogue.limits_of(table))
    ours = [name[len(prefix):] for name in v.known_specs() if name.startswith(prefix) and name[len(prefix):] in ranged]
    assert len(ours) >= 5, ours  # the variables were read
    assert [name for name in ours if name not in limits] == []
    assert all(limits[name] == ranged[name] for name in ours)


def test_a_value_is_validated_only_for_the_parts_asked_for():
    """The watchdog does not fail on a rollout setting, nor the check on a watchdog one."""
    assert 'vllm_rollout_method' not in v.specs_of(['inventory', 'check', 'watchdog'])
    assert 'vllm_watchdog_restart_method' not in v.specs_of(['inventory', 'check'])
    assert 'vllm_rollout_method' in v.specs_of(['rollout'])
    assert v.specs_of([]) == {}


def test_a_secret_is_never_shown_in_a_message():
    """A key in a list of instances, or a value of a secret's name, never reaches a message."""
    specs = v.specs_of(['inventory', 'check', 'watchdog', 'rollout'])
    specs['vllm_eda_token'] = {'type': 'int'}  # even with a spec its value could fail
    found = v.value_problems([('h', {
        'vllm_watchdog_instances': [{'name': 'chat', 'url': 'http://x', 'api_key': ['sk-SECRET1']}, 'sk-SECRET2'],
        'vllm_api_key': {'sk-SECRET3': 1},
        'vllm_watchdog_api_key': ['sk-SECRET4'],
        'vllm_rollout_api_key': ['sk-SECRET5'],
        'vllm_eda_token': 'sk-SECRET6',
    })], specs, validate)
    assert found and not [line for line in found if 'SECRET' in line], found
    assert found == ['value of vllm_watchdog_instances must be a list of dict with the keys api_key, command_timeout'
                     ', compose_project_dir, kind, logs_command, model, name, restart_command, restart_method, service, '
                     'status_command, url (see ansible-doc -t role) (on h)'] or \
        all(line.startswith('value of vllm_watchdog_instances ') for line in found), found


def test_a_bad_choice_inside_the_instances_names_the_key():
    specs = v.specs_of(['watchdog'])
    found = v.value_problems([('h', {'vllm_watchdog_instances': [{'name': 'chat', 'url': 'http://x',
                                                                  'restart_method': 'dockr'}]})], specs, validate)
    assert len(found) == 1 and 'restart_method' in found[0] and 'dockr' in found[0] and 'systemd' in found[0], found


@pytest.mark.parametrize('name, value, expected', [
    ('vllm_url', 'http://gb10-01:8000/v1',
     "vllm_url: url 'http://gb10-01:8000/v1' names the endpoint /v1, not the server: give the server's own URL, "
     "'http://gb10-01:8000'"),
    ('vllm_watchdog_url', 'http://gb10-01:8000/metrics', "vllm_watchdog_url: url 'http://gb10-01:8000/metrics' names "
                                                         "the endpoint /metrics"),
    ('vllm_url', 'gb10-01:8000', "vllm_url: url must start with http:// or https://, got 'gb10-01:8000': did you mean "
                                 "'http://gb10-01:8000'?"),
    ('vllm_instances', [{'name': 'embed', 'url': 'http://127.0.0.1:8001/v1/'}],
     "vllm_instances[embed]: url 'http://127.0.0.1:8001/v1/' names the endpoint /v1"),
])
def test_a_url_that_names_an_endpoint_or_has_no_scheme_is_named_before_any_check(name, value, expected):
    specs = v.specs_of(['inventory', 'check', 'watchdog'])
    found = v.value_problems([('gb10-01', {name: value}), ('gb10-02', {name: value})], specs, validate)
    assert len(found) == 1 and found[0].startswith(expected) and found[0].endswith('(on gb10-01, gb10-02)'), found


@pytest.mark.parametrize('url', ['http://127.0.0.1:8000', 'https://gw.example/vllm-a/', '{{ lookup("env", "X") }}'])
def test_a_base_url_and_a_template_pass(url):
    specs = v.specs_of(['inventory', 'check', 'watchdog'])
    assert v.value_problems([('h', {'vllm_url': url, 'vllm_watchdog_url': url})], specs, validate) == []


def test_a_misspelled_name_that_says_what_is_restarted_is_named_with_what_would_be():
    known = v.known_specs()
    found = v.unknown_names([('gb10-01', ['vllm_watchdog_servce', 'vllm_watchdog_intervl'])], known)
    targets = v.targets(found)
    assert [entry['name'] for entry in targets] == ['vllm_watchdog_servce']  # the interval names no target
    defaults = dict((name, spec.get('default')) for name, spec in known.items() if spec and 'default' in spec)
    line = v.target_message(targets[0], {'gb10-01': {'vllm_watchdog_servce': 'vllm-b'}}, defaults)
    assert line == ('vllm_watchdog_servce = "vllm-b" (set on gb10-01) is not a variable of modelops.vllm: did you mean '
                    'vllm_watchdog_service? That one says what a restart acts on: the run would act on what '
                    'vllm_watchdog_service says now (its default "vllm"), on a host with two servers the other one, so '
                    'nothing is checked or restarted on this host until it is spelled vllm_watchdog_service')


# A name that looks like one the collection knows and is not: never "did you mean" a name that looks the same.
LOOKALIKE_NAMES = [
    ('vllm_watchdog_reboot\u200b', 'vllm_watchdog_reboot\\u200b', '\\u200b ZERO WIDTH SPACE', 'vllm_watchdog_reboot'),
    ('vllm\u200d_url', 'vllm\\u200d_url', '\\u200d ZERO WIDTH JOINER', 'vllm_url'),
    ('\ufeffvllm_url', '\\ufeffvllm_url', '\\ufeff ZERO WIDTH NO-BREAK SPACE', 'vllm_url'),
    ('vllm_url\u202e', 'vllm_url\\u202e', '\\u202e RIGHT-TO-LEFT OVERRIDE', 'vllm_url'),
    ('vllm_w\u0430tchdog_reboot', 'vllm_w\\u0430tchdog_reboot', '\\u0430 CYRILLIC SMALL LETTER A',
     'vllm_watchdog_reboot'),
    ('\u03bdllm_url', '\\u03bdllm_url', '\\u03bd GREEK SMALL LETTER NU', 'vllm_url'),
    ('\uff56llm_url', '\\uff56llm_url', '\\uff56 FULLWIDTH LATIN SMALL LETTER V', 'vllm_url'),
    ('vllm\u0301_url', 'vllm\\u0301_url', '\\u0301 COMBINING ACUTE ACCENT', 'vllm_url'),
    ('vllm_url\x1b]0;t\x07', 'vllm_url\\x1b]0;t\\x07', '\\x1b ESCAPE', 'vllm_url'),
    ('vllm_watchdog_reboot ', 'vllm_watchdog_reboot\\x20', '\\x20 SPACE', 'vllm_watchdog_reboot'),
    (b'vllm_url\xff'.decode('utf-8', 'surrogateescape'), 'vllm_url\\udcff', '\\udcff', 'vllm_url'),
]


def _raw(text):
    return [char for char in text if unicodedata.category(char) in ('Cc', 'Cf', 'Cs', 'Cn', 'Zl', 'Zp')]


@pytest.mark.parametrize('typed, shown, said, meant', LOOKALIKE_NAMES, ids=[n[1] for n in LOOKALIKE_NAMES])
def test_a_name_that_looks_like_a_known_one_is_shown_as_it_is_and_said(typed, shown, said, meant):
    known = v.known_specs()
    found = v.unknown_names([('gb10-\x1bc', [typed, 'vllm_url'])], known)
    assert [(entry['name'], entry['suggestion']) for entry in found] == [(typed, meant)]
    line = v.unknown_message(found[0])
    assert line.startswith('%s (set on gb10-\\x1bc) is not a variable of modelops.vllm' % shown), line
    assert said in line and line.endswith('did you mean %s?' % meant), line
    assert not _raw(line), line
    assert shown != meant  # what the screen shows is never the name suggested


def test_a_look_alike_of_a_name_that_says_what_is_restarted_is_said_too():
    known = v.known_specs()
    found = v.unknown_names([('gb10-01', ['vllm_watchdog_servic\u0435'])], known)
    assert v.targets(found) == found
    line = v.target_message(found[0], {'gb10-01': {'vllm_watchdog_servic\u0435': 'vllm-b\x1b[2J'}}, {})
    assert line.startswith('vllm_watchdog_servic\\u0435 = "vllm-b\\u001b[2J" (set on gb10-01) is not a variable of '
                           'modelops.vllm (its name has a character that is not ASCII (\\u0435 CYRILLIC SMALL LETTER '
                           'IE)): did you mean vllm_watchdog_service?'), line
    assert not _raw(line)


def test_a_bad_value_with_escapes_is_named_escaped():
    specs = v.specs_of(['inventory'])
    found = v.value_problems([('gb10-\x9b2J', {'vllm_kind': 'proxy\x1b]0;t\x07'})], specs, validate)
    assert len(found) == 1 and not _raw(found[0]), found
    assert 'gb10-\\x9b2J' in found[0] and 'proxy\\x1b]0;t\\x07' in found[0], found
    found = v.value_problems([('h', {'vllm_instances': [{'name': 'a\x1bc', 'url': 'http://h:8000/v1\x07'}]})],
                             v.specs_of(['inventory']), validate)
    assert found and not any(_raw(line) for line in found), found
