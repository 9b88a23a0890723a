#!/usr/bin/env bash
# Run the given make tiers one after the other, keep going after a failure,
# print a summary (each tier's time and the machine's 1-minute load average at its start and end: the
# machine is shared, a time means little without it; also kept in .cache/durations/tiers.txt) and exit
# non-zero if any tier failed. Each pytest tier keeps every test's time in .cache/durations/ too.
#
# usage: scripts/run-tiers.sh TIER...        (FAIL_FAST=1 stops at the first failure)
set -uo pipefail

make_cmd="${MAKE:-make}"
declare -a names=() results=() durations=() loads=()
failed=0
load1() { cut -d' ' -f1 /proc/loadavg; }
total_start=${SECONDS}

for tier in "$@"; do
    echo
    echo "######## make ${tier}"
    start=${SECONDS}
    load_start="$(load1)"
    "${make_cmd}" --no-print-directory "${tier}"
    rc=$?
    names+=("${tier}")
    durations+=("$((SECONDS - start))")
    loads+=("${load_start} -> $(load1)")
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

summary() {
    echo "######## make test summary ($(date '+%Y-%m-%d %H:%M'), $(nproc) cores)"
    printf '  %-12s %-18s %6s  %s\n' tier result time 'load average (1 min) at start -> end'
    for i in "${!names[@]}"; do
        printf '  %-12s %-18s %5ss  %s\n' "${names[$i]}" "${results[$i]}" "${durations[$i]}" "${loads[$i]}"
    done
    printf '  %-12s %-18s %5ss\n' total '' "$((SECONDS - total_start))"
}
echo
mkdir -p .cache/durations
summary | tee .cache/durations/tiers.txt
if [[ ${failed} -ne 0 ]]; then
    echo "make test: ${failed} tier(s) failed"
    exit 1
fi
echo "make test: all tiers ok"
