#!/usr/bin/env bash
# Run molecule scenarios, if the collection has any:
#   molecule/<scenario>/molecule.yml              (classic layout)
#   extensions/molecule/<scenario>/molecule.yml   (collection layout)
# None found is an error: the tier must test something.
set -euo pipefail

# One molecule run at a time on this checkout: each scenario's simulator takes the ports of its molecule_ports, and
# the version tier runs two of the scenarios again (scripts/versions-tier.sh takes the same lock). Waits for it.
mkdir -p .cache
exec 8>.cache/molecule.lock
flock -w 1800 8 || { echo "molecule: ERROR -- another molecule run held .cache/molecule.lock for 30 minutes" >&2; exit 1; }

ran=0
for base in . extensions; do
    if compgen -G "${base}/molecule/*/molecule.yml" >/dev/null; then
        scenarios="$(find "${base}/molecule" -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -n1 basename | sort | tr '\n' ' ')"
        echo "molecule: scenarios in ${base}/molecule: ${scenarios}"
        # Molecule looks for a scenario named "default" first and, this collection having none, logs
        # "CRITICAL 'molecule/default/molecule.yml' glob failed." before it runs the others: labelled here as
        # what it is, so that a passing run prints no unlabelled CRITICAL.
        # One after the other. Molecule's --workers (EXPERIMENTAL in molecule 25) runs them side by side, but then
        # leaves out each scenario's destroy: the simulators create.yml started kept running after the tier (seen:
        # six of them, each until its own 600 s timeout). MOLECULE_WORKERS=N still asks for it.
        (cd "${base}" && PYTHONUNBUFFERED=1 molecule test --all --workers "${MOLECULE_WORKERS:-1}") 2>&1 | sed -u -E \
            "s#^.*CRITICAL.*'([^']*/)?molecule/default/molecule\.yml' glob failed.*\$#molecule: expected, not an error: there is no default scenario (molecule probes for molecule/default/molecule.yml first and logs 'CRITICAL ... glob failed')#"
        ran=1
    fi
done

if [[ ${ran} -eq 0 ]]; then
    echo "molecule: ERROR -- no molecule/*/molecule.yml or extensions/molecule/*/molecule.yml scenarios" >&2
    exit 1
fi
