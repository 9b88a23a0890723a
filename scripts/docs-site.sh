#!/usr/bin/env bash
# Build the collection's docs site as docs.ansible.com builds a collection's: antsibull-docs (sphinx-init, then
# its build.sh: antsibull-docs collection and sphinx-build with warnings as errors), from a staged copy of the
# collection. Every module, role, filter, callback, the event source and the guides of
# docs/docsite/extra-docs.yml; a broken reference, a malformed doc or an error page fails it.
#
# This machine reaches no documentation server, so the site has no intersphinx inventories: a reference to
# another collection (ansible.builtin, ...) cannot be resolved here and is not checked; every reference inside
# modelops.vllm is.
#
# usage: scripts/docs-site.sh DEST     (the site: DEST/site/build/html; the tools from scripts/publish-venv.sh)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$1"
mkdir -p "${dest}"
dest="$(cd "${dest}" && pwd)"
bin="$("${repo}/scripts/publish-venv.sh")"
export PATH="${bin}:${PATH}"

collection="$("${repo}/scripts/stage-collection.sh" "${dest}/collections")"
export ANSIBLE_COLLECTIONS_PATH="${dest}/collections"

echo "== docs-site: antsibull-docs lint-collection-docs --plugin-docs"
antsibull-docs lint-collection-docs --plugin-docs "${collection}"

echo "== docs-site: antsibull-docs sphinx-init"
rm -rf "${dest}/site"
mkdir -m 0755 "${dest}/site"  # antsibull-docs wants a directory only its owner may write
antsibull-docs sphinx-init --use-current --squash-hierarchy --fail-on-error --dest-dir "${dest}/site" modelops.vllm
cat >> "${dest}/site/conf.py" <<'PY'

# scripts/docs-site.sh: no intersphinx inventory can be fetched from here, so references outside modelops.vllm
# are not checked (nitpicky stays on for everything else).
intersphinx_mapping = {}
nitpick_ignore_regex = [
    (r'std:ref', r'ansible_collections\.(?!modelops\.vllm\.).*'),
    (r'std:ref', r'(?!ansible_collections\.).*'),
    (r'std:envvar', r'ANSIBLE_.*'),  # ansible-core's settings, named by the default callback's doc fragments
]
PY
echo "== docs-site: build.sh (antsibull-docs collection, sphinx-build -W --keep-going)"
"${dest}/site/build.sh"
html="${dest}/site/build/html"
echo "docs-site: ok, $(find "${html}" -name '*.html' | wc -l) HTML page(s) in ${html}"
