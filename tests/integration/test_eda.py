"""The event-driven restart (issue 11), every part real, on this machine.

Simulated vLLM servers (tests/simulator) busy decoding, in a long chunked prefill, idle, hung with
work in flight (two data-parallel engines, both hung: two stuck alerts for one host), restarted and
down are scraped every second by a real Prometheus with the collection's rules rendered short
(stuck after 10 s). Its alerts go to a real Alertmanager, which posts them (with a bearer token) to
a real ansible-rulebook running the collection's rulebook (``modelops.vllm.vllm_stuck``) with the
collection's Alertmanager source plugin. The rulebook runs the collection's watchdog playbook for
the alerting host only; the watchdog checks the server itself and restarts it through the
stand-ins of ``tests/standins/`` (``systemctl stop`` and ``start`` acting on the simulator). A real
node_exporter serves the textfile the watchdog writes, and Prometheus scrapes its verdict.

What it shows: the stuck alert fires for the hung server only; the hung server is restarted
exactly once (one playbook run, throttled per host); the others are never touched: no restart,
no service-manager call, not one request from the watchdog (only Prometheus's scrapes, by the
simulator's request log), no state directory; Prometheus has ``vllm_watchdog_verdict`` from
node_exporter. Then a forged stuck alert for a busy server (docs/prometheus.md's ``amtool`` line)
runs one watchdog check there, which restarts nothing and probes nothing. The timings are printed;
benchmarks/eda_latency.py measures them.

Needs: ``ansible-rulebook`` (``make venv``), Java 17+ (``scripts/ensure-eda.sh``), Prometheus,
Alertmanager, node_exporter (``scripts/ensure-prometheus.sh``): a missing one fails, naming the script.
Ports: the simulator on 127.0.0.1:27000-27499, the daemons and the webhook on 27900-27999.
Inventory hosts are local (``ansible_connection: local``): this is about the event path, not SSH.
"""

import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support import ansible_run
from tests.support import eda
from tests.support import prometheus as prom
from tests.support.ports import span

PORT_RANGE = span("eda")
DOCS = Path(eda.REPO) / "docs" / "prometheus.md"


@pytest.fixture(scope="module")
def versions():
    """Every tool of the event path with its version; a missing one fails with how to install it."""
    return eda.versions()


# ------------------------------------------------------------------------------------- static checks

def _parse_rulebook(data, variables=None):
    """ansible-rulebook's own schema check and parser (the collection's source plugin must resolve)."""
    from ansible_rulebook.conf import settings  # pylint: disable=import-outside-toplevel
    from ansible_rulebook.rules_parser import parse_rule_sets  # pylint: disable=import-outside-toplevel
    from ansible_rulebook.validators import Validate  # pylint: disable=import-outside-toplevel
    settings.ansible_galaxy_path = str(Path(sys.executable).with_name("ansible-galaxy"))
    Validate.rulebook(data)
    return parse_rule_sets(data, variables or {})


def test_the_rulebook_parses_and_names_the_collections_parts(versions):
    data = yaml.safe_load(eda.RULEBOOK_FILE.read_text())
    rulesets = _parse_rulebook(data)
    assert len(rulesets) == 1
    ruleset = rulesets[0]
    assert [s.source_name for s in ruleset.sources] == ["modelops.vllm.alertmanager"]
    assert ruleset.sources[0].source_args["data_host_path"] == "labels.vllm_host"
    run = data[0]["rules"][0]
    assert run["action"]["run_playbook"]["name"] == "modelops.vllm.watchdog"
    assert run["action"]["run_playbook"]["extra_vars"] == {"vllm_watchdog_hosts": "{{ event.alert.labels.vllm_host }}",
                                                           "vllm_watchdog_one_host": True}
    assert ruleset.sources[0].source_args["inventory"] == "{{ vllm_eda_inventory | default('') }}"
    assert run["throttle"]["group_by_attributes"] == ["event.alert.labels.vllm_host"]
    # The playbook it names exists where ansible-rulebook looks for it in a collection.
    assert (Path(eda.REPO) / "playbooks" / "watchdog.yml").is_file()


def test_the_awx_rulebook_of_the_docs_parses(versions):
    """docs/prometheus.md's rulebook for AWX / AAP (run_job_template), through ansible-rulebook's own
    schema and parser: the job template's name, organization, extra variables and limit."""
    blocks = dict(eda_examples())
    data = yaml.safe_load(blocks["eda-awx-rulebook"])
    ruleset = _parse_rulebook(data)[0]
    assert [s.source_name for s in ruleset.sources] == ["modelops.vllm.alertmanager"]
    action = data[0]["rules"][0]["action"]["run_job_template"]
    assert action["job_args"]["limit"] == "{{ event.alert.labels.vllm_host }}"
    assert action["job_args"]["extra_vars"] == {"vllm_watchdog_hosts": "{{ event.alert.labels.vllm_host }}",
                                                "vllm_watchdog_one_host": True}
    assert data[0]["rules"][0]["throttle"] == yaml.safe_load(eda.RULEBOOK_FILE.read_text())[0]["rules"][0]["throttle"]


def eda_examples():
    pattern = re.compile(r'<!-- example: ([\w-]+) -->\s*\n```\w*\n(.*?)\n```', re.S)
    return [(name, text) for name, text in pattern.findall(DOCS.read_text()) if name.startswith("eda-")]


def test_the_shipped_rules_carry_vllm_host_into_the_stuck_alert():
    rules = yaml.safe_load(prom.RULES.read_text())
    alerts = dict((rule["alert"], rule) for group in rules["groups"] for rule in group["rules"] if "alert" in rule)
    assert "group_left (vllm_host) (up == 1)" in alerts[eda.STUCK]["expr"]
    assert "group_left (vllm_host)" in alerts["VllmServerRestarted"]["expr"]
    assert set(alerts) >= {"VllmWatchdogNotRunning", "VllmWatchdogNeedsHuman"}


# ------------------------------------------------------------------------------------- end to end

def test_a_stuck_alert_restarts_that_server_once_through_ansible_rulebook(sim, tmp_path, versions):
    with eda.EdaStack(sim, tmp_path / "eda") as stack:
        names = stack.by_instance()
        hung_host = eda.host_of("hung")

        # The webhook refuses a POST without the token (Alertmanager's carries it).
        status, _body = _post(stack.rulebook.webhook_url, {"alerts": []})
        assert status == 401

        t_settled = stack.settle()
        assert not stack.prometheus.alerts(), stack.prometheus.alerts()
        assert stack.standins.calls() == []

        path = stack.hang_and_wait()
        span = int(path.times["run_done"] - stack.t_start) + 5

        # --- the alert: for the hung server's two engines only, with its vllm_host --------------
        ever_stuck = set((names[labels["instance"]], labels["engine"], labels.get("vllm_host"))
                         for labels, _value in stack.prometheus.values(
                             'max_over_time(ALERTS{alertname="%s"}[%ds])' % (eda.STUCK, span)))
        assert ever_stuck == {("hung", "0", hung_host), ("hung", "1", hung_host)}, ever_stuck
        received = stack.rulebook.received()
        stuck_received = [m for _t, m in received if "%s firing" % eda.STUCK in m]
        assert stuck_received and all(stack.instance("hung") in m for m in stuck_received), received
        # Both engines' alerts reached the rulebook (one notification per engine): the throttle per
        # host is what keeps the second from running the watchdog again (below: one action).
        hung_firing = "%s firing %s" % (eda.STUCK, stack.instance("hung"))
        assert sum(m.count(hung_firing) for m in stuck_received) >= 2, received
        # The others alerted too (restarted, metrics gone) and the rulebook ran nothing for them.
        assert any("VllmServerRestarted firing %s" % stack.instance("restarted") in m for _t, m in received), received
        assert any("VllmMetricsGone firing %s" % stack.instance("down") in m for _t, m in received), received

        # --- one rulebook action, one playbook run, for that host only ---------------------------
        assert len(stack.rulebook.actions()) == 1, stack.rulebook.log_tail()
        assert len(path.recaps) == 1, path.recaps
        recap = path.recaps[0]
        assert list(recap) == [hung_host], recap
        assert recap[hung_host]["failed"] == 0 and recap[hung_host]["unreachable"] == 0, recap
        assert recap[hung_host]["changed"] >= 1, recap  # changed only where it restarted

        # --- the restart: exactly once, by the service manager, of the hung server ---------------
        # (a stop, the wait for the memory, then the start: the start is the restart)
        assert [e["argv"] for e in path.restarts] == [["systemctl", "start", eda.service_of("hung")]], \
            stack.standins.calls()
        assert stack.standins.stops() == [["systemctl", "stop", eda.service_of("hung")]], stack.standins.calls()
        assert all(eda.service_of("hung") in argv for argv in stack.standins.calls()), stack.standins.calls()
        hung_info = sim.get(stack.servers["hung"]["id"])
        assert hung_info["restarts"] == 1 and hung_info["status"] == "listening", hung_info
        state_dir = stack.state_root / hung_host
        history = json.loads((state_dir / "vllm.json").read_text())
        assert len(history["restarts"]) == 1, history
        verdicts = [json.loads(line) for line in (state_dir / "vllm.verdicts.jsonl").read_text().splitlines()]
        # The run's verdict, then the outcome of its restart (a step line, not a run).
        assert [(v["state"], v["action"], bool(v.get("step"))) for v in verdicts] == [
            ("stuck", "restart", False), ("idle", "restarted", True)], verdicts
        # The alert's word is no proof: the run measured the freeze itself and watched it to the limit.
        assert verdicts[0]["frozen_for"] >= eda.FREEZE, verdicts
        assert len(list((state_dir / "evidence").glob("vllm-*.json"))) == 1

        # --- the others: never touched ----------------------------------------------------------
        assert sorted(os.listdir(stack.state_root)) == [hung_host]
        assert sorted(os.listdir(stack.textdir)) == ["%s.prom" % hung_host]
        for name in stack.servers:
            if name == "hung":
                continue
            requests = stack.requests(name)
            agents = set((r.get("headers") or {}).get("user-agent", "") for r in requests)
            assert requests and all(agent.startswith(eda.PROMETHEUS_UA) for agent in agents), (name, agents)
            counts = sim.request_counts(stack.servers[name]["id"])
            assert set(counts) <= {"GET /metrics"}, (name, counts)  # no probe, no /health, no /v1/models
        for name in ("busy", "prefill", "restarted"):
            assert stack.states()[(name, "0")] == "busy", stack.states()
        assert stack.states()[("idle", "0")] == "idle"
        assert sim.get(stack.servers["busy"]["id"])["restarts"] == 0
        # The hung one was read by the watchdog, with work in flight never probed (a probe, if any,
        # only after its restart, when idle).
        checks = stack.watchdog_requests("hung", since=path.times["hang"])
        before_restart = [r["path"] for r in checks if r["time"] < path.times["restart_command"]]
        assert before_restart.count("/metrics") >= 2, before_restart
        assert not [p for p in before_restart if p.startswith("/v1/")], before_restart

        # --- node_exporter serves the verdict; Prometheus scrapes it ------------------------------
        body = stack.node.metrics()
        assert 'vllm_watchdog_verdict{state="stuck",vllm_instance="vllm"} 1' in body, body[-3000:]
        assert 'node_textfile_scrape_error 0' in body

        def scraped():
            found = stack.prometheus.values('vllm_watchdog_verdict{job="node",state="stuck"} == 1')
            return found
        found = prom.wait_until(scraped, "vllm_watchdog_verdict in Prometheus", timeout=30)
        assert [(labels["vllm_instance"], labels["instance"]) for labels, _v in found] == [
            ("vllm", stack.node.address)], found
        assert stack.prometheus.values('vllm_watchdog_action{job="node",action="restart"}')[0][1] == 1.0
        assert stack.prometheus.values('vllm_watchdog_restarts_total{job="node"}')[0][1] == 1.0
        assert stack.prometheus.values('vllm_watchdog_needs_human{job="node"}')[0][1] == 0.0

        # --- a forged alert (docs/prometheus.md's amtool line) for a busy server: one check, no
        #     restart, no probe: the watchdog judges by its own reading, never by the alert --------
        forged_at = time.time()
        command = dict(eda_examples())["eda-fake-alert"]
        argv = shlex.split(command.replace("\\\n", " ")
                           .replace("gb10-01", eda.host_of("busy"))
                           .replace("10.0.0.1:8000", stack.instance("busy"))
                           .replace("http://alertmanager.example.com:9093", stack.alertmanager.url))
        assert argv[0] == "amtool"
        proc = prom.amtool(*argv[1:])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        prom.wait_until(lambda: len(stack.rulebook.recaps()) == 2, "the watchdog run of the forged alert",
                        timeout=120, describe=stack.rulebook.summary)
        second = stack.rulebook.recaps()[1]
        busy_host = eda.host_of("busy")
        assert list(second) == [busy_host] and second[busy_host]["failed"] == 0, second
        assert second[busy_host]["changed"] == 0, second  # nothing restarted
        assert stack.standins.restarts() == [["systemctl", "start", eda.service_of("hung")]]  # the one start, after its stop
        busy_verdicts = [json.loads(line) for line in
                         (stack.state_root / busy_host / "vllm.verdicts.jsonl").read_text().splitlines()]
        assert [(v["state"], v["action"]) for v in busy_verdicts] == [("busy", "none")], busy_verdicts
        busy_checks = [r["path"] for r in stack.watchdog_requests("busy", since=forged_at)]
        assert "/metrics" in busy_checks and not [p for p in busy_checks if p.startswith("/v1/")], busy_checks
        assert sim.get(stack.servers["busy"]["id"])["restarts"] == 0

        # --- the timeline, for the record (benchmarks/eda_latency.py measures it) ----------------
        parts = path.parts()
        assert all(value is not None and value >= 0 for value in parts.values()), (parts, path.times)
        print("\neda end to end (stuck after %ds, scrape/eval 1 s, group_wait 1 s): settled after %.1f s; %s"
              % (stack.settings["vllm_prometheus_stuck_seconds"], t_settled - stack.t_start,
                 json.dumps(parts, sort_keys=True)))

    # Every process of the stack is gone.
    assert not stack.rulebook.running() and not stack.prometheus.running()
    assert not stack.alertmanager.running() and not stack.node.running()


def _post(url, body, headers=None):
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# ------------------------------------------------------------------------------------- one host per alert (issue 16)

ONE_HOST = ("gb10-one", "gb10-two")


def _one_host_inventory(tmp_path, pool, marks):
    """Two local hosts, both in the group vllm and gb10-one also in rack1, each with an idle server of its own
    (tests/support/hostile.py) whose restart command only appends to a file: the watchdog may check them, and
    must restart neither."""
    from tests.support import hostile as h  # pylint: disable=import-outside-toplevel
    servers, hosts = {}, {}
    for name in ONE_HOST:
        servers[name] = pool.vllm(name=name, metrics=h.with_start_time(h.IDLE, time.time() - 7200))
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "vllm_url": servers[name].url, "vllm_watchdog_state_dir": str(tmp_path / "state" / name),
                       "vllm_watchdog_restart_method": "command", "vllm_watchdog_assume_url_is_service": True,
                       "vllm_watchdog_restart_command": ["sh", "-c", 'echo restart >> "$0"', str(marks)]}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {
        "vllm": {"hosts": hosts, "vars": dict(eda.FAST, vllm_watchdog_become=False)},
        "rack1": {"hosts": {"gb10-one": {}}}}}}))
    return servers, inventory


def _alert(host):
    return {"receiver": "vllm-watchdog", "status": "firing", "version": "4", "alerts": [
        {"status": "firing", "labels": {"alertname": eda.STUCK, "vllm_host": host, "instance": "10.0.0.1:8000",
                                        "engine": "0", "severity": "critical"},
         "annotations": {}, "startsAt": "2026-12-01T10:31:52Z", "endsAt": "0001-01-01T00:00:00Z"}]}


def _no_traceback(rulebook):
    text = rulebook.text()
    assert "Traceback" not in text, rulebook.log_tail()


@pytest.fixture(scope="module")
def rulebook_tools():
    """ansible-rulebook and its Java (the one-host test needs neither Prometheus nor Alertmanager)."""
    return eda.java_version(), eda.rulebook_bin()


def test_an_alert_for_all_or_a_group_checks_nothing_and_one_for_a_host_checks_that_host(tmp_path, rulebook_tools):
    """A real ansible-rulebook with the collection's rulebook and source. With vllm_eda_inventory, the source
    refuses (422, one log line) an alert whose vllm_host is all, a group, a pattern or a host the inventory does
    not have, so nothing runs; an alert for one host runs the watchdog there only. Without vllm_eda_inventory the
    source cannot know a group's name, and the playbook run refuses it itself (vllm_watchdog_one_host): every
    host of the group fails before any check, nothing is read, restarted or written."""
    from tests.support import hostile as h  # pylint: disable=import-outside-toplevel
    marks = tmp_path / "restarts"
    token = "eda-one-host-%s" % os.urandom(6).hex()
    auth = {"Authorization": "Bearer " + token}
    env = ansible_run.env({"ANSIBLE_ASYNC_DIR": str(tmp_path / "async")})
    with h.Servers() as pool:
        servers, inventory = _one_host_inventory(tmp_path, pool, marks)

        # --- the source knows the inventory -------------------------------------------------------------------
        with eda.Rulebook(tmp_path / "with-inventory", prom.free_port(eda.PORT_RANGE), inventory, env, token=token,
                          variables={"vllm_eda_inventory": str(inventory)}) as rulebook:
            refused = {}
            for bad in ("all", "ungrouped", "vllm", "rack1", "gb10-*", "gb10-one,gb10-two", "!gb10-one",
                        "gb10-three", "localhost"):
                refused[bad] = _post(rulebook.webhook_url, _alert(bad), auth)
            assert all(status == 422 for status, _body in refused.values()), refused
            assert "a group of the inventory" in refused["vllm"][1], refused
            assert "not a host of the inventory" in refused["gb10-three"][1], refused
            status, body = _post(rulebook.webhook_url, _alert("gb10-one"), auth)
            assert status == 202, (status, body)
            prom.wait_until(rulebook.recaps, "the watchdog run for gb10-one", timeout=180,
                            describe=rulebook.summary)
            time.sleep(3)  # nothing else runs after it
            assert len(rulebook.actions()) == 1, rulebook.summary()
            recap = rulebook.recaps()
            assert len(recap) == 1 and list(recap[0]) == ["gb10-one"], recap
            assert recap[0]["gb10-one"]["failed"] == 0 and recap[0]["gb10-one"]["changed"] == 0, recap
            lines = [m for _t, _n, level, m in rulebook.lines(contains="alertmanager: refused a POST")]
            assert len(lines) == len(refused), lines
            _no_traceback(rulebook)
        assert sorted(os.listdir(tmp_path / "state")) == ["gb10-one"]  # the other host was never looked at
        assert servers["gb10-one"].seen(path="/metrics") and not servers["gb10-two"].seen()
        assert not marks.exists()
        requests_before = len(servers["gb10-one"].seen())

        # --- the source does not know the inventory: the playbook refuses the group ---------------------------
        with eda.Rulebook(tmp_path / "without-inventory", prom.free_port(eda.PORT_RANGE), inventory, env,
                          token=token) as rulebook:
            assert _post(rulebook.webhook_url, _alert("all"), auth)[0] == 422  # a pattern it knows without one
            status, body = _post(rulebook.webhook_url, _alert("vllm"), auth)
            assert status == 202, (status, body)  # it cannot know that vllm is a group
            prom.wait_until(rulebook.recaps, "the run for the group", timeout=180, describe=rulebook.summary)
            recap = rulebook.recaps()[0]
            assert sorted(recap) == sorted(ONE_HOST), recap
            assert all(recap[host]["failed"] == 1 and recap[host]["ok"] == 0 for host in ONE_HOST), recap
            assert "which is not one inventory host" in rulebook.text(), rulebook.summary()
            _no_traceback(rulebook)
        assert sorted(os.listdir(tmp_path / "state")) == ["gb10-one"]  # nothing new written
        assert not servers["gb10-two"].seen() and not marks.exists()
        assert len(servers["gb10-one"].seen()) == requests_before  # not one request from the refused run
