#!/usr/bin/env bash
# Build the collection tarball from a clean copy of the tree (tracked and
# untracked-not-ignored files only), install it into a temporary collections
# path and check that the module documentation renders.
#
# Output: build/<namespace>-<name>-<version>.tar.gz
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage_root="${repo}/.cache/build/stage"
out_dir="${repo}/build"
install_dir="$(mktemp -d "${TMPDIR:-/tmp}/modelops-vllm-install.XXXXXX")"
trap 'rm -rf "${install_dir}"' EXIT

rm -rf "${stage_root}"
collection_dir="$("${repo}/scripts/stage-collection.sh" "${stage_root}")"
mkdir -p "${out_dir}"

ansible-galaxy collection build --force --output-path "${out_dir}" "${collection_dir}"

namespace="$(basename "$(dirname "${collection_dir}")")"
name="$(basename "${collection_dir}")"
version="$(sed -n 's/^version:[[:space:]]*//p' "${repo}/galaxy.yml" | tr -d '"'"'"' \r')"
tarball="${out_dir}/${namespace}-${name}-${version}.tar.gz"

echo "build: tarball ${tarball} ($(du -h "${tarball}" | cut -f1)), $(tar -tzf "${tarball}" | wc -l) entries"

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
