#!/usr/bin/env bash
# Run molecule scenarios, if the collection has any:
#   molecule/<scenario>/molecule.yml              (classic layout)
#   extensions/molecule/<scenario>/molecule.yml   (collection layout)
# None found is an error: the tier must test something.
set -euo pipefail

ran=0
for base in . extensions; do
    if compgen -G "${base}/molecule/*/molecule.yml" >/dev/null; then
        scenarios="$(find "${base}/molecule" -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -n1 basename | sort | tr '\n' ' ')"
        echo "molecule: scenarios in ${base}/molecule: ${scenarios}"
        (cd "${base}" && molecule test --all)
        ran=1
    fi
done

if [[ ${ran} -eq 0 ]]; then
    echo "molecule: ERROR -- no molecule/*/molecule.yml or extensions/molecule/*/molecule.yml scenarios" >&2
    exit 1
fi
