#!/usr/bin/env bash
# Run the given make tiers, keep going after a failure, print a summary (each tier's time, the machine's
# 1-minute load average at its start and end and how busy both cores were meanwhile: the machine is shared,
# a time means little without it; also
# kept in .cache/durations/test-tiers.txt, or check-tiers.txt) and exit non-zero if any tier failed. Each pytest tier keeps every
# test's time in .cache/durations/ too, and what went wrong in it: after the summary, every pytest run of this
# run that did not pass is named with its failed tests (CI keeps the end of the log only).
#
# usage: scripts/run-tiers.sh TIER...        one after the other, output as it comes (FAIL_FAST=1 stops at
#                                            the first failure)
#        scripts/run-tiers.sh TIER... + TIER...
#                                            lanes at once: each "+" starts another lane, whose
#                                            tiers run one after the other beside the other lanes; each tier's
#                                            output in .cache/tiers/TIER.log, the end of a failed tier's log
#                                            printed (FAIL_FAST=1 stops a lane at its first failure)
#        PARALLEL=1 scripts/run-tiers.sh TIER...
#                                            every tier a lane of its own (`make check`)
set -uo pipefail

make_cmd="${MAKE:-make}"
declare -a names=() results=() durations=() loads=()
failed=0
load1() { cut -d' ' -f1 /proc/loadavg; }
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }  # busy total
cpu_busy() {  # "BUSY TOTAL" at the start: the share of both cores busy since then, in %
    local busy0 total0 busy1 total1
    read -r busy0 total0 <<<"$1"
    read -r busy1 total1 <<<"$(cpu_ticks)"
    echo "$(( (busy1 - busy0) * 100 / ((total1 - total0) > 0 ? (total1 - total0) : 1) ))"
}
total_start=${SECONDS}
total_cpu="$(cpu_ticks)"
mkdir -p .cache/durations .cache/tiers
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

run_tier() {  # TIER [LOG]: make TIER (its output into LOG if given); "RC SECONDS LOAD-START LOAD-END CPU%" into its .result
    local tier="$1" log="${2:-}" start=${SECONDS} load_start cpu_start rc
    load_start="$(load1)"
    cpu_start="$(cpu_ticks)"
    if [[ -n "${log}" ]]; then
        "${make_cmd}" --no-print-directory "${tier}" >"${log}" 2>&1
    else
        "${make_cmd}" --no-print-directory "${tier}"
    fi
    rc=$?
    echo "${rc} $((SECONDS - start)) ${load_start} $(load1) $(cpu_busy "${cpu_start}")" >".cache/tiers/${tier}.result"
    return "${rc}"
}

# Lanes: the arguments split at each "+"; a lane runs its tiers one after the other, the lanes run at once.
# PARALLEL=1 makes every tier a lane of its own.
declare -a lanes=()
lane=""
for arg in "$@"; do
    if [[ "${arg}" == "+" ]]; then
        lanes+=("${lane}")
        lane=""
    elif [[ "${PARALLEL:-0}" == 1 && -n "${lane}" ]]; then
        lanes+=("${lane}")
        lane="${arg}"
    else
        lane="${lane:+${lane} }${arg}"
    fi
done
lanes+=("${lane}")
declare -a order=()
for lane in "${lanes[@]}"; do
    for tier in ${lane}; do
        order+=("${tier}")
        rm -f ".cache/tiers/${tier}.result"
    done
done

finish() {  # TIER: record its result; a failed tier's log's end is printed when the lanes ran at once
    local tier="$1" rc seconds load_start load_end cpu
    if [[ ! -f ".cache/tiers/${tier}.result" ]]; then
        return  # not run (FAIL_FAST)
    fi
    read -r rc seconds load_start load_end cpu <".cache/tiers/${tier}.result"
    record "${tier}" "${rc}" "${seconds}" "${load_start} -> ${load_end}, cpu ${cpu} %"
    if [[ ${rc} -ne 0 && ${#lanes[@]} -gt 1 ]]; then
        echo
        echo "######## make ${tier} FAILED: the end of .cache/tiers/${tier}.log"
        tail -n 60 ".cache/tiers/${tier}.log"
    fi
}

if [[ ${#lanes[@]} -gt 1 ]]; then
    declare -a pids=()
    for lane in "${lanes[@]}"; do
        (
            for tier in ${lane}; do
                echo "######## make ${tier} started $(date '+%H:%M:%S') (output in .cache/tiers/${tier}.log)"
                run_tier "${tier}" ".cache/tiers/${tier}.log"
                rc=$?
                echo "######## make ${tier} $([[ ${rc} -eq 0 ]] && echo ok || echo "FAILED (exit ${rc})") $(date '+%H:%M:%S')"
                if [[ ${rc} -ne 0 && "${FAIL_FAST:-0}" == 1 ]]; then
                    break
                fi
            done
        ) &
        pids+=($!)
    done
    wait "${pids[@]}"
else
    for tier in "${order[@]}"; do
        echo
        echo "######## make ${tier}"
        run_tier "${tier}"
        rc=$?
        if [[ ${rc} -ne 0 && "${FAIL_FAST:-0}" == 1 ]]; then
            break
        fi
    done
fi
for tier in "${order[@]}"; do
    finish "${tier}"
done

summary() {
    echo "######## make ${MAKE_GOAL_NAME:-test} summary ($(date '+%Y-%m-%d %H:%M'), $(nproc) cores$([[ ${#lanes[@]} -gt 1 ]] && echo ", lanes at once: $(IFS='|'; echo "${lanes[*]}")"))"
    printf '  %-12s %-18s %6s  %s\n' tier result time 'load average (1 min) at start -> end, both cores busy'
    for i in "${!names[@]}"; do
        printf '  %-12s %-18s %5ss  %s\n' "${names[$i]}" "${results[$i]}" "${durations[$i]}" "${loads[$i]}"
    done
    printf '  %-12s %-18s %5ss  cpu %s %%\n' total '' "$((SECONDS - total_start))" "$(cpu_busy "${total_cpu}")"
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
