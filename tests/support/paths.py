"""Paths of the tests, and this checkout made importable as ``ansible_collections.modelops.vllm``.

The repository root is the collection root. Tests import the collection's
Python code and run ``ansible-playbook`` with it, so a directory outside the
checkout gets ``ansible_collections/modelops/vllm`` as a link to the checkout,
and both ``sys.path`` and ``ANSIBLE_COLLECTIONS_PATH`` point at it.
"""

import hashlib
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Real /metrics captures of a real vLLM 0.32.0 server (see its README), kept in the repository.
FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'vllm-0.32-cpu')


def collections_root():
    digest = hashlib.sha1(REPO.encode()).hexdigest()[:12]
    root = os.path.join(tempfile.gettempdir(), 'modelops-vllm-collections-%s' % digest)
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
