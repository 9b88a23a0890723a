"""The Prometheus rules of ``extensions/prometheus/`` (idle / busy / stuck, restarts, metrics gone),
checked by promtool and run for real.

* ``promtool check rules`` and ``promtool test rules`` on the shipped file and its unit tests
  (``extensions/prometheus/tests/``); the shipped file is the template rendered with its defaults
  by ``ansible.builtin.template``.
* End to end: simulated vLLM servers (tests/simulator) in every state are scraped every second by
  a real Prometheus with the rules rendered with a short window (stuck after 10 s without
  progress), which sends its alerts to a real Alertmanager, which delivers them by webhook to a
  receiver in this test. The stuck alert must reach the webhook for the hung engines only.
* A real node_exporter serves a textfile as the watchdog role will write it.

Debian's binaries (``scripts/ensure-prometheus.sh``); a missing one is an error, not a skip.
Ports: the simulator on 127.0.0.1:26000-26499, Prometheus, Alertmanager, node_exporter and the
webhook on 26900-26999 (tests/support/prometheus.py).
"""

import contextlib
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import prometheus as prom
from tests.support.ports import span

PORT_RANGE = span("prometheus")

# The end-to-end settings: stuck after 10 s without progress, each evaluation looking back 4 s
# (4 scrapes at 1 s), so the alert is pending for 6 s; a restart stays visible for 2 minutes; a
# target down for 5 s is "metrics gone".
SHORT = {
    "vllm_prometheus_stuck_seconds": 10,
    "vllm_prometheus_progress_window_seconds": 4,
    "vllm_prometheus_restart_window_seconds": 120,
    "vllm_prometheus_down_seconds": 5,
}
LONG = 10_000_000  # max_tokens: decoding for the whole test
STUCK = "VllmEngineStuck"
RESTARTED = "VllmServerRestarted"
GONE = "VllmMetricsGone"


@pytest.fixture(scope="module")
def versions():
    """Every binary the tests need, with its version; a missing one fails with the install hint."""
    return dict((name, prom.version(name)) for name in prom.TOOLS)


def _ok(proc):
    return "rc %s\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr)


# ------------------------------------------------------------------------------------------ promtool

def test_promtool_checks_the_shipped_rules(versions):
    proc = prom.promtool("check", "rules", prom.RULES)
    assert proc.returncode == 0, _ok(proc)
    assert "SUCCESS" in proc.stdout and "rules found" in proc.stdout, _ok(proc)


def test_promtool_unit_tests_of_the_rules_pass(versions):
    tests = sorted(prom.RULE_TESTS_DIR.glob("*.yml"))
    assert tests, "no promtool tests in %s" % prom.RULE_TESTS_DIR
    proc = prom.promtool("test", "rules", *tests)
    assert proc.returncode == 0, _ok(proc)
    assert "SUCCESS" in proc.stdout and "FAILED" not in proc.stdout, _ok(proc)


def test_amtool_routes_the_docs_alerts_to_the_watchdog_and_pages_only_on_the_stuck_alert(tmp_path, versions):
    """The Alertmanager routes of docs/prometheus.md, as the real amtool routes them."""
    import yaml  # pylint: disable=import-outside-toplevel
    from tests.support import alert_routes  # pylint: disable=import-outside-toplevel
    routes = alert_routes.doc_routes()
    assert len(routes) >= 2
    for index, route in enumerate(routes):
        path = tmp_path / ("alertmanager-%d.yml" % index)
        path.write_text(yaml.safe_dump(alert_routes.config_with_receivers(route)))
        check = prom.amtool("check-config", path)
        assert check.returncode == 0, _ok(check)
        for name in sorted(alert_routes.rulebook_alerts()):
            labels = alert_routes.labels_of(name)
            proc = prom.amtool("config", "routes", "test", "--config.file=%s" % path,
                               *("%s=%s" % item for item in sorted(labels.items())))
            assert proc.returncode == 0, _ok(proc)
            receivers = set(proc.stdout.strip().split(","))
            assert alert_routes.WATCHDOG in receivers, (index, name, proc.stdout)
            others = receivers - {alert_routes.WATCHDOG, alert_routes.SILENT}
            assert bool(others) == (labels["severity"] != "none"), (index, name, proc.stdout)


def test_shipped_rules_are_the_template_rendered_with_defaults(tmp_path):
    rendered = prom.render_rules(tmp_path / "vllm.rules.yml")
    assert rendered.read_text() == prom.RULES.read_text(), (
        "extensions/prometheus/vllm.rules.yml is not what vllm.rules.yml.j2 renders with its defaults: "
        "re-render it (docs/prometheus.md)")


def test_template_renders_short_windows_and_refuses_a_window_longer_than_stuck(tmp_path, versions):
    rendered = prom.render_rules(tmp_path / "short.yml", SHORT)
    text = rendered.read_text()
    assert "[4s]" in text and "for: 6s" in text and "no progress for 10s" in text, text
    assert "[2m]" in text and "for: 5s" in text, text
    proc = prom.promtool("check", "rules", rendered)
    assert proc.returncode == 0, _ok(proc)
    with pytest.raises(prom.PrometheusError):
        prom.render_rules(tmp_path / "bad.yml", {"vllm_prometheus_stuck_seconds": 60,
                                                 "vllm_prometheus_progress_window_seconds": 120})
    assert not (tmp_path / "bad.yml").exists()


def test_the_documented_render_command_works(tmp_path, versions):
    """docs/prometheus.md's one-liner, as written, with only the destination changed."""
    doc = (prom.REPO / "docs" / "prometheus.md").read_text()
    found = dict(re.findall(r"<!-- example: ([\w-]+) -->\s*\n```\w*\n(.*?)\n```", doc, re.S))
    command = found["prometheus-render"]
    dest = tmp_path / "vllm.rules.yml"
    assert "/etc/prometheus/rules/vllm.rules.yml" in command
    argv = shlex.split(command.replace("\\\n", " ").replace("/etc/prometheus/rules/vllm.rules.yml", str(dest)))
    assert argv[0] == "ansible"
    argv[0] = str(Path(sys.executable).with_name("ansible"))
    proc = subprocess.run(argv, cwd=prom.REPO, capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="False",
                                   ANSIBLE_INVENTORY_UNPARSED_WARNING="False"))
    assert proc.returncode == 0, _ok(proc)
    text = dest.read_text()
    assert "[30s]" in text and "for: 90s" in text and "no progress for 2m" in text, text
    check = prom.promtool("check", "rules", dest)
    assert check.returncode == 0, _ok(check)


# ------------------------------------------------------------------------------------- node_exporter

def test_node_exporter_serves_the_watchdog_textfile(tmp_path, versions):
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    _write_textfile(textdir / "vllm_watchdog.prom", 'vllm_watchdog_verdict{instance="x",state="stuck"} 1\n')
    with prom.NodeExporter(tmp_path / "node", prom.free_port(), textdir) as node:
        body = node.metrics()
        assert 'vllm_watchdog_verdict{instance="x",state="stuck"} 1' in body, body[-3000:]
        # node_exporter reads the directory at every scrape: a rewritten file is served at once.
        _write_textfile(textdir / "vllm_watchdog.prom", 'vllm_watchdog_verdict{instance="x",state="idle"} 1\n')
        body = node.metrics()
        assert 'vllm_watchdog_verdict{instance="x",state="idle"} 1' in body, body[-3000:]
        assert 'state="stuck"' not in body
        assert 'node_textfile_scrape_error 0' in body, body[-3000:]


def _write_textfile(path, text):
    """As a writer of the textfile collector must: a temp file in the same directory, then a rename."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# ------------------------------------------------------------------------------------- end to end

def _ts(rfc3339):
    """Alertmanager's ``2026-12-01T10:31:52.123456789Z`` as a Unix time."""
    text = rfc3339.rstrip("Z")
    if "." in text:
        head, frac = text.split(".", 1)
        text = head + "." + frac[:6]
    else:
        text += ".0"
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def test_stuck_alert_reaches_the_webhook_for_the_hung_engines_only(sim, tmp_path, versions):
    rules = prom.render_rules(tmp_path / "vllm.rules.yml", SHORT)
    check = prom.promtool("check", "rules", rules)
    assert check.returncode == 0, _ok(check)

    # --- the simulated servers -----------------------------------------------------------------
    spec = {
        "busy": {},                    # decoding all the time
        "prefill": {"chunk_tokens": 4},  # a 30,000-token prompt in 4-token chunks: KV moves, steps do not
        "idle": {},                    # nothing in flight
        "idle_hung": {},               # hung while idle: reads exactly like idle
        "hung": {},                    # hung with work in flight: the one that is stuck
        "restarted": {},               # busy, restarted, busy again
        "restarted_mp": {"multiprocess": True},  # --api-server-count > 1: no start time
        "stopped": {},                 # busy, then the process is gone
        "dp": {"engines": 2},          # data parallel: engine 1 hangs, engine 0 keeps decoding
        "sleeping": {},                # put to sleep with requests running
        "v0": {"flavor": "v0"},        # old names: no engine label, gpu_cache_usage_perc; hangs
    }
    servers = {}
    for name, options in spec.items():
        servers[name] = sim.create(**options)
    by_instance = dict(("127.0.0.1:%d" % s["port"], name) for name, s in servers.items())
    inst = dict((name, "127.0.0.1:%d" % s["port"]) for name, s in servers.items())
    for name in ("busy", "hung", "restarted", "restarted_mp", "stopped", "sleeping", "v0"):
        sim.start_load(servers[name]["id"], concurrency=2, max_tokens=LONG)
    for engine in (0, 1):
        sim.start_load(servers["dp"]["id"], concurrency=2, max_tokens=LONG, engine=engine)
    sim.start_load(servers["prefill"]["id"], concurrency=1, prompt_tokens=30000, max_tokens=1)
    for name in ("busy", "hung", "restarted", "restarted_mp", "stopped", "sleeping", "v0", "dp"):
        sim.wait_for(servers[name]["id"], lambda s: s["totals"]["generation_tokens"] > 0)
    sim.set_state(servers["sleeping"]["id"], "sleep", level=1)
    sim.set_state(servers["idle_hung"]["id"], "hang")

    textdir = tmp_path / "textfile"
    textdir.mkdir()
    _write_textfile(textdir / "vllm_watchdog.prom", 'vllm_watchdog_verdict{instance="x",state="stuck"} 1\n')

    with contextlib.ExitStack() as stack:
        hook = stack.enter_context(prom.WebhookReceiver(prom.free_port()))
        am = stack.enter_context(prom.Alertmanager(tmp_path / "alertmanager", prom.free_port(), hook.url))
        node = stack.enter_context(prom.NodeExporter(tmp_path / "node", prom.free_port(), textdir))
        server = stack.enter_context(prom.Prometheus(
            tmp_path / "prometheus", prom.free_port(), rule_files=[rules], alertmanager=am.address,
            scrape_configs=[prom.static_job("vllm", sorted(by_instance)),
                            prom.static_job("node", [node.address])]))
        t_start = time.time()

        def states():
            out = {}
            for labels, dummy in server.values("engine:vllm_state"):
                out[(by_instance.get(labels["instance"], labels["instance"]), labels["engine"])] = labels["state"]
            return out

        # 1. Every engine in its state before anything happens.
        before = {("busy", "0"): "busy", ("prefill", "0"): "busy", ("idle", "0"): "idle",
                  ("idle_hung", "0"): "idle", ("hung", "0"): "busy", ("restarted", "0"): "busy",
                  ("restarted_mp", "0"): "busy", ("stopped", "0"): "busy", ("dp", "0"): "busy",
                  ("dp", "1"): "busy", ("sleeping", "0"): "sleeping", ("v0", "0"): "busy"}
        prom.wait_until(lambda: states() == before, "every engine in its first state: %s" % before, timeout=60,
                        describe=lambda: "states now: %s\nalerts: %s" % (states(), server.alerts()))
        assert not server.alerts(), server.alerts()
        t_settled = time.time()

        # 2. The events.
        events = {}
        sim.set_state(servers["hung"]["id"], "hang")
        events["hang"] = time.time()
        sim.set_state(servers["dp"]["id"], "hang", engine=1)
        sim.set_state(servers["v0"]["id"], "hang")
        sim.set_state(servers["restarted"]["id"], "restart", load_seconds=0.5)
        events["restart"] = time.time()
        sim.set_state(servers["restarted_mp"]["id"], "restart", load_seconds=0.5)
        sim.set_state(servers["stopped"]["id"], "stop")
        events["stop"] = time.time()
        sim.wait_for(servers["restarted"]["id"], lambda s: s["status"] == "listening")
        sim.start_load(servers["restarted"]["id"], concurrency=2, max_tokens=LONG)
        events["busy_again"] = time.time()

        # 3. What reaches the webhook.
        def firing(alertname, name, engine=None):
            def match(alert):
                labels = alert["labels"]
                return (alert["status"] == "firing" and labels.get("alertname") == alertname
                        and labels.get("instance") == inst[name]
                        and (engine is None or labels.get("engine") == engine))
            return match

        stuck_hung = hook.wait_for(firing(STUCK, "hung", "0"), "the stuck alert of the hung server", timeout=90)
        stuck_dp = hook.wait_for(firing(STUCK, "dp", "1"), "the stuck alert of data-parallel engine 1", timeout=60)
        stuck_v0 = hook.wait_for(firing(STUCK, "v0", "0"), "the stuck alert of the V0 server", timeout=60)
        gone = hook.wait_for(firing(GONE, "stopped"), "the metrics-gone alert of the stopped server", timeout=60)
        restarted = hook.wait_for(firing(RESTARTED, "restarted"), "the restart of the restarted server", timeout=60)
        restarted_mp = hook.wait_for(firing(RESTARTED, "restarted_mp"), "the restart of the multiprocess server",
                                     timeout=60)
        states_when_stuck = states()

        # Give every other engine the time to be called stuck wrongly: the whole stuck window and
        # a few seconds more after the restarted server got its work back.
        settle = events["busy_again"] + SHORT["vllm_prometheus_stuck_seconds"] + 8
        while time.time() < settle:
            time.sleep(0.5)
        span = int(time.time() - t_start) + 5

        # 4. The hung server resumes: the alert resolves.
        sim.set_state(servers["hung"]["id"], "resume")
        events["resume"] = time.time()
        resolved = hook.wait_for(
            lambda a: a["status"] == "resolved" and a["labels"].get("alertname") == STUCK
            and a["labels"].get("instance") == inst["hung"], "the resolved stuck alert of the hung server",
            timeout=60)

        # --- assertions ------------------------------------------------------------------------
        assert not hook.errors, hook.errors
        received = hook.alerts()
        stuck_received = set((by_instance[a["labels"]["instance"]], a["labels"]["engine"])
                             for a in received if a["labels"]["alertname"] == STUCK)
        assert stuck_received == {("hung", "0"), ("dp", "1"), ("v0", "0")}, received

        # Prometheus's own record, pending included: no other engine was ever even pending.
        ever_stuck = set((by_instance[labels["instance"]], labels["engine"]) for labels, dummy in server.values(
            'max_over_time(ALERTS{alertname="%s"}[%ds])' % (STUCK, span)))
        assert ever_stuck == {("hung", "0"), ("dp", "1"), ("v0", "0")}, ever_stuck

        for alert, name, engine, model in ((stuck_hung, "hung", "0", "tiny"), (stuck_dp, "dp", "1", "tiny"),
                                           (stuck_v0, "v0", "0", "tiny")):
            labels = alert["labels"]
            assert labels["instance"] == inst[name]
            assert labels["engine"] == engine
            assert labels["model_name"] == model
            assert labels["severity"] == "critical"
            assert labels["state"] == "stuck"
            assert labels["job"] == "vllm"
            assert alert["annotations"]["summary"] == (
                "vLLM engine %s on %s (model %s) is stuck: requests in flight and no progress for 10s."
                % (engine, inst[name], model)), alert
            assert "none of the engine's progress series moved" in alert["annotations"]["description"].lower()

        assert states_when_stuck[("hung", "0")] == "stalled", states_when_stuck
        assert states_when_stuck[("dp", "1")] == "stalled", states_when_stuck
        assert states_when_stuck[("dp", "0")] == "busy", states_when_stuck
        assert states_when_stuck[("v0", "0")] == "stalled", states_when_stuck
        assert states_when_stuck[("busy", "0")] == "busy", states_when_stuck
        assert states_when_stuck[("prefill", "0")] == "busy", states_when_stuck
        assert states_when_stuck[("idle", "0")] == "idle", states_when_stuck
        # What PromQL cannot know: an engine hung while idle reads exactly like an idle one.
        assert states_when_stuck[("idle_hung", "0")] == "idle", states_when_stuck
        assert states_when_stuck[("sleeping", "0")] == "sleeping", states_when_stuck
        assert ("stopped", "0") not in states_when_stuck, states_when_stuck
        assert states()[("restarted", "0")] == "busy"

        # The prefill really was a KV-only prefill: the step counter never moved, the KV cache did.
        prefill = 'instance="%s"' % inst["prefill"]
        assert server.values('changes(vllm:iteration_tokens_total_count{%s}[%ds])' % (prefill, span))[0][1] == 0
        assert server.values('changes(vllm:prompt_tokens_total{%s}[%ds])' % (prefill, span))[0][1] == 0
        assert server.values('changes(vllm:kv_cache_usage_perc{%s}[%ds])' % (prefill, span))[0][1] > 0

        # Metrics gone: the stopped server only.
        gone_received = set(by_instance[a["labels"]["instance"]] for a in received
                            if a["labels"]["alertname"] == GONE)
        assert gone_received == {"stopped"}, received
        assert gone["labels"]["severity"] == "warning" and gone["labels"]["state"] == "down"
        ever_gone = set(by_instance[labels["instance"]] for labels, dummy in server.values(
            'max_over_time(ALERTS{alertname="%s",alertstate="firing"}[%ds])' % (GONE, span)))
        assert ever_gone == {"stopped"}, ever_gone

        # Restarts: recorded by the start time, and by counter resets without one.
        restarted_received = set(by_instance[a["labels"]["instance"]] for a in received
                                 if a["labels"]["alertname"] == RESTARTED)
        assert restarted_received == {"restarted", "restarted_mp"}, received
        assert restarted["labels"]["severity"] == "info" and restarted["labels"]["state"] == "restarted"
        recorded = dict((by_instance[labels["instance"]], value) for labels, value in server.values(
            "instance:vllm_process_restarts:changes"))
        assert recorded.pop("restarted") >= 1 and recorded.pop("restarted_mp") >= 1, recorded
        assert all(value == 0 for value in recorded.values()), recorded

        # The watchdog's textfile, through node_exporter, in Prometheus: the target's own instance
        # label wins, the file's becomes exported_instance (honor_labels is false by default).
        verdicts = server.values('vllm_watchdog_verdict{job="node"}')
        assert [(v[0]["exported_instance"], v[0]["state"], v[0]["instance"], v[1]) for v in verdicts] == [
            ("x", "stuck", node.address, 1.0)], verdicts
        assert resolved["labels"]["engine"] == "0"

        measured = {
            "settle_seconds": round(t_settled - t_start, 1),
            "hang_to_prometheus_firing_s": round(_ts(stuck_hung["startsAt"]) - events["hang"], 1),
            "hang_to_webhook_s": round(stuck_hung["received"] - events["hang"], 1),
            "restart_to_webhook_s": round(restarted["received"] - events["restart"], 1),
            "restart_mp_to_webhook_s": round(restarted_mp["received"] - events["restart"], 1),
            "stop_to_webhook_s": round(gone["received"] - events["stop"], 1),
            "resume_to_resolved_webhook_s": round(resolved["received"] - events["resume"], 1),
            "settings": SHORT,
            "versions": versions,
        }
        print("\nprometheus end to end (scrape and evaluation every 1 s, group_wait 1 s): "
              + json.dumps(measured, sort_keys=True))
