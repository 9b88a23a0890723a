"""Every piece of documentation ansible-doc reads is valid YAML (module and plugin docs, role argument specs)."""

import ast
import glob
import os

import pytest
import yaml

from tests.support.paths import REPO

PLUGINS = sorted(glob.glob(os.path.join(REPO, 'plugins', '*', '*.py')) +
                 glob.glob(os.path.join(REPO, 'extensions', 'eda', 'plugins', '*', '*.py')))
SPECS = sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')))


def docs(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ('DOCUMENTATION', 'EXAMPLES', 'RETURN'):
            yield node.targets[0].id, node.value.value


def descriptions(node, where=''):
    """Every description (and short_description) in a parsed doc, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ('description', 'short_description'):
                yield where + '.' + str(key), value
            yield from descriptions(value, where + '.' + str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from descriptions(value, '%s[%d]' % (where, index))


def is_text(value):
    # A "key: value" inside a sentence turns a list item into a mapping: ansible-doc then fails.
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(item, str) for item in value))


@pytest.mark.parametrize('path', PLUGINS, ids=lambda p: os.path.relpath(p, REPO))
def test_plugin_docs_are_yaml(path):
    for name, text in docs(path):
        parsed = yaml.safe_load(text)
        assert isinstance(parsed, (dict, list)), name
        if name != 'EXAMPLES':
            bad = [where for where, value in descriptions(parsed) if not is_text(value)]
            assert not bad, '%s: descriptions that are not text: %s' % (name, bad)


@pytest.mark.parametrize('path', SPECS, ids=lambda p: os.path.relpath(p, REPO))
def test_role_argument_specs_are_yaml(path):
    with open(path) as handle:
        parsed = yaml.safe_load(handle)
    assert 'argument_specs' in parsed
    bad = [where for where, value in descriptions(parsed) if not is_text(value)]
    assert not bad, 'descriptions that are not text: %s' % bad
