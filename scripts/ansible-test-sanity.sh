#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the collection laid out as
# ansible_collections/modelops/vllm.
#
# usage: scripts/ansible-test-sanity.sh [extra ansible-test sanity args...]
#
# Environment:
#   ANSIBLE_TEST      ansible-test executable  (default: .venv/bin/ansible-test)
#   SANITY_PYTHON     Python version to test   (default: 3.11)
#   SANITY_STAGE_DIR  where to stage the copy  (default: .cache/sanity)
#
# Notes:
# * --python 3.11: the version-specific tests (compile, import) are run for
#   Python 3.11 only, the interpreter the project ships and supports; without
#   it, ansible-test would try every Python version ansible-core 2.19 lists for
#   module targets (3.8 ... 3.13) and fail or skip for each interpreter that is
#   not installed.  The version-independent tests run once, on 3.11, anyway.
# * --venv: ansible-test builds its own virtual environments (cached under
#   ~/.ansible/test/venv and tests/output/.tmp of the staged copy).  It
#   bootstraps pip in them with a get-pip.py script it downloads from a host
#   we cannot reach; scripts/get_pip.py (ensurepip + pip install) is put in
#   its cache first, so the download is never attempted.  pip then uses this
#   machine's normal pip configuration (pip.conf, PIP_* variables).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ansible_test="${ANSIBLE_TEST:-${repo}/.venv/bin/ansible-test}"
python_version="${SANITY_PYTHON:-3.11}"
stage_root="${SANITY_STAGE_DIR:-${repo}/.cache/sanity}"

if [[ ! -x "${ansible_test}" ]]; then
    echo "ERROR: ${ansible_test} not found; run 'make venv' first" >&2
    exit 1
fi
venv_python="$(dirname "${ansible_test}")/python"

# 1. Offline get-pip.py replacement, at the path ansible-test looks at.
pip_version="$("${venv_python}" - "${python_version}" <<'PY'
import sys

from ansible_test._internal.python_requirements import get_venv_packages


class Python:
    version = sys.argv[1]


print(get_venv_packages(Python())['pip'])
PY
)"
get_pip_cache="${HOME}/.ansible/test/cache/get_pip_${pip_version//./_}.py"
mkdir -p "$(dirname "${get_pip_cache}")"
# (copied, then renamed: the version tier runs two sanity runs at once, which may want the same file)
cp "${repo}/scripts/get_pip.py" "${get_pip_cache}.$$"
mv -f "${get_pip_cache}.$$" "${get_pip_cache}"
echo "sanity: pip ${pip_version} bootstrap script -> ${get_pip_cache}"

# 2. shellcheck is optional for ansible-test (the test is skipped with a
#    warning when it is missing).  Install it when we can (root + apt); in CI
#    a sanity run without it fails rather than skip a test quietly.
if ! command -v shellcheck >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        # shellcheck source=scripts/lib/apt.sh
        source "${repo}/scripts/lib/apt.sh"
        if ! apt_install sanity shellcheck; then
            echo "sanity: WARNING: could not install shellcheck; ansible-test will skip the shellcheck test" >&2
        fi
    else
        echo "sanity: WARNING: shellcheck not installed; ansible-test will skip the shellcheck test" >&2
    fi
fi
if [[ -n "${CI:-}" ]] && ! command -v shellcheck >/dev/null 2>&1; then
    echo "sanity: ERROR: shellcheck is missing in CI" >&2
    exit 1
fi

# 3. Stage a real copy of the collection.
collection_dir="$("${repo}/scripts/stage-collection.sh" "${stage_root}")"
echo "sanity: staged collection in ${collection_dir}"

# 4. Run.  ansible-test must run from the collection root; put the venv's bin
#    first in PATH so that it finds the same ansible-core.
cd "${collection_dir}"
PATH="$(dirname "${ansible_test}"):${PATH}"
export PATH
color=auto
if [[ -n "${CI:-}" ]]; then
    color=no
fi
# pip on these machines warns once per package that a configured local index
# directory does not exist; drop those lines, keep everything else.
echo "+ ansible-test sanity --venv --python ${python_version} --color ${color} $*"
"${ansible_test}" sanity --venv --python "${python_version}" --color "${color}" "$@" 2>&1 \
    | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
