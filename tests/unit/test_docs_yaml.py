"""Every piece of documentation ansible-doc reads is valid YAML (module and plugin docs, role argument specs)."""

import ast
import glob
import os

import pytest
import yaml

from modelops_paths import REPO

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


@pytest.mark.parametrize('path', PLUGINS, ids=lambda p: os.path.relpath(p, REPO))
def test_plugin_docs_are_yaml(path):
    for name, text in docs(path):
        assert isinstance(yaml.safe_load(text), (dict, list)), name


@pytest.mark.parametrize('path', SPECS, ids=lambda p: os.path.relpath(p, REPO))
def test_role_argument_specs_are_yaml(path):
    with open(path) as handle:
        assert 'argument_specs' in yaml.safe_load(handle)
