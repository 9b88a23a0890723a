#!/usr/bin/env bash
# Run the given make tiers, keep going after a failure, print a summary (each tier's time and the machine's
# 1-minute load average at its start and end: the machine is shared, a time means little without it; also
# kept in .cache/durations/test-tiers.txt, or check-tiers.txt) and exit non-zero if any tier failed. Each pytest tier keeps every
# test's time in .cache/durations/ too, and what went wrong in it: after the summary, every pytest run of this
# run that did not pass is named with its failed tests (CI keeps the end of the log only).
#
# usage: scripts/run-tiers.sh TIER...        one after the other (FAIL_FAST=1 stops at the first failure)
#        PARALLEL=1 scripts/run-tiers.sh TIER...
#                                            all at once (`make check`), each tier's output in
#                                            .cache/tiers/TIER.log, the end of a failed tier's log printed
set -uo pipefail

make_cmd="${MAKE:-make}"
declare -a names=() results=() durations=() loads=()
failed=0
load1() { cut -d' ' -f1 /proc/loadavg; }
total_start=${SECONDS}
mkdir -p .cache/durations
run_stamp=".cache/durations/.run-started"
touch "${run_stamp}"

record() {  # TIER RC SECONDS LOADS
    names+=("$1")
    durations+=("$3")
    loads+=("$4")
    if [[ $2 -eq 0 ]]; then
        results+=("ok")
    else
        results+=("FAILED (exit $2)")
        failed=$((failed + 1))
    fi
}

if [[ "${PARALLEL:-0}" == 1 ]]; then
    mkdir -p .cache/tiers
    declare -A pids=()
    load_start="$(load1)"
    for tier in "$@"; do
        (
            start=${SECONDS}
            "${make_cmd}" --no-print-directory "${tier}" >".cache/tiers/${tier}.log" 2>&1
            rc=$?
            echo "${rc} $((SECONDS - start)) $(load1)" >".cache/tiers/${tier}.result"
            exit "${rc}"
        ) &
        pids[${tier}]=$!
        echo "######## make ${tier} (output in .cache/tiers/${tier}.log)"
    done
    for tier in "$@"; do
        wait "${pids[${tier}]}"
        read -r rc seconds load_end <".cache/tiers/${tier}.result"
        record "${tier}" "${rc}" "${seconds}" "${load_start} -> ${load_end}"
        if [[ ${rc} -ne 0 ]]; then
            echo
            echo "######## make ${tier} FAILED: the end of .cache/tiers/${tier}.log"
            tail -n 60 ".cache/tiers/${tier}.log"
        fi
    done
else
    for tier in "$@"; do
        echo
        echo "######## make ${tier}"
        start=${SECONDS}
        load_start="$(load1)"
        "${make_cmd}" --no-print-directory "${tier}"
        rc=$?
        record "${tier}" "${rc}" "$((SECONDS - start))" "${load_start} -> $(load1)"
        if [[ ${rc} -ne 0 && "${FAIL_FAST:-0}" == 1 ]]; then
            break
        fi
    done
fi

summary() {
    echo "######## make ${MAKE_GOAL_NAME:-test} summary ($(date '+%Y-%m-%d %H:%M'), $(nproc) cores$([[ "${PARALLEL:-0}" == 1 ]] && echo ', tiers at once'))"
    printf '  %-12s %-18s %6s  %s\n' tier result time 'load average (1 min) at start -> end'
    for i in "${!names[@]}"; do
        printf '  %-12s %-18s %5ss  %s\n' "${names[$i]}" "${results[$i]}" "${durations[$i]}" "${loads[$i]}"
    done
    printf '  %-12s %-18s %5ss\n' total '' "$((SECONDS - total_start))"
}
# The pytest runs (tiers and the version tier's) of this run that did not pass, and what failed in them.
problems() {
    find .cache/durations -maxdepth 1 -name '*.json' -newer "${run_stamp}" -print0 | xargs -0 -r python3 -c '
import json, sys
exits = {1: "tests failed", 2: "interrupted or collection errors", 3: "internal error", 4: "usage error"}
for path in sorted(sys.argv[1:]):
    try:
        with open(path, encoding="utf-8") as handle:
            run = json.load(handle)
    except (OSError, ValueError):
        continue
    if not run.get("exit_status"):
        continue
    problems = run.get("problems") or []
    print("  %s: exit %s (%s)%s, %d problem(s):" % (run.get("tier"), run["exit_status"],
          exits.get(run["exit_status"], "?"), ", stopped: " + run["stopped"] if run.get("stopped") else "",
          len(problems)))
    for problem in problems[:8]:
        print("    %s %s: %s" % (problem["nodeid"], problem["when"], problem["line"][:160]))
    if len(problems) > 8:
        print("    ... and %d more (%s)" % (len(problems) - 8, path))
'
}
echo
summary | tee ".cache/durations/${MAKE_GOAL_NAME:-test}-tiers.txt"
if [[ ${failed} -ne 0 ]]; then
    problems
    echo "make ${MAKE_GOAL_NAME:-test}: ${failed} tier(s) failed"
    exit 1
fi
echo "make ${MAKE_GOAL_NAME:-test}: all tiers ok"
