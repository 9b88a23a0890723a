#!/usr/bin/env python
"""How long each field signature takes to be caught (restarted), measured on a scaled schedule and
projected to the defaults: a 5-minute schedule, and with the alert path (docs/prometheus.md).

The corpus of tests/support/field.py (one simulated server per reported signature) is watched by the
real role through ``ansible-playbook``, one run every ``--period`` seconds (the scaled schedule), with
a stall window of ``--window`` seconds. For each signature that must be restarted it records which run
restarted it, counted from the first run that started after the signature began (the run that sees
it first), and the stand-ins' restart time. That count is what does not depend on the scale:

    caught = phase (0..P after the hang began, P/2 on average) + (runs - 1) x P + C

with P the schedule's period and C the check's own duration (measured: run start to restart
command). The window rule needs a streak of ``window`` seconds starting at the first run that saw
the hang, so it needs ceil(window / P) more runs; the measured runs say whether any more were
needed. A frozen hang (nothing moves at all) needs a freeze of ``freeze_limit`` seconds: the run that
first sees it keeps watching it that long (the role's default freeze_wait), so C is the limit plus the
run's own time. The projection puts the defaults in: P = 300 s, window = 1200 s
(vllm_watchdog_stall_window), freeze limit 300 s (vllm_watchdog_freeze_limit).

The alert path: Prometheus sees a frozen engine with work in flight (VllmWatchdogCheck after 2
minutes, the rulebook runs the watchdog on the host: eda_latency.py measures it; that run measures the
freeze from its own first read, never from the alert's word, and watches it up to the limit); it cannot see an
idle-looking hang (running 0) at all; and for a livelock its VllmEngineLivelocked fires after the
same 20 minutes, when the watchdog's own memory (kept by the scheduled runs, whose streak began at
the first run after the hang) is short of the window by the phase, so its run says busy and the
restart comes with the next scheduled run: no faster than the schedule.

    .venv/bin/python benchmarks/field_signatures.py                     # window 30 s, a run every 10 s
    .venv/bin/python benchmarks/field_signatures.py --window 20 --period 8

Writes benchmarks/results/field_signatures.json (``--out``). Ports: the simulator on
127.0.0.1:28400-28599. About 2 minutes.
"""

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository root, for tests.support
    sys.path.insert(0, str(REPO))

from tests.simulator.client import run_simulator  # noqa: E402  pylint: disable=wrong-import-position
from tests.support import field  # noqa: E402  pylint: disable=wrong-import-position
from tests.support.ports import span  # noqa: E402  pylint: disable=wrong-import-position

OUT = REPO / "benchmarks" / "results" / "field_signatures.json"
DEFAULTS = {"period_s": 300, "window_s": 1200, "freeze_limit_s": 300, "watchdog_check_alert_s": 120,
            "livelock_alert_s": 1200}
# What Prometheus sees of each signature (docs/prometheus.md): a frozen engine with work in flight
# triggers the watchdog after 2 minutes; idle-looking hangs are invisible; livelocks fire after the window.
ALERT = {"idle-hang": None, "unscheduled": None, "dead-engine": "frozen", "deadlock": "livelock",
         "reprefill": "livelock", "reprefill-uncounted": "livelock", "stranded": "frozen"}


def measure(window, period, runs):
    with run_simulator(port_range=span("field-bench")) as sim, tempfile.TemporaryDirectory() as tmp:
        corpus = field.Corpus(sim, tmp, window, field.SCALED, [s for s in field.SIGNATURES if s.restart])
        corpus.start()
        try:
            for index in range(runs):
                begin = time.time()
                corpus.run()
                left = period - (time.time() - begin)
                if left > 0 and index + 1 < runs:
                    time.sleep(left)
        finally:
            corpus.stop()
        out = {}
        starts = [started for started, dummy, dummy2, dummy3 in corpus.runs]
        for sig in corpus.signatures:
            restarts = corpus.restarts(sig.host)
            began = corpus.started[sig.host]
            first = next(i for i, at in enumerate(starts) if at >= began)
            caught = None
            if restarts:
                at = restarts[0]["time"]
                run = max(i for i, started in enumerate(starts) if started <= at)
                caught = {"runs": run - first + 1, "seconds": round(at - began, 1),
                          "check_seconds": round(at - starts[run], 1)}
            out[sig.host] = {"source": sig.source, "what": sig.what, "restarts": len(restarts), "caught": caught,
                             "window_runs": math.ceil(window / period) if sig.verdicts else 0}
        return out, [round(b - a, 1) for a, b in zip(starts, starts[1:])]


def project(measured, freeze):
    """The measured runs at the defaults. ``freeze``: the scaled freeze limit the runs watched."""
    p, w, limit = DEFAULTS["period_s"], DEFAULTS["window_s"], DEFAULTS["freeze_limit_s"]
    rows = {}
    for host, m in measured.items():
        if not m["caught"]:
            rows[host] = None
            continue
        extra = m["caught"]["runs"] - 1 - m["window_runs"]  # runs beyond what the window needs
        needs = math.ceil(w / p) if m["window_runs"] else 0
        check = m["caught"]["check_seconds"]
        if not m["window_runs"]:
            # A frozen hang: the run watched the scaled limit; at the defaults it watches 300 s.
            check = max(0.0, check - freeze) + limit
        schedule = {"expected_s": round(p / 2 + (needs + extra) * p + check), "worst_s": round(p + (needs + extra) * p + check)}
        kind = ALERT.get(host)
        if kind == "frozen":
            # Work in flight and nothing moves: VllmWatchdogCheck after 2 minutes runs the watchdog (eda_latency.py),
            # which watches the freeze from its own first read up to the limit (check includes it).
            alert = {"expected_s": min(schedule["expected_s"], DEFAULTS["watchdog_check_alert_s"] + round(check)),
                     "worst_s": min(schedule["worst_s"], DEFAULTS["watchdog_check_alert_s"] + round(check))}
            if m["window_runs"]:  # stranded: the check still needs its window, as on the schedule
                alert = dict(schedule)
        elif kind == "livelock":
            alert = dict(schedule)  # no faster: the alert comes when the memory is still short of the window
        else:
            alert = None  # Prometheus cannot see an idle-looking hang
        rows[host] = {"extra_runs": extra, "schedule": schedule, "alert_path": alert}
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=0, help="default: enough for the window plus three runs")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    runs = args.runs or int(math.ceil(args.window / args.period)) + 4
    measured, spacing = measure(args.window, args.period, runs)
    projected = project(measured, field.FREEZE)
    result = {"measured": {"window_s": args.window, "period_s": args.period, "freeze_limit_s": field.FREEZE,
                           "runs": runs, "run_spacing_s": spacing, "signatures": measured},
              "projected_defaults": dict(DEFAULTS, signatures=projected),
              "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print("| signature | source | scaled: runs to catch (window needs) | scaled: seconds | 5-minute schedule: "
          "expected / worst | with the alert path: expected / worst |")
    print("|---|---|---|---|---|---|")
    for host, m in measured.items():
        p = projected[host]
        sched = "%d s / %d s" % (p["schedule"]["expected_s"], p["schedule"]["worst_s"]) if p else "not caught"
        alert = ("%d s / %d s" % (p["alert_path"]["expected_s"], p["alert_path"]["worst_s"])
                 if p and p["alert_path"] else "not seen by Prometheus" if p else "-")
        caught = m["caught"]
        print("| %s | %s | %s (%d) | %s | %s | %s |" % (
            host, m["source"], caught["runs"] if caught else "-", m["window_runs"], caught["seconds"] if caught else "-",
            sched, alert))
    missed = [host for host, m in measured.items() if m["restarts"] != 1]
    if missed:
        print("NOT restarted exactly once: %s" % ", ".join(missed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
