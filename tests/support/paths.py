"""Paths of the tests, and this checkout made importable as ``ansible_collections.modelops.vllm``.

The repository root is the collection root. Tests import the collection's
Python code and run ``ansible-playbook`` with it, so ``.cache/collections`` in
the checkout (the directory ``make collection-link`` makes) gets
``ansible_collections/modelops/vllm`` as a link to the checkout, and both
``sys.path`` and ``ANSIBLE_COLLECTIONS_PATH`` point at it. It stays inside the
checkout: a fixed name in the shared temporary directory could be made by
someone else first.
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Real /metrics captures of a real vLLM 0.32.0 server (see its README), kept in the repository.
FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'vllm-0.32-cpu')


def collections_root():
    root = os.path.join(REPO, '.cache', 'collections')
    namespace = os.path.join(root, 'ansible_collections', 'modelops')
    link = os.path.join(namespace, 'vllm')
    os.makedirs(namespace, exist_ok=True)
    if os.path.realpath(link) != REPO:
        tmp = link + '.%d' % os.getpid()
        os.symlink(REPO, tmp)
        os.replace(tmp, link)
    return root


COLLECTIONS = collections_root()
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
os.environ['ANSIBLE_COLLECTIONS_PATH'] = COLLECTIONS
