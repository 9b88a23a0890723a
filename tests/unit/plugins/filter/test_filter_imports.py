"""What a task that names one filter of the collection costs each host (issue 28).

ansible-core resolves ``modelops.vllm.<filter>`` by loading every file of plugins/filter/ and what they
import, in that host's task worker, compiled from source each time (the collection loader keeps no
bytecode). So the filters import only small units: the range tables and the check's deadline come from
``_settings`` (it imports nothing), never from the check's or the decision's big modules. Measured on
this machine: every filter file loaded 86-118 ms with those imports, 26 ms without them.

The graph is read from the sources (``ast``): an import inside a function counts as much as one at the top.
And which filters are public (issue 30): ``vllm_servers``; the others are the roles' and playbooks' glue, marked
internal by a leading ``_`` and in their documentation.
"""

import ast
import glob
import importlib
import os
import re

import pytest
import yaml

from tests.support.paths import REPO

PACKAGE = 'ansible_collections.modelops.vllm.plugins.'
# The units a filter must not load: the check, the decision and what they stand on (each 150-840 lines).
HEAVY = {'module_utils._verdict', 'module_utils._decide', 'module_utils._host', 'module_utils._stall',
         'module_utils._freeze', 'module_utils._readings', 'module_utils._prometheus', 'module_utils._ready',
         'module_utils._check', 'module_utils._http', 'module_utils._gate', 'module_utils._evidence',
         'module_utils._history'}
FILTERS = sorted(glob.glob(os.path.join(REPO, 'plugins', 'filter', '*.py')))


def imports_of(unit):
    """The collection's units ``unit`` ('filter._check_budget', 'module_utils._types') imports, by the same
    short names."""
    path = os.path.join(REPO, 'plugins', *unit.split('.')) + '.py'
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or '').startswith(PACKAGE):
            module = node.module[len(PACKAGE):]
            if module.count('.') == 0:  # `from ...plugins.module_utils import _x`: the names are units
                found.update('%s.%s' % (module, alias.name) for alias in node.names)
            else:
                found.add(module)
        elif isinstance(node, ast.Import):
            found.update(alias.name[len(PACKAGE):] for alias in node.names if alias.name.startswith(PACKAGE))
    return found


def closure(unit):
    seen, todo = set(), [unit]
    while todo:
        for name in imports_of(todo.pop()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def test_the_graph_is_read_from_the_sources():
    # Known edges: a graph read wrong (no edges) would pass the test below.
    assert 'module_utils._settings' in imports_of('filter._watchdog_instances')
    assert 'module_utils._settings' in imports_of('filter._check_budget')
    assert 'module_utils._types' in closure('filter._watchdog_instances')
    assert 'module_utils._verdict' in closure('module_utils._check')
    assert len(FILTERS) >= 10
    assert 'plugin_utils._counts' in imports_of('filter._check_counts')


@pytest.mark.parametrize('path', FILTERS, ids=os.path.basename)
def test_a_filter_does_not_load_the_check_or_the_decision(path):
    unit = 'filter.' + os.path.basename(path)[:-3]
    assert not closure(unit) & HEAVY, (unit, sorted(closure(unit) & HEAVY))


@pytest.mark.parametrize('path', FILTERS, ids=os.path.basename)
def test_a_filter_imports_no_other_filter(path):
    """What two filters share is a unit of plugin_utils or module_utils (a filter is public API: one importing
    another ties the two together, issue 30)."""
    unit = 'filter.' + os.path.basename(path)[:-3]
    assert [name for name in imports_of(unit) if name.startswith('filter.')] == []


# The filters a user calls (docs/release.md promises them); every other one is a role's or a playbook's glue.
PUBLIC = {'vllm_servers'}


@pytest.mark.parametrize('path', FILTERS, ids=os.path.basename)
def test_a_filter_is_public_by_name_or_marked_internal_in_its_name_and_its_documentation(path):
    """docs/architecture.md, the public surface: a filter outside PUBLIC starts with _ and its documentation says that
    it is internal (Galaxy needs the documentation, ansible-core has no private filter); a public one does neither."""
    name = os.path.basename(path)[:-3]
    module = importlib.import_module(PACKAGE + 'filter.' + name)
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc['name'] == name and list(module.FilterModule().filters()) == [name], (name, doc['name'])
    internal = doc['short_description'].startswith('Internal - ') and doc['description'][0].startswith('Internal to ')
    assert (name in PUBLIC) == (not name.startswith('_')) == (not internal), (name, doc['short_description'])


def test_the_roles_and_playbooks_call_no_filter_of_the_collection_that_is_not_one():
    """A task that names a filter by an old or mistyped name would fail only when it runs."""
    names = set(os.path.basename(path)[:-3] for path in FILTERS)
    called = set()
    for path in glob.glob(os.path.join(REPO, 'roles', '**', '*.*'), recursive=True) + \
            glob.glob(os.path.join(REPO, 'playbooks', '*.yml')):
        with open(path) as handle:
            called.update(re.findall(r'\|\s*modelops\.vllm\.(\w+)', handle.read()))
    assert {'_watchdog_summary', '_rollout_report', 'vllm_servers'} <= called, sorted(called)  # read right
    assert called <= names, sorted(called - names)


def test_the_settings_catalogue_imports_nothing():
    path = os.path.join(REPO, 'plugins', 'module_utils', '_settings.py')
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    imported = [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert imported == ['from __future__ import absolute_import, division, print_function'], imported


def test_every_range_table_is_in_the_catalogue():
    """A ``*_LIMITS`` table, or a setting's ``(smallest, largest, allowed)`` written inline in a check, lives in
    _settings only: a range typed in a second place drifts."""
    elsewhere = []
    for path in glob.glob(os.path.join(REPO, 'plugins', '**', '*.py'), recursive=True):
        if path.endswith(os.path.join('module_utils', '_settings.py')):
            continue
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.endswith('LIMITS') and \
                            not isinstance(node.value, (ast.Name, ast.Attribute)):
                        elsewhere.append((os.path.relpath(path, REPO), node.lineno, target.id))
            if isinstance(node, ast.Call) and getattr(node.func, 'id', None) == 'in_range' and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Tuple):
                elsewhere.append((os.path.relpath(path, REPO), node.lineno, ast.unparse(node.args[1])))
    assert elsewhere == []
