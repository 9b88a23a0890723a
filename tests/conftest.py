"""Every test can import the collection as ``ansible_collections.modelops.vllm`` (see tests/support/paths.py)."""

import tests.support.paths  # noqa: F401  pylint: disable=unused-import
