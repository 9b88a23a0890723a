#!/usr/bin/env bash
# Check a built tarball as Galaxy and Automation Hub do on upload (docs/release.md):
#   1. galaxy-importer with its defaults (Galaxy);
#   2. galaxy-importer with Automation Hub's stricter options: require_v1_or_greater, check_required_tags and
#      run_flake8 (its ansible-test step needs a container engine; `make sanity` and `make versions` run sanity);
#   3. Automation Hub's linters of the EDA plugins, with the commands of galaxy-importer's own
#      ansible_test/container/eda/tox.ini (ruff --select ALL with its ignores, pylint with its disables).
# Fails when an import fails or prints a WARNING or ERROR line, or a linter finds anything.
#
# usage: scripts/publish-check.sh TARBALL     (the tools come from scripts/publish-venv.sh)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tarball="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
bin="$("${repo}/scripts/publish-venv.sh")"
work="$(mktemp -d "${TMPDIR:-/tmp}/modelops-publish.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
export PATH="${bin}:${PATH}"
failed=0

cat > "${work}/automation-hub.cfg" <<'CFG'
[galaxy-importer]
require_v1_or_greater = True
check_required_tags = True
run_flake8 = True
run_ansible_test = False
CFG
: > "${work}/galaxy.cfg"  # galaxy-importer's defaults

for config in galaxy automation-hub; do
    mkdir -p "${work}/${config}"
    echo "== publish-check: galaxy-importer ($(python -c 'import galaxy_importer; print(galaxy_importer.__version__)'))," \
         "${config} options: ${tarball##*/}"
    rc=0
    (cd "${work}/${config}" && GALAXY_IMPORTER_CONFIG="${work}/${config}.cfg" python -m galaxy_importer.main \
        "${tarball}") > "${work}/${config}.log" 2>&1 || rc=$?
    grep -vE '^(Loading|Linting|Running) ' "${work}/${config}.log" || true
    if [[ ${rc} -ne 0 ]] || ! grep -q '^Importer processing completed successfully' "${work}/${config}.log"; then
        echo "publish-check: ERROR: the ${config} import failed (rc ${rc})"
        failed=1
    elif grep -qE '^(WARNING|ERROR)' "${work}/${config}.log"; then
        echo "publish-check: ERROR: the ${config} import warned"
        failed=1
    fi
done

# Automation Hub's EDA linters, with the arguments of galaxy-importer's tox.ini (read from the installed package).
tox_ini="$(python -c 'import galaxy_importer, os; print(os.path.join(os.path.dirname(galaxy_importer.__file__),
    "ansible_test", "container", "eda", "tox.ini"))')"
mkdir -p "${work}/collection"
tar -xzf "${tarball}" -C "${work}/collection"
ruff_args="$(sed -n 's/^commands = - ruff check \(.*\) -q {posargs}.*/\1/p' "${tox_ini}")"
pylint_args="$(sed -n 's/^commands = - pylint {posargs}\/extensions\/eda\/plugins\/event_source\/\*\.py \(.*\)$/\1/p' "${tox_ini}")"
if [[ -z "${ruff_args}" || -z "${pylint_args}" ]]; then
    echo "publish-check: ERROR: ${tox_ini} no longer has the ruff and pylint commands this script reads"
    exit 1
fi
echo "== publish-check: ruff check ${ruff_args} extensions/eda/plugins"
# shellcheck disable=SC2086  # the options as the tox.ini writes them
(cd "${work}/collection" && ruff check ${ruff_args} --no-cache extensions/eda/plugins) || failed=1
echo "== publish-check: pylint extensions/eda/plugins/event_source/*.py ${pylint_args}"
# shellcheck disable=SC2086
(cd "${work}/collection" && pylint extensions/eda/plugins/event_source/*.py ${pylint_args}) || failed=1

if [[ ${failed} -ne 0 ]]; then
    echo "publish-check: FAILED"
    exit 1
fi
echo "publish-check: ok (Galaxy and Automation Hub would accept ${tarball##*/})"
