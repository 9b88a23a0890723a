#!/usr/bin/env bash
# Run one pytest tier.  A tier without test files, or whose files pytest
# collects nothing from (exit 5), fails: a tier that quietly runs nothing
# would pass CI without testing anything.
#
# Every test's time goes to .cache/durations/NAME.json (or $MODELOPS_DURATIONS), the slowest printed at
# the end (tests/support/durations.py).
#
# usage: scripts/pytest-tier.sh NAME DIR [pytest args...]
set -euo pipefail

name="$1"
dir="$2"
shift 2

if [[ ! -d "${dir}" ]] || [[ -z "$(find "${dir}" -type f \( -name 'test_*.py' -o -name '*_test.py' \) -print -quit)" ]]; then
    echo "${name}: ERROR -- no test_*.py files under ${dir}/" >&2
    exit 1
fi

rc=0
MODELOPS_TIER="${MODELOPS_TIER:-${name}}" python -m pytest -p tests.support.durations "${dir}" "$@" || rc=$?
if [[ ${rc} -eq 5 ]]; then
    echo "${name}: ERROR -- ${dir}/ has test files but pytest collected no tests" >&2
    exit 1
fi
exit "${rc}"
