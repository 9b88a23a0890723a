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


def _tree(name):
    path = os.path.join(REPO, 'plugins', 'module_utils', name + '.py')
    with open(path) as handle:
        return ast.parse(handle.read(), path)


@pytest.mark.parametrize('name', ['_readings', '_stall', '_http', '_verdict'])
def test_they_take_from_vllm_only_the_default_profile_and_read_the_one_they_are_given(name):
    """``from ..._vllm import PROFILE`` and nothing else (no module global of vLLM's), and PROFILE only as the
    default of a ``profile`` argument: every other read goes through the profile they are given."""
    tree = _tree(name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == MODULE_UTILS + '._vllm':
            assert [alias.name for alias in node.names] == ['PROFILE'], (name, ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and node.module == MODULE_UTILS:
            assert '_vllm' not in [alias.name for alias in node.names], (name, ast.unparse(node))
        elif isinstance(node, ast.Import):
            assert MODULE_UTILS + '._vllm' not in [alias.name for alias in node.names], (name, ast.unparse(node))
    defaults = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            args = node.args
            named = args.args[len(args.args) - len(args.defaults):] + args.kwonlyargs
            values = list(args.defaults) + list(args.kw_defaults)
            for arg, value in zip(named, values):
                if isinstance(value, ast.Name) and value.id == 'PROFILE':
                    assert arg.arg == 'profile', (name, node.name, arg.arg)
                    defaults.add(id(value))
    uses = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == 'PROFILE']
    assert uses, name
    assert all(id(node) in defaults for node in uses), (name, [node.lineno for node in uses if id(node) not in defaults])


def test_only_the_defaulting_units_and_the_check_s_registry_import_the_engine_profile():
    importers = set(name for name, imports in GRAPH.items() if '_vllm' in imports)
    assert importers == {'_readings', '_stall', '_http', '_verdict', '_check'}, sorted(importers)
    for path in glob.glob(os.path.join(REPO, 'plugins', '*', '*.py')):
        if os.path.basename(os.path.dirname(path)) != 'module_utils':
            assert '_vllm' not in collection_imports(path) and \
                MODULE_UTILS + '._vllm' not in collection_imports(path), path


def test_the_registry_names_the_vllm_profile_and_the_check_passes_it_on():
    from ansible_collections.modelops.vllm.plugins.module_utils import _check, _vllm
    assert _check.ENGINES == {'vllm': _vllm.PROFILE} and _check.DEFAULT_ENGINE == 'vllm'
    source = ast.unparse(_tree('_check'))
    for call in ('client_class(', 'Judge(', 'Window('):
        for at in [i for i in range(len(source)) if source.startswith(call, i)]:
            depth, end = 0, at
            for end in range(at, len(source)):
                depth += {'(': 1, ')': -1}.get(source[end], 0)
                if depth == 0 and source[end] == ')':
                    break
            assert 'profile=' in source[at:end], (call, source[at:end])


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


@pytest.mark.parametrize('name', ['_host', '_textfile', '_evidence', '_results', '_settings', '_types'])
def test_what_reads_the_host_or_writes_the_results_does_not_load_the_decision(name):
    """The decision's vocabulary (its actions, a start time's parser) is in _types: the units the restart module and
    the textfile stand on do not compile the 500-line decision for a constant (issue 30)."""
    assert '_decide' not in reachable(name), (name, sorted(reachable(name)))


# The role's own vocabulary in module_utils, by design: the textfile's metric names (vllm_watchdog_verdict, ...) and
# the role's results, whose contract is the fact vllm_watchdog_results.
ROLE_WORDS_ALLOWED = ('_textfile.py', '_results.py')


def _strings(path):
    """The string constants of a source file that are not docstrings (what a message or a result can say)."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_the_core_s_words_name_no_role_variable():
    """The core says a setting by its name, after the caller's ``setting_prefix`` (the watchdog role passes
    vllm_watchdog_): a module run alone names its own options, the role its variables."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, 'plugins', 'module_utils', '*.py'))):
        if os.path.basename(path) in ROLE_WORDS_ALLOWED:
            continue
        found.extend((os.path.basename(path), s) for s in _strings(path) if 'vllm_watchdog_' in s or 'vllm_rollout_' in s)
    assert found == []
    assert [s for s in _strings(os.path.join(REPO, 'plugins', 'module_utils', '_textfile.py')) if 'vllm_watchdog_' in s]
