"""Every test can import the collection as ``ansible_collections.modelops.vllm`` (see modelops_paths)."""

import modelops_paths  # noqa: F401  pylint: disable=unused-import
