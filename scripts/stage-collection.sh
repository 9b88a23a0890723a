#!/usr/bin/env bash
# Copy the collection (git-tracked files + untracked files that are not
# ignored) into DEST/ansible_collections/modelops/vllm, the layout that
# ansible-test and ansible-galaxy expect.  A real copy, not a symlink.
#
# The destination is synced: files that disappeared from the source are
# removed, but DEST/.../tests/output is kept so that ansible-test can reuse
# the virtual environment it keeps there between runs.
#
# usage: scripts/stage-collection.sh DEST        prints the collection dir
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 DEST" >&2
    exit 2
fi

src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest_root="$1"
mkdir -p "${dest_root}"
dest_root="$(cd "${dest_root}" && pwd)"

namespace="$(sed -n 's/^namespace:[[:space:]]*//p' "${src}/galaxy.yml" | tr -d '"'"'"' \r')"
name="$(sed -n 's/^name:[[:space:]]*//p' "${src}/galaxy.yml" | tr -d '"'"'"' \r')"
dest="${dest_root}/ansible_collections/${namespace}/${name}"

if ! git -C "${src}" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "ERROR: ${src} is not a git work tree; cannot tell tracked files from build artefacts" >&2
    exit 1
fi

mkdir -p "${dest}"

# Remove everything but tests/output (ansible-test's results and cached venv).
find "${dest}" -mindepth 1 -maxdepth 1 ! -name tests ! -name .git -exec rm -rf {} +
if [[ -d "${dest}/tests" ]]; then
    find "${dest}/tests" -mindepth 1 -maxdepth 1 ! -name output -exec rm -rf {} +
fi

# Tracked + untracked-not-ignored files that exist in the work tree
# (a tracked file deleted in the work tree is skipped).
git -C "${src}" ls-files -z --cached --others --exclude-standard \
    | (cd "${src}" && while IFS= read -r -d '' f; do
           if [[ -e "${f}" || -L "${f}" ]]; then printf '%s\0' "${f}"; fi
       done) \
    | sort -zu \
    | tar -C "${src}" --null --no-recursion -T - -cf - \
    | tar -C "${dest}" -xf -

# Make the copy its own (empty) git work tree: otherwise tools that ask git
# for the file list (ansible-test does) would see the enclosing repository,
# in which this copy is ignored, and find no files at all.  With an empty
# index, `git ls-files --others --exclude-standard` lists exactly the copy.
if [[ ! -d "${dest}/.git" ]]; then
    git -C "${dest}" init --quiet
fi

echo "${dest}"
