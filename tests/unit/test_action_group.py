"""The action group of meta/runtime.yml is documented as each member's action_group attribute.

The attribute is written once, in the doc fragment modelops.vllm.connection: the group exists so that module_defaults
sets the options that reach a server once per play, and exactly the modules that take those options are its members.
"""

import ast
import glob
import os

import yaml

from ansible_collections.modelops.vllm.plugins.doc_fragments.connection import ModuleDocFragment

from tests.support.paths import REPO


def documentation(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', None) == 'DOCUMENTATION':
            return yaml.safe_load(node.value.value)
    raise AssertionError('%s has no DOCUMENTATION' % path)


def test_the_group_s_members_are_the_modules_that_document_its_attribute():
    with open(os.path.join(REPO, 'meta', 'runtime.yml')) as handle:
        groups = yaml.safe_load(handle)['action_groups']
    assert list(groups) == ['vllm'], groups
    fragment = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)
    attribute = fragment['attributes']['action_group']
    assert attribute['membership'] == ['modelops.vllm.vllm'] and attribute['support'] == 'full', attribute
    documented = sorted(os.path.basename(path)[:-len('.py')]
                        for path in glob.glob(os.path.join(REPO, 'plugins', 'modules', '*.py'))
                        if 'modelops.vllm.connection' in documentation(path).get('extends_documentation_fragment', []))
    assert documented == sorted(groups['vllm']), (documented, groups['vllm'])
