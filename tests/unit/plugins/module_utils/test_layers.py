"""module_utils imports point one way: the types at the bottom, the HTTP layer below the decision procedure, no cycle.

The graph is read from the source (``ast``), not from what Python happens to have imported, so an
import inside a function counts as much as one at the top."""

import ast
import glob
import os

import pytest

from tests.support.paths import REPO

PACKAGE = 'ansible_collections.modelops.vllm'
MODULE_UTILS = PACKAGE + '.plugins.module_utils'
SOURCES = sorted(glob.glob(os.path.join(REPO, 'plugins', 'module_utils', '*.py')))
NAMES = sorted(os.path.basename(path)[:-3] for path in SOURCES if not path.endswith('__init__.py'))


def collection_imports(path):
    """What one source file imports from the collection: the set of dotted names (a module_utils
    module as its bare name, '_types'; anything else of the collection in full)."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = set()

    def add(dotted):
        if dotted == MODULE_UTILS:
            return
        if dotted.startswith(MODULE_UTILS + '.'):
            found.add(dotted[len(MODULE_UTILS) + 1:].split('.')[0])
        elif dotted == PACKAGE or dotted.startswith(PACKAGE + '.'):
            found.add(dotted)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # A relative import inside module_utils: `from . import _x` or `from ._x import y`.
                base = MODULE_UTILS.rsplit('.', node.level - 1)[0] if node.level > 1 else MODULE_UTILS
                module = base + ('.' + node.module if node.module else '')
            else:
                module = node.module or ''
            if module == MODULE_UTILS:
                # `from ...module_utils import _readings as readings`: the names are modules.
                for alias in node.names:
                    add(MODULE_UTILS + '.' + alias.name)
            else:
                add(module)
    return found


GRAPH = dict((os.path.basename(path)[:-3], collection_imports(path)) for path in SOURCES)


def reachable(start):
    seen, todo = set(), list(GRAPH.get(start, ()))
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(GRAPH.get(name, ()))
    return seen


def test_the_graph_is_read_from_the_sources():
    # Known edges: a graph this test built wrong (no edges, or none of these) would pass everything below.
    assert '_types' in NAMES and '_verdict' in NAMES, NAMES
    assert {'_urls', '_types'} <= GRAPH['_http'], GRAPH['_http']
    assert {'_readings', '_types', '_prometheus'} <= GRAPH['_verdict'], GRAPH['_verdict']
    assert '_readings' in GRAPH['_stall'], GRAPH['_stall']  # `from ... import _readings as readings`
    assert '_statedir' in GRAPH['_check'], GRAPH['_check']  # `from ... import _statedir as statedir`


def test_the_types_import_nothing_from_the_collection():
    assert GRAPH['_types'] == set()


def test_the_engine_profile_imports_nothing_from_the_collection():
    assert GRAPH['_vllm'] == set()


@pytest.mark.parametrize('name', ['_readings', '_stall', '_http', '_verdict'])
def test_the_reader_the_window_the_client_and_the_judge_read_the_engine_profile(name):
    assert '_vllm' in GRAPH[name], (name, sorted(GRAPH[name]))


@pytest.mark.parametrize('name', ['_urls', '_http', '_ready', '_redact', '_results'])
def test_what_reads_urls_and_answers_does_not_load_the_decision_procedure(name):
    assert '_verdict' not in reachable(name), (name, sorted(reachable(name)))


@pytest.mark.parametrize('name', ['_gate', '_textfile'])
def test_the_watchdog_side_does_not_load_the_check(name):
    assert not {'_verdict', '_check', '_http', '_prometheus', '_readings', '_stall'} & reachable(name), (
        name, sorted(reachable(name)))


@pytest.mark.parametrize('name', ['_urls', '_types', '_vllm'])
def test_the_standard_library_only_modules_do_not_load_the_metrics_parser(name):
    assert not {'_prometheus', '_readings'} & reachable(name), (name, sorted(reachable(name)))


def test_every_import_names_a_module_that_exists():
    for name, imports in GRAPH.items():
        assert imports <= set(NAMES), (name, sorted(imports - set(NAMES)))


def test_there_is_no_import_cycle():
    for name in NAMES:
        assert name not in reachable(name), (name, sorted(reachable(name)))


def test_the_types_are_imported_from_the_types_module():
    """A name of _types (Fetched, CheckError, clip, ...) is imported from _types, not through another module."""
    with open(os.path.join(REPO, 'plugins', 'module_utils', '_types.py')) as handle:
        tree = ast.parse(handle.read())
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(target.id for target in node.targets if isinstance(target, ast.Name))
    assert {'Fetched', 'CheckError', 'FETCH_ERRORS', 'STATES', 'clip', 'model_ids'} <= defined, defined
    for path in SOURCES:
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or '').startswith(MODULE_UTILS + '.'):
                if node.module != MODULE_UTILS + '._types':
                    assert not defined & set(alias.name for alias in node.names), (path, node.module)


@pytest.mark.parametrize('source', [('plugins', 'modules', 'watchdog_gate.py'),
                                    ('plugins', 'module_utils', '_textfile.py')])
def test_the_gate_takes_the_verdict_list_from_types(source):
    """The watchdog gate's verdicts (its ``state`` choices, its textfile's states) are _types.STATES, not a copy."""
    path = os.path.join(REPO, *source)
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    imported = [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names]
    assert (MODULE_UTILS + '._types', 'STATES') in imported, imported
    literals = [node for node in ast.walk(tree) if isinstance(node, (ast.List, ast.Tuple))
                and {'idle', 'busy', 'stuck'} <= {getattr(e, 'value', None) for e in node.elts}]
    assert not literals, [ast.unparse(node) for node in literals]  # no verdict list typed out again
