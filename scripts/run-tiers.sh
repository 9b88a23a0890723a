#!/usr/bin/env bash
# Run the given make tiers one after the other, keep going after a failure,
# print a summary and exit non-zero if any tier failed.
#
# usage: scripts/run-tiers.sh TIER...        (FAIL_FAST=1 stops at the first failure)
set -uo pipefail

make_cmd="${MAKE:-make}"
declare -a names=() results=() durations=()
failed=0

for tier in "$@"; do
    echo
    echo "######## make ${tier}"
    start=${SECONDS}
    "${make_cmd}" --no-print-directory "${tier}"
    rc=$?
    names+=("${tier}")
    durations+=("$((SECONDS - start))")
    if [[ ${rc} -eq 0 ]]; then
        results+=("ok")
    else
        results+=("FAILED (exit ${rc})")
        failed=$((failed + 1))
        if [[ "${FAIL_FAST:-0}" == 1 ]]; then
            break
        fi
    fi
done

echo
echo "######## make test summary"
for i in "${!names[@]}"; do
    printf '  %-12s %-18s %5ss\n' "${names[$i]}" "${results[$i]}" "${durations[$i]}"
done
if [[ ${failed} -ne 0 ]]; then
    echo "make test: ${failed} tier(s) failed"
    exit 1
fi
echo "make test: all tiers ok"
