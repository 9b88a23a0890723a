#!/usr/bin/env bash
# The guides of docs/*.md as the extra docs of the collection's docs site: docs/docsite/rst/<page>.rst, generated
# by pandoc (Debian's package; scripts/ensure-tools.sh pandoc) with scripts/docs-rst.lua. The Markdown is the
# source: edit docs/*.md, then run this; docs/docsite/extra-docs.yml lists the pages, and
# tests/integration/test_publish.py fails when a generated page is not what this script writes.
#
# usage: scripts/docs-rst.sh [DEST]     (default: docs/docsite/rst of the checkout)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-${repo}/docs/docsite/rst}"
mkdir -p "${dest}"
find "${dest}" -maxdepth 1 -name '*.rst' -delete
for md in "${repo}"/docs/*.md; do
    page="$(basename "${md}" .md)"
    {
        echo '..'
        echo "   Generated from docs/${page}.md by scripts/docs-rst.sh: edit the Markdown, then run the script."
        echo
        # pandoc writes a raw block and the heading after it without the blank line RST needs between them.
        pandoc --from gfm --to rst --wrap none --lua-filter "${repo}/scripts/docs-rst.lua" \
            --metadata "page=${page}" "${md}" \
            | awk '{ print } /^\.\. _ansible_collections\..*:$/ { print "" }'
    } > "${dest}/${page}.rst"
done
echo "docs-rst: $(find "${dest}" -maxdepth 1 -name '*.rst' | wc -l) page(s) in ${dest#"${repo}/"}"
