#!/usr/bin/env bash
# Build the collection tarball from a clean copy of the tree (tracked and
# untracked-not-ignored files only), install it into a temporary collections
# path and check that the module documentation renders.
#
# The release names where the collection lives (docs/release.md): these
# variables, when set, are written into the galaxy.yml of the copy that is
# built (never into the tree's):
#   COLLECTION_REPOSITORY     galaxy.yml's repository (Galaxy and Automation Hub require it)
#   COLLECTION_DOCUMENTATION  galaxy.yml's documentation (default: the repository)
#   COLLECTION_ISSUES         galaxy.yml's issues (the issue tracker)
# Each must be an http(s) URL without a user or password in it. Without
# COLLECTION_REPOSITORY the tarball installs, and Galaxy refuses it.
#
# Output: build/<namespace>-<name>-<version>.tar.gz (BUILD_DIR=... for another directory)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage_root="${repo}/.cache/build/stage"
out_dir="${BUILD_DIR:-${repo}/build}"
install_dir="$(mktemp -d "${TMPDIR:-/tmp}/modelops-vllm-install.XXXXXX")"
trap 'rm -rf "${install_dir}"' EXIT

url_problem() {  # VALUE: why it is not a URL for galaxy.yml (empty when it is one)
    local value="$1" authority
    if [[ ! "${value}" =~ ^https?://[^[:space:]/]+(/[^[:space:]]*)?$ ]]; then
        echo "not an http(s) URL"
        return
    fi
    authority="${value#*://}"
    authority="${authority%%/*}"
    if [[ "${authority}" == *@* ]]; then
        echo "it holds a user or password"
    fi
}

release_keys=()
for var in COLLECTION_REPOSITORY COLLECTION_DOCUMENTATION COLLECTION_ISSUES; do
    value="${!var:-}"
    if [[ "${var}" == COLLECTION_DOCUMENTATION && -z "${value}" ]]; then
        value="${COLLECTION_REPOSITORY:-}"
    fi
    [[ -n "${value}" ]] || continue
    problem="$(url_problem "${value}")"
    if [[ -n "${problem}" ]]; then
        echo "build: ERROR: ${var}: ${problem}" >&2
        exit 2
    fi
    key="${var#COLLECTION_}"
    release_keys+=("${key,,}: ${value}")
done
if grep -Eq '^(repository|documentation|issues|homepage):' "${repo}/galaxy.yml"; then
    echo "build: ERROR: galaxy.yml names a URL itself; the release sets them (docs/release.md)" >&2
    exit 2
fi

rm -rf "${stage_root}"
collection_dir="$("${repo}/scripts/stage-collection.sh" "${stage_root}")"
mkdir -p "${out_dir}"
if [[ ${#release_keys[@]} -gt 0 ]]; then
    printf '%s\n' "${release_keys[@]}" >> "${collection_dir}/galaxy.yml"
    echo "build: galaxy.yml of the tarball: ${release_keys[*]}"
else
    echo "build: no COLLECTION_REPOSITORY: the tarball installs, but Galaxy and Automation Hub refuse it" \
         "('repository' is required; docs/release.md)"
fi

ansible-galaxy collection build --force --output-path "${out_dir}" "${collection_dir}"

namespace="$(basename "$(dirname "${collection_dir}")")"
name="$(basename "${collection_dir}")"
version="$(sed -n 's/^version:[[:space:]]*//p' "${repo}/galaxy.yml" | tr -d '"'"'"' \r')"
tarball="${out_dir}/${namespace}-${name}-${version}.tar.gz"

echo "build: tarball ${tarball} ($(du -h "${tarball}" | cut -f1)), $(tar -tzf "${tarball}" | wc -l) entries"

# The execution environment installs the collection from this file (execution-environment/execution-environment.yml:
# dependencies.galaxy): `ansible-builder create` fails without it, rather than build an image without the collection.
printf -- '---\ncollections:\n  - name: /build/collections/%s\n    type: file\n' "$(basename "${tarball}")" \
    > "${out_dir}/ee-requirements.yml"

export ANSIBLE_COLLECTIONS_PATH="${install_dir}"
ansible-galaxy collection install --force -p "${install_dir}" "${tarball}"

echo "build: modules in the installed collection:"
ansible-doc --list "${namespace}.${name}" -t module
echo "build: ansible-doc ${namespace}.${name}.health"
# ansible-doc exits 0 (with a warning) for a module it cannot find, so check
# that the page it printed is really the module's.
ANSIBLE_NOCOLOR=1 ansible-doc "${namespace}.${name}.health" > "${install_dir}/health.txt"
head -n 20 "${install_dir}/health.txt"
if ! grep -q "^> MODULE ${namespace}\.${name}\.health " "${install_dir}/health.txt"; then
    echo "build: ERROR: ansible-doc did not render ${namespace}.${name}.health from the installed tarball" >&2
    exit 1
fi
echo "build: ok ($(wc -l < "${install_dir}/health.txt") lines of documentation)"
