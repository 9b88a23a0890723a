#!/usr/bin/env python
"""From a hang to its restart through the event path (issue 11), against a 5-minute schedule.

Every part is real (tests/support/eda.py, the stack of tests/integration/test_eda.py): simulated
vLLM servers in every state scraped every second by Prometheus with the collection's rules rendered
short (stuck after 10 s without progress), Alertmanager (group_wait 1 s), ansible-rulebook running
``modelops.vllm.vllm_stuck`` with the collection's Alertmanager source, the watchdog playbook, the
stand-ins' ``systemctl stop`` and ``start``. Each run hangs the hung server (two data-parallel engines, work in
flight) and times every step from the simulator's, Alertmanager's, the rulebook's and the
stand-ins' own records:

  hang -> alert fired (Prometheus's FiredAt, as Alertmanager has it; the first of the hung server's
          VllmWatchdogCheck and VllmEngineStuck, which fire together at these short settings)
       -> webhook (the source plugin's log line for the first of them)
       -> rulebook action (ansible-rulebook's ``call_action run_playbook``)
       -> first read of the watchdog's check (the simulator's request log, the check's User-Agent)
       -> restart command (the stand-in's argv log)

Side by side: a schedule of period P (300 s) finds a hang that happens at a random moment after
P/2 on average and P at worst, then pays the check's own duration C, measured here in the same
runs (rulebook action -> restart command: ansible-playbook starting, the check, the gate, the
evidence, the restart command; a scheduled run pays the same). The shipped rules wait 5 minutes
(``vllm_prometheus_stuck_seconds``) before the alert fires, so the alert path with the defaults is
projected too, from the measured parts and the stated Prometheus and Alertmanager settings.

    .venv/bin/python benchmarks/eda_latency.py                    # 3 runs, then 2 with two busy loops
    .venv/bin/python benchmarks/eda_latency.py --runs 1 --loaded-runs 0

Writes benchmarks/results/eda_latency.json (``--out`` to change). Ports: the simulator on
127.0.0.1:27500-27899, the daemons on 27900-27999. Needs what the test needs (scripts/ensure-eda.sh,
scripts/ensure-prometheus.sh, make venv). About 45 s per run on 2 cores.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository root, for tests.support
    sys.path.insert(0, str(REPO))

from tests.simulator.client import run_simulator  # noqa: E402  pylint: disable=wrong-import-position
from tests.support import eda  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.ports import span  # noqa: E402  pylint: disable=wrong-import-position

SIM_PORTS = span("eda-bench")
OUT = REPO / "benchmarks" / "results" / "eda_latency.json"
PARTS = ("hang_to_alert_fired_s", "alert_fired_to_webhook_s", "webhook_to_rulebook_action_s",
         "rulebook_action_to_first_check_read_s", "first_check_read_to_restart_command_s",
         "rulebook_action_to_restart_command_s", "hang_to_restart_command_s")

# Production settings the projection assumes (docs/prometheus.md recommends them for vLLM).
PRODUCTION = {"scrape_interval_s": 15, "evaluation_interval_s": 15, "group_wait_s": 10}


def one_run(workdir, busy_loops):
    """One hang -> restart through the event path; returns the run's record."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])  # pylint: disable=consider-using-with
             for _loop in range(busy_loops)]
    try:
        load_before = os.getloadavg()
        with run_simulator(port_range=SIM_PORTS) as sim, eda.EdaStack(sim, workdir) as stack:
            settled = stack.settle()
            path = stack.hang_and_wait()
            restarts = [e["argv"] for e in path.restarts]
            others = sorted(name for name in stack.servers if name != "hung"
                            and set(sim.request_counts(stack.servers[name]["id"])) - {"GET /metrics"})
            record = {
                "parts": path.parts(),
                "settle_s": round(settled - stack.t_start, 1),
                "restarts": restarts,
                "rulebook_actions": len(stack.rulebook.actions()),
                "playbook_runs": len(path.recaps),
                "other_servers_sent_more_than_scrapes": others,
                "loadavg_before": [round(x, 2) for x in load_before],
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                "extra_busy_loops": busy_loops,
            }
        ok = (restarts == [["systemctl", "start", eda.service_of("hung")]] and record["playbook_runs"] == 1
              and not others and all(record["parts"][p] is not None for p in PARTS))
        record["ok"] = ok
        return record
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def expected_min_uniform(period, alert):
    """E[min(U, A)] for U uniform on [0, period] (when the next scheduled run starts after a hang) and
    a fixed A (when the alert's run starts)."""
    if alert >= period:
        return period / 2.0
    return alert - alert * alert / (2.0 * period)


def compare(runs, period, test_stuck):
    """The schedule against the alert path: measured (test settings) and projected (production)."""
    check = statistics.median(r["parts"]["rulebook_action_to_restart_command_s"] for r in runs)
    check_max = max(r["parts"]["rulebook_action_to_restart_command_s"] for r in runs)
    measured = [r["parts"]["hang_to_restart_command_s"] for r in runs]
    # Everything of the alert path but the rule's own stuck time, measured: how late the alert fires
    # after the stuck time with 1 s scrapes and evaluations, the delivery (group_wait 1 s), the
    # rulebook's start of the action.
    fire_lag = statistics.median(r["parts"]["hang_to_alert_fired_s"] for r in runs) - test_stuck
    delivery = statistics.median(r["parts"]["alert_fired_to_webhook_s"] for r in runs) - 1.0  # less group_wait 1 s
    to_action = statistics.median(r["parts"]["webhook_to_rulebook_action_s"] for r in runs)
    out = {
        "schedule_period_s": period,
        "check_duration_s": {"median": round(check, 2), "max": round(check_max, 2),
                             "what": "rulebook action -> restart command, measured: ansible-playbook start, the "
                                     "check (3 reads 1 s apart), the gate, the evidence, the restart command"},
        "rows": [],
    }
    out["rows"].append({"path": "schedule alone, every %d s" % period,
                        "expected_s": round(period / 2.0 + check, 1), "worst_s": round(period + check_max, 1),
                        "how": "P/2 + C expected, P + C worst (a hang at a random moment)"})
    out["rows"].append({"path": "alert alone, stuck %d s, 1 s scrapes (measured)" % test_stuck,
                        "expected_s": round(statistics.median(measured), 1), "worst_s": round(max(measured), 1),
                        "how": "measured: median and max over the runs"})
    prod = PRODUCTION
    rest = max(fire_lag, 0) + max(delivery, 0) + to_action + prod["group_wait_s"]
    for stuck in (300, 120):
        # The alert fires after `stuck` seconds without progress plus up to one scrape and one evaluation
        # (half of each on average: a hang falls at a random phase of both); Alertmanager waits
        # group_wait; the delivery and the rulebook's start as measured.
        lag = prod["scrape_interval_s"] + prod["evaluation_interval_s"]
        typical, late = stuck + lag / 2.0 + rest, stuck + lag + rest
        out["rows"].append({
            "path": "alert alone, stuck %d s (projected)" % stuck,
            "expected_s": round(typical + check, 1), "worst_s": round(late + check_max, 1),
            "how": "stuck + (scrape %(scrape_interval_s)d s + evaluation %(evaluation_interval_s)d s) / 2 (worst: "
                   "both whole) + group_wait %(group_wait_s)d s + the measured delivery, rulebook start and C" % prod})
        out["rows"].append({
            "path": "schedule + alert, stuck %d s (projected)" % stuck,
            "expected_s": round(expected_min_uniform(period, typical) + check, 1),
            "worst_s": round(min(period, late) + check_max, 1),
            "how": "whichever starts the check first: E[min(U(0,P), A)] + C expected, min(P, A) + C worst"})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3, help="runs on the machine as it is (default 3)")
    parser.add_argument("--loaded-runs", type=int, default=2,
                        help="runs with two extra busy loops on the cores (default 2)")
    parser.add_argument("--period", type=int, default=300, help="the schedule's period in seconds (default 300)")
    parser.add_argument("--out", default=str(OUT), help="the JSON results (default %(default)s)")
    args = parser.parse_args(argv)

    versions = eda.versions()
    runs = []
    plan = [0] * args.runs + [2] * args.loaded_runs
    for index, loops in enumerate(plan):
        with tempfile.TemporaryDirectory(prefix="modelops-eda-bench-") as workdir:
            record = one_run(Path(workdir), loops)
        runs.append(record)
        print("run %d/%d (%d busy loops, load %s): %s%s" % (
            index + 1, len(plan), loops, record["loadavg_before"][0],
            json.dumps(record["parts"], sort_keys=True), "" if record["ok"] else "  NOT OK: %s" % record),
            flush=True)
    good = [r for r in runs if r["ok"]]
    if not good:
        print("no run went through; nothing to compare", file=sys.stderr)
        return 1
    result = {
        "what": "time from a hang (work in flight, nothing moves) to the watchdog's restart command through "
                "Prometheus -> Alertmanager -> ansible-rulebook (modelops.vllm.vllm_stuck) -> the watchdog "
                "playbook, against a schedule",
        "settings": {"rules": eda.SHORT, "scrape_interval_s": 1, "evaluation_interval_s": 1,
                     "alertmanager_group_wait_s": 1, "watchdog": eda.FAST},
        "parts": dict((part, spread([r["parts"][part] for r in good])) for part in PARTS),
        "parts_quiet": dict((part, spread([r["parts"][part] for r in good if not r["extra_busy_loops"]]))
                            for part in PARTS),
        "parts_loaded": dict((part, spread([r["parts"][part] for r in good if r["extra_busy_loops"]]))
                             for part in PARTS),
        "comparison": compare(good, args.period, eda.SHORT["vllm_prometheus_stuck_seconds"]),
        "projection_assumes": PRODUCTION,
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "versions": versions,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print("\n%-48s %10s %10s" % ("hang -> restart command", "expected", "worst"))
    for row in result["comparison"]["rows"]:
        print("%-48s %9.1fs %9.1fs" % (row["path"], row["expected_s"], row["worst_s"]))
    print("\nwritten: %s" % args.out)
    return 0 if len(good) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
