"""The SSH fleet harness itself (tests/support/sshfleet.py), through ``ansible`` and ``ansible-playbook``.

A real sshd on loopback, one address per inventory host, one simulated vLLM server per host on
that address. What is proven here, as users run Ansible:

* ``ansible -m ping`` over SSH reaches 10 hosts, one TCP connection per host, each to the host's
  own address (sshd's log), and every command runs in a session sshd saw from that address
  (``$SSH_CONNECTION``);
* ``modelops.vllm.health`` run on each host over SSH with ``url: "{{ vllm_url }}"`` reaches that
  host's own simulated server (the simulator's request counts and Host headers per server) and
  judges each host by its own state;
* only the fleet's key gets in;
* the watchdog over SSH names a misspelled ``vllm_url`` and a misspelled role variable (once each, with the
  closest name), in check mode leaves nothing on the hosts (no state, no background-check directory), and is
  red for an inventory without the group ``vllm``, naming the pattern and the inventory;
* a second fleet runs beside the first without either seeing the other's connections, and after
  ``stop()`` nothing listens on its port, no sshd process of it is left (not even a connection
  held open by a client Ansible does not manage), and its vLLM ports are closed.

* the watchdog over SSH (issue 15): a misspelt ``vllm_ulr`` on a busy host restarts nothing and names the
  problem; the look-alikes (a dead engine whose process still listens on the URL, a closed port whose URL was
  seen serving) are restarted, with the stand-ins for ``systemctl`` (the play's ``environment``).

sshd ports 25000-25099, simulator control ports 25500-25999 (``PORT_RANGE``), host addresses
127.0.25.x, 127.0.26.x and 127.0.27.x. If sshd is missing, the fleets fail saying to run scripts/ensure-sshd.sh.
"""

import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.support import ansible_run
from tests.support import sshfleet
from tests.support.sshfleet import SSHFleet, SSHFleetError
from tests.support.ports import bindable, span

PORT_RANGE = span("sshfleet")  # the simulator control ports of this module
SSH_PORT = 25000
SECOND_SSH_PORT = 25001
FIRST_ADDRESS = "127.0.25.2"
SECOND_FIRST_ADDRESS = "127.0.26.2"
SIZE = 10
# Each host's simulated state, and the verdict modelops.vllm.health must reach for it.
STATES = ["busy", "idle", "stuck", "down", "busy", "idle", "busy", "stuck", "busy", "idle"]

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def fleet(ssh_fleet):
    built = ssh_fleet(SIZE, SSH_PORT, first_address=FIRST_ADDRESS)
    built.set_states(dict(zip(built.hosts, STATES)))
    return built


def save_play(var, group="vllm"):
    """A play on the controller writing ``{host: hostvars[host][var]}`` to ``{{ out_dir }}/<var>.json``."""
    return """
- name: Save what every host returned
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write {var}
      ansible.builtin.copy:
        content: "{{{{ dict(groups['{group}'] | zip(groups['{group}'] | map('extract', hostvars, '{var}'))) | to_json }}}}"
        dest: "{{{{ out_dir }}}}/{var}.json"
        mode: "0600"
""".format(var=var, group=group)


def adhoc(inventory, *args, forks=5):
    """``ansible vllm -i inventory <args>`` as a user runs it; returns the CompletedProcess."""
    cmd = [ansible_run._bin("ansible"), "vllm", "-i", inventory, "-f", str(forks)] + list(args)  # pylint: disable=protected-access
    return subprocess.run(cmd, capture_output=True, text=True, env=ansible_run.env(), timeout=300,
                          stdin=subprocess.DEVNULL, check=False)


def fresh_run(fleet):
    """Close the persistent connections left by earlier runs (ControlPersist), so this run opens
    its own; returns a mark in sshd's log."""
    assert fleet.close_connections(), "sshd still has connections: %s" % fleet.sshd_pids()
    return fleet.log_mark()


def test_ping_over_ssh_opens_one_connection_per_host_at_its_own_address(fleet):
    mark = fresh_run(fleet)
    proc = adhoc(fleet.inventory(), "-m", "ansible.builtin.ping")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for host in fleet.hosts:
        assert "%s | SUCCESS" % host in proc.stdout
    assert proc.stdout.count('"ping": "pong"') == SIZE
    counts = fleet.session_counts(mark)
    # one TCP connection per host, each to that host's own address, all on the fleet's port
    assert counts["by_server"] == dict((address, 1) for address in fleet.addresses), counts
    assert set(c["server_port"] for c in fleet.connections(mark)) == {SSH_PORT}
    assert all(c["client"] == "127.0.0.1" for c in fleet.connections(mark))
    # the module really ran through sshd: commands and an sftp transfer on every connection
    ports = set(c["client_port"] for c in fleet.connections(mark))
    sessions = fleet.sessions(mark)
    assert set(s["client_port"] for s in sessions) == ports
    assert sum(1 for s in sessions if s["kind"] == "subsystem 'sftp'") == SIZE
    assert all(s["user"] == fleet.user for s in sessions)


def test_every_host_is_reached_at_its_own_address(fleet, tmp_path):
    play = """
- name: Where each host was reached
  hosts: vllm
  gather_facts: false
  tasks:
    - name: The connection as sshd saw it
      ansible.builtin.command: printenv SSH_CONNECTION
      register: ssh_connection
      changed_when: false
""" + save_play("ssh_connection")
    run = ansible_run.run_playbook(play, inventory=fleet.inventory(), workdir=str(tmp_path), args=["-f", "5"])
    assert run.rc == 0, run
    seen = run.outputs["ssh_connection.json"]
    assert sorted(seen) == sorted(fleet.hosts)
    for host in fleet.hosts:
        client, dummy_client_port, server, server_port = seen[host]["stdout"].split()
        assert (client, server, int(server_port)) == ("127.0.0.1", fleet.address(host), SSH_PORT), (host, seen[host])


def test_health_over_ssh_reaches_each_hosts_own_server(fleet, tmp_path):
    for host in fleet.hosts:
        fleet.sim.reset_counts(fleet.server_id(host))
    mark = fresh_run(fleet)
    play = """
- name: Check each host's own vLLM, on the host
  hosts: vllm
  gather_facts: false
  tasks:
    - name: Judge the server from its own metrics
      modelops.vllm.health:
        url: "{{ vllm_url }}"
        interval: 1
        freeze_limit: 2  # the hung hosts' proof within this check's two waits (the default is 300 s)
      register: vllm_health
""" + save_play("vllm_health")
    run = ansible_run.run_playbook(play, inventory=fleet.inventory(), workdir=str(tmp_path), args=["-f", "5"])
    assert run.rc == 0, run
    verdicts = run.outputs["vllm_health.json"]
    got = dict((host, verdicts[host].get("state")) for host in fleet.hosts)
    assert got == dict(zip(fleet.hosts, STATES)), json.dumps(verdicts, indent=1)[:4000]
    # each check ran on its host, over SSH: one new connection per host address
    assert fleet.session_counts(mark)["by_server"] == dict((a, 1) for a in fleet.addresses)
    for host, state in zip(fleet.hosts, STATES):
        sid = fleet.server_id(host)
        if state == "down":
            assert fleet.sim.get(sid)["status"] == "stopped"
            continue
        counts = fleet.sim.request_counts(sid)
        assert counts.get("GET /metrics", 0) >= 2, (host, counts)
        # every request this server got was addressed to this host's own address
        hosts_addressed = set(r["headers"].get("host") for r in fleet.sim.requests(sid))  # names in lower case
        assert hosts_addressed == {"%s:%d" % (fleet.address(host), fleet.vllm_port)}, (host, hosts_addressed)
        # the probe went only to the idle ones
        assert ("POST /v1/completions" in counts) == (state == "idle"), (host, state, counts)


def test_only_the_fleets_key_gets_in(fleet, tmp_path):
    base = ["ssh", "-p", str(SSH_PORT), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "ControlMaster=no", "-o", "ControlPath=none"]
    target = "%s@%s" % (fleet.user, fleet.addresses[3])
    good = subprocess.run(base + ["-i", str(fleet.client_key), target, "printenv SSH_CONNECTION"],
                          capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert good.returncode == 0, good.stderr
    assert good.stdout.split()[2:] == [fleet.addresses[3], str(SSH_PORT)]
    other_key = sshfleet.generate_key(tmp_path / "other", "not-the-fleets")
    bad = subprocess.run(base + ["-i", str(other_key), target, "true"],
                         capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert bad.returncode == 255
    assert "Permission denied" in bad.stderr


WATCHDOG_PLAY = "- name: The watchdog\n  ansible.builtin.import_playbook: modelops.vllm.watchdog\n"


def check_dirs():
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "modelops-vllm-check-*")))


def test_a_typo_over_ssh_is_named_check_mode_leaves_nothing_and_no_group_is_red(fleet, tmp_path):
    path = fleet.inventory(str(tmp_path / "inventory.json"))
    with open(path) as handle:
        data = json.load(handle)
    typo_host = fleet.hosts[0]
    hostvars = data["all"]["children"]["vllm"]["hosts"][typo_host]
    hostvars["vllm_ulr"] = hostvars.pop("vllm_url")
    with open(path, "w") as handle:
        json.dump(data, handle)
    state = tmp_path / "state"
    temp_before = check_dirs()
    run = ansible_run.run_playbook(WATCHDOG_PLAY, inventory=path, workdir=str(tmp_path / "run"), args=[
        "--check", "-f", "5", "-e", "vllm_watchdog_become=false", "-e", "vllm_watchdog_interval=1",
        "-e", "vllm_watchdog_freeze_limit=2",
        "-e", "vllm_watchdog_state_dir=%s/{{ inventory_hostname }}" % state,
        # (a misspelled name of what a restart acts on, vllm_watchdog_restart_methd, is an error: test_output.py)
        "-e", "vllm_watchdog_cooldwn=60"])
    said = run.stderr
    # Named once each (not once per host), with the host that has it and the closest known name.
    assert said.count("vllm_ulr (set on %s) is not a variable of modelops.vllm" % typo_host) == 1, run
    assert "did you mean vllm_url?" in said, run
    assert said.count("vllm_watchdog_cooldwn (set on ") == 1, run
    assert "did you mean vllm_watchdog_cooldown?" in said, run
    # Every host was watched (a line each in the summary), and check mode left nothing anywhere.
    for host in fleet.hosts:
        assert "%s/vllm: " % host in run.stdout, (host, run)
    assert not state.exists(), sorted(str(p) for p in state.rglob("*"))
    assert check_dirs() - temp_before == set()

    # An inventory without the group vllm: red, naming the pattern and the inventory.
    data["all"]["children"] = {"gpus": data["all"]["children"]["vllm"]}
    other = tmp_path / "no-vllm-group.json"
    other.write_text(json.dumps(data))
    run = ansible_run.run_playbook(WATCHDOG_PLAY, inventory=str(other), workdir=str(tmp_path / "run2"),
                                   args=["--check", "-e", "vllm_watchdog_become=false"])
    assert run.rc == 2, run
    assert ('No host to watch: the host pattern "vllm" (vllm_watchdog_hosts) matches no host of the inventory %s, '
            'whose groups are gpus (%d host(s))' % (other, SIZE)) in run.stdout, run


def test_missing_sshd_fails_saying_how_to_install_it(monkeypatch):
    monkeypatch.setattr(sshfleet, "SSHD_BIN", "/nonexistent/sshd")
    fleet = SSHFleet(1, SECOND_SSH_PORT, first_address=SECOND_FIRST_ADDRESS)
    with pytest.raises(SSHFleetError, match="scripts/ensure-sshd.sh"):
        fleet.start()
    assert fleet.sshd is None and fleet not in sshfleet._LIVE  # pylint: disable=protected-access


def _refused(address, port):
    try:
        with socket.create_connection((address, port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def test_a_second_fleet_runs_beside_and_stops_leaving_nothing(fleet, ssh_fleet):
    second = ssh_fleet(3, SECOND_SSH_PORT, first_address=SECOND_FIRST_ADDRESS)
    first_mark = fresh_run(fleet)
    proc = adhoc(second.inventory(), "-m", "ansible.builtin.ping")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert second.session_counts()["by_server"] == dict((a, 1) for a in second.addresses)
    assert fleet.connections(first_mark) == []  # the first fleet's sshd saw none of it

    # A connection Ansible does not manage, held open: stop() must end it too.
    held = subprocess.Popen(  # pylint: disable=consider-using-with
        ["ssh", "-N", "-p", str(SECOND_SSH_PORT), "-i", str(second.client_key), "-o", "BatchMode=yes",
         "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "LogLevel=ERROR", "-o", "ControlMaster=no", "-o", "ControlPath=none",
         "%s@%s" % (second.user, second.addresses[0])],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while len(second.connections()) < 4 or len(second.sshd_pids()) < 5:
            assert time.monotonic() < deadline, "the held connection did not come up: %s" % second.log_text()[-2000:]
            assert held.poll() is None, held.stderr.read()
            time.sleep(0.1)
        # the listener, Ansible's persistent connections (ControlPersist) and the held one
        pids = second.sshd_pids()
        assert len(pids) >= 5, pids
        listening = sshfleet.listening_sockets(SECOND_SSH_PORT)
        assert listening, "sshd does not listen on %d" % SECOND_SSH_PORT

        second.stop()

        assert held.wait(timeout=30) == 255  # its server side is gone
        left = [pid for pid in pids if sshfleet.alive(pid)]
        assert left == [], "left behind: %s" % left
        assert sshfleet.listening_sockets(SECOND_SSH_PORT) == []
        assert all(_refused(address, SECOND_SSH_PORT) for address in second.addresses)
        assert all(_refused(address, second.vllm_port) for address in second.addresses)
        # the held connection was ended by stop(); Ansible's were closed from the client side first
        assert any(note.startswith("ended") for note in second.sshd.stop_notes), second.sshd.stop_notes
        assert "Received signal 15; terminating." in second.final_log
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
        held.stderr.close()
    # the first fleet is untouched
    proc = adhoc(fleet.inventory(), "-m", "ansible.builtin.ping", "--limit", fleet.hosts[0])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


# --------------------------------------------------------------------------------------- the watchdog over SSH

WATCHDOG_SSH_PORT = 25002
WATCHDOG_FIRST_ADDRESS = "127.0.27.2"


def test_a_misspelt_vllm_url_over_ssh_restarts_nothing_and_the_look_alikes_are_restarted(ssh_fleet, tmp_path):
    """Issue 15: ``vllm_ulr`` instead of ``vllm_url`` on a busy host, over real SSH: the check falls back to
    http://127.0.0.1:8000, where nothing is, and the service manager says the unit runs for two hours. Nothing is
    restarted, and the line names the problem. The look-alikes are restarted: a host whose engine died while its
    process still listens on the URL's address and port, and one whose port closed after it was seen serving there."""
    from tests.support.standins import Standins, standins_path  # pylint: disable=import-outside-toplevel
    assert bindable(8000), "something listens on 127.0.0.1:8000 (the role's default URL): this test needs it free"
    # Up for two hours (vLLM's own process_start_time_seconds), as the service manager says: past the start-up grace.
    fleet = ssh_fleet(3, WATCHDOG_SSH_PORT, first_address=WATCHDOG_FIRST_ADDRESS, server_options={"process_age": 7200})
    typo, dead, seen = fleet.hosts
    fleet.set_states({typo: "busy", dead: "busy", seen: "busy"})
    fleet.sim.set_state(fleet.server_id(dead), "dead")  # /health 503, the port still open
    standins = Standins(str(tmp_path), fleet.sim.base_url)
    services = dict(("vllm-" + host, {"server": fleet.server_id(host), "state": "running",
                                      "started_at": time.time() - 7200, "load_seconds": 1}) for host in fleet.hosts)
    standins.write(services)
    env = dict(standins.env(), PATH=standins_path())
    extra = dict((host, {"vllm_watchdog_service": "vllm-" + host, "vllm_watchdog_state_dir": str(tmp_path / host),
                         "vllm_watchdog_kernel_log": "", "vllm_watchdog_interval": 1,
                         "vllm_watchdog_freeze_limit": 2,
                         "vllm_watchdog_probe_timeout": 4, "vllm_watchdog_ready_delay": 1,
                         "vllm_watchdog_ready_timeout": 60}) for host in fleet.hosts)
    inventory = json.loads(open(fleet.inventory(str(tmp_path / "inventory.json"), extra_host_vars=extra)).read())
    hosts = inventory["all"]["children"]["vllm"]["hosts"]
    hosts[typo]["vllm_ulr"] = hosts[typo].pop("vllm_url")  # the typo
    path = tmp_path / "inventory-typo.json"
    path.write_text(json.dumps(inventory))
    play = ansible_run.watchdog_role_play(environment=env)

    first = ansible_run.run_playbook(play, inventory=str(path), workdir=str(tmp_path / "run1"), args=["-f", "5"])
    assert first.rc == 2, first  # the typo needs a human
    result = first.outputs["%s.json" % typo][0]
    assert result["state"] == "down" and result["action"] == "fail" and not result["restarted"], result
    assert "The URL may be wrong" in result["line"], result
    assert "only the role's default fallback: no vllm_url" in result["line"], result
    assert "not on 127.0.0.1:8000" in result["decision"], result  # the service's process listens elsewhere
    assert fleet.sim.get(fleet.server_id(typo))["restarts"] == 0
    assert fleet.sim.stats(fleet.server_id(typo))["totals"]["running"] > 0
    lookalike = first.outputs["%s.json" % dead][0]
    assert lookalike["state"] == "down" and lookalike["action"] == "restarted", lookalike
    assert "listens on %s:%d" % (fleet.address(dead), fleet.vllm_port) in lookalike["decision"], lookalike
    assert first.outputs["%s.json" % seen][0]["state"] == "busy"

    fleet.sim.set_state(fleet.server_id(seen), "stop")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a main process, no port
    try:
        data = json.loads(open(standins.config).read())
        data["services"]["vllm-" + seen]["main_pid"] = sleeper.pid
        with open(standins.config, "w") as handle:
            json.dump(data, handle)
        second = ansible_run.run_playbook(play, inventory=str(path), workdir=str(tmp_path / "run2"), args=["-f", "5"])
    finally:
        sleeper.kill()
        sleeper.wait()
    again = second.outputs["%s.json" % seen][0]
    assert again["state"] == "down" and again["action"] == "restarted", again
    assert "it was seen serving at this URL" in again["decision"], again
    assert second.outputs["%s.json" % typo][0]["action"] == "fail"
    touched = [argv for argv in standins.calls() if "vllm-" + typo in argv and argv[1] in ("stop", "start", "restart")]
    assert touched == [], standins.calls()
    assert fleet.sim.get(fleet.server_id(typo))["restarts"] == 0
    # every host was reached over SSH at its own address
    assert set(c["server"] for c in fleet.connections()) == set(fleet.addresses)
