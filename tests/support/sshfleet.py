"""A fleet of hosts on this machine that Ansible reaches over real SSH, each with its own vLLM.

The tests and benchmarks otherwise use ``ansible_connection: local``; AWX reaches every host over
SSH. :class:`SSHFleet` gives ``size`` inventory hosts, each with

* its own loopback address (``127.0.0.2``, ``127.0.0.3``, ... by default), so Ansible opens one SSH
  connection per host exactly as it would to real hosts;
* a real OpenSSH server (Debian's ``/usr/sbin/sshd``, ``scripts/ensure-sshd.sh`` installs it) that
  answers on that address, with its own host key, config, port, pid file, authorized key and log
  in a work directory the fleet owns; key-only root login (the tests run as root);
* its own simulated vLLM server (``tests/simulator``) bound to that address, on port 8000 by
  default, so the collection's convention ``vllm_url: http://<ansible_host>:8000`` holds;
* an inventory (``inventory.json``; JSON is YAML, Ansible's yaml plugin reads it) with
  ``ansible_host``, ``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``,
  ``ansible_ssh_common_args``, ``ansible_python_interpreter`` (``sys.executable``) and ``vllm_url``
  per host, in group ``vllm``.

Usage::

    from tests.support.sshfleet import SSHFleet

    with SSHFleet(10, ssh_port=25000, sim_port_range="25500-25599") as fleet:
        fleet.set_states({"gb10-001": "busy", "gb10-002": "stuck", "gb10-003": "down"})
        inventory = fleet.inventory()            # path; run ansible-playbook -i inventory ...
        fleet.sim.request_counts(fleet.server_id("gb10-001"))
        fleet.connections(since=0)               # what sshd logged: one dict per TCP connection

Several fleets can run at once if each has its own ``ssh_port`` and its own address block
(``first_address``): sshd holds its port on every address (see below) and each host's vLLM holds
port 8000 on the host's own address.

How sshd answers on a hundred addresses
---------------------------------------
A socket bound to ``127.0.0.1`` does not accept connections to ``127.0.0.2``, and sshd has a small
compiled-in limit on listening sockets (``MAX_LISTEN_SOCKS``, 16; a 17th ``ListenAddress`` is fatal:
``Too many listen sockets``), so one daemon cannot bind 100 host addresses one by one. The choice
here: **one sshd listening on ``0.0.0.0:<port>``**, which accepts connections to every loopback
address (Linux routes all of ``127.0.0.0/8`` to ``lo``). It listens on the machine's other
interfaces too, so only loopback clients are let in:

* ``AllowUsers <user>@127.0.0.0/8``: a client from any other address is refused before
  authentication (sshd logs ``not listed in AllowUsers``);
* the only accepted credential is a key pair generated for this fleet, and its
  ``authorized_keys`` line carries ``from="127.0.0.0/8"`` as well; passwords, keyboard-interactive
  and PAM are off.

Why not several sshd processes with 16 ``ListenAddress`` each: it binds only the fleet's
addresses, but gives 7 daemons, logs and pid files for 100 hosts, to start, watch and stop, for no
difference Ansible can see: every connection still goes to its own host address
(``$SSH_CONNECTION`` and sshd's ``Connection from ... on 127.0.0.N`` show which). The cost of the
choice: the port is taken on every address of the machine, so two fleets need two ports.

Processes
---------
sshd runs as a direct child (``/usr/sbin/sshd -D -e -f <config>``, its own process group, logging
to ``sshd.log`` in the work dir; ready once it logs ``Server listening``, written after
``listen()``), with ``setpriv --pdeathsig TERM`` when available so it ends if
the Python process that started it dies abruptly; start fleets from a thread that outlives them
(the main thread). Every connection gets sshd children of its own, which sshd moves to a session
of their own (``setsid``); they are found by parent pid in ``/proc``. ``stop()`` (also run by the
context manager and by an ``atexit`` guard) first closes Ansible's persistent SSH connections
(``ssh -O exit`` on the control sockets, which the inventory puts in the work dir), lets sshd reap
the children that exit, ends any connection left over (``SIGSTOP`` the listener so it accepts
nothing new, ``SIGTERM`` its children, resume it so it reaps them, ``SIGKILL`` stragglers), then
ends the listener. The order matters: each process is reaped by its own parent, so when ``stop()``
returns none is left, not even a zombie (PID 1 on this machine reaps orphans only a second or so
later).

Standard library only, plus the simulator's client.
"""

import atexit
import ipaddress
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.simulator.client import SimulatorProcess
from tests.support import servers as server_states

SSHD_BIN = "/usr/sbin/sshd"
PRIVSEP_DIR = "/run/sshd"  # sshd's compiled-in privilege separation directory; must exist
INSTALL_HINT = "run scripts/ensure-sshd.sh (installs Debian's openssh-server and openssh-client)"
DEFAULT_FIRST_ADDRESS = "127.0.0.2"
DEFAULT_GROUP = "vllm"
VLLM_PORT = 8000
LOOPBACK = "127.0.0.0/8"
SSH_COMMON_ARGS = ("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes "
                   "-o LogLevel=ERROR")
# Simulated states set_state() knows (tests/support/servers.py); anything else: use fleet.sim with fleet.server_id(host).
STATES = server_states.STATES
_CONTROL_PATH_MAX = 60  # characters of the control path dir: ssh's socket path limit is 107 in all

CONNECTION_RE = re.compile(r"^Connection from (\S+) port (\d+) on (\S+) port (\d+)")
# "Starting session: command on pts/3 for root from 127.0.0.1 port 4711 id 0", "... subsystem 'sftp' for ..."
SESSION_RE = re.compile(r"^Starting session: (.*?)(?: on (\S+))? for (\S+) from (\S+) port (\d+) id (\d+)")


class SSHFleetError(RuntimeError):
    """The fleet could not be started or stopped as asked."""


# --------------------------------------------------------------------------------------- checks

def require_ssh_tools():
    """Raise :class:`SSHFleetError` (saying how to install them) unless sshd, ssh and ssh-keygen exist."""
    missing = [name for name, ok in (
        (SSHD_BIN, os.access(SSHD_BIN, os.X_OK)),
        ("ssh", shutil.which("ssh") is not None),
        ("ssh-keygen", shutil.which("ssh-keygen") is not None),
    ) if not ok]
    if missing:
        raise SSHFleetError("missing %s: %s" % (", ".join(missing), INSTALL_HINT))


def ensure_privsep_dir():
    """Create sshd's privilege separation directory (``/run/sshd``, root's, 0755) if missing.

    Debian's init script or systemd unit creates it; neither runs here, and ``/run`` is a tmpfs."""
    if os.path.isdir(PRIVSEP_DIR):
        return
    if os.geteuid() != 0:
        raise SSHFleetError("%s is missing and only root can create it" % PRIVSEP_DIR)
    os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)


def sshd_version():
    """OpenSSH's version as a tuple, e.g. ``(9, 2)`` (``(0, 0)`` if it cannot be read)."""
    proc = subprocess.run([SSHD_BIN, "-V"], capture_output=True, text=True, check=False)
    match = re.search(r"OpenSSH_(\d+)\.(\d+)", proc.stdout + proc.stderr)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def host_addresses(first, count):
    """``count`` loopback addresses from ``first`` upwards, skipping those ending in .0 or .255."""
    address = ipaddress.IPv4Address(first)
    network = ipaddress.IPv4Network(LOOPBACK)
    out = []
    while len(out) < count:
        if address not in network:
            raise SSHFleetError("%d addresses from %s leave %s" % (count, first, LOOPBACK))
        if str(address).rsplit(".", 1)[1] not in ("0", "255"):
            out.append(str(address))
        address += 1
    return out


# --------------------------------------------------------------------------------------- processes

def _stat(pid):
    """``(ppid, state)`` of a process, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    return int(fields[1]), fields[0]


def _children_map():
    """``{ppid: [pid, ...]}`` of every process."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat:
                out.setdefault(stat[0], []).append(int(name))
    return out


def descendants(pid):
    """Every process below ``pid`` (children first, then theirs)."""
    children = _children_map()
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid):
    """True while ``pid`` exists, zombies included (a zombie is a process left behind)."""
    return _stat(pid) is not None


def _running_below(pid):
    """The processes below ``pid`` that have not exited yet (zombies excluded)."""
    return [p for p in descendants(pid) if (_stat(p) or (0, "Z"))[1] != "Z"]


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_until(predicate, timeout, interval=0.05):
    """Poll ``predicate`` until it is true (returns True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def listening_sockets(port):
    """Local addresses of the TCP sockets in LISTEN state on ``port`` (IPv4 and IPv6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":
                out.append(address)
    return out


def _pdeathsig_prefix():
    """``["setpriv", "--pdeathsig", "TERM", "--"]`` when util-linux's setpriv supports it, else []."""
    setpriv = shutil.which("setpriv")
    if not setpriv:
        return []
    proc = subprocess.run([setpriv, "--help"], capture_output=True, text=True, check=False)
    return [setpriv, "--pdeathsig", "TERM", "--"] if "--pdeathsig" in proc.stdout else []


# --------------------------------------------------------------------------------------- keys and config

def generate_key(path, comment):
    """An ed25519 key pair without a passphrase at ``path`` and ``path.pub``."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return Path(path)


def sshd_config_text(workdir, port, user, host_key, authorized_keys, version=None):
    """The sshd_config of a fleet: its own port on every address, key-only login from loopback."""
    workdir = Path(workdir)
    lines = [
        "# written by tests/support/sshfleet.py",
        "ListenAddress 0.0.0.0:%d" % port,
        "HostKey %s" % host_key,
        "PidFile %s" % (workdir / "sshd.pid"),
        "AuthorizedKeysFile %s" % authorized_keys,
        # only loopback clients, only this user (see the module docstring)
        "AllowUsers %s@%s" % (user, LOOPBACK),
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        # forks 5..50 connect at once: well above the default 10:30:100 and 10 sessions a connection
        "MaxStartups 256",
        "MaxSessions 64",
        "LoginGraceTime 30",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "PermitUserEnvironment no",
        "Subsystem sftp internal-sftp",
        # VERBOSE logs every connection with the address it reached, and every session
        "LogLevel VERBOSE",
    ]
    if (version or sshd_version()) >= (9, 8):
        # 9.8+ penalises a source address for connections that do not log in; all of ours come from 127.0.0.1
        lines.append("PerSourcePenalties no")
    return "\n".join(lines) + "\n"


def _validate_config(config):
    """``sshd -t``: raise with sshd's own words if the config (or the machine) is not right."""
    proc = subprocess.run([SSHD_BIN, "-t", "-f", str(config)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SSHFleetError("sshd -t -f %s failed: %s" % (config, (proc.stderr or proc.stdout).strip()))


# --------------------------------------------------------------------------------------- sshd

class SSHD(object):
    """One sshd listener as a child process: ``start()``, ``pids()``, ``stop()``."""

    def __init__(self, config, log_path, port, startup_timeout=15.0):
        self.config = Path(config)
        self.log_path = Path(log_path)
        self.port = port
        self.startup_timeout = startup_timeout
        self.proc = None
        self.stop_notes = []  # what stop() had to force, for the curious

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        """Start ``sshd -D -e -f <config>`` and wait until it listens."""
        _validate_config(self.config)
        cmd = _pdeathsig_prefix() + [SSHD_BIN, "-D", "-e", "-f", str(self.config)]
        with open(self.log_path, "ab") as log:  # O_APPEND: every sshd process writes whole lines
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,  # pylint: disable=consider-using-with
                                         stderr=log, start_new_session=True)
        self._wait_listening()
        return self

    def _wait_listening(self):
        line = "Server listening on 0.0.0.0 port %d." % self.port
        ok = _wait_until(lambda: not self.running() or line in self.log_path.read_text(errors="replace"),
                         self.startup_timeout)
        if ok and self.running():
            return
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise SSHFleetError("sshd did not start listening on port %d: %s" % (self.port, tail.strip()))

    def pids(self):
        """The listener and every process below it (connection children, sessions, commands)."""
        if not self.running():
            return []
        return [self.proc.pid] + descendants(self.proc.pid)

    def stop(self, timeout=10.0):
        """End every connection, then the listener; reap them all. Idempotent."""
        if self.proc is None:
            return
        if self.running():
            if not _wait_until(lambda: not descendants(self.proc.pid), 2.0):
                self._end_connections(timeout)
            self._end_listener(timeout)
        self.proc.wait()
        self.proc = None

    def _end_connections(self, timeout):
        """SIGSTOP the listener (it accepts nothing new), SIGTERM its children, let it reap them."""
        listener = self.proc.pid
        _signal(listener, signal.SIGSTOP)
        left = descendants(listener)
        self.stop_notes.append("ended %d process(es) of open connections" % len(left))
        for child in _children_map().get(listener, []):
            _signal(child, signal.SIGTERM)
        if not _wait_until(lambda: not _running_below(listener), timeout / 2):
            stragglers = _running_below(listener)
            self.stop_notes.append("killed %d straggler(s)" % len(stragglers))
            for pid in reversed(stragglers):  # deepest first
                _signal(pid, signal.SIGKILL)
        _signal(listener, signal.SIGCONT)
        _wait_until(lambda: not descendants(listener), timeout / 2)

    def _end_listener(self, timeout):
        self.proc.terminate()
        _signal(self.proc.pid, signal.SIGCONT)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop_notes.append("killed the listener")
            self.proc.kill()


# --------------------------------------------------------------------------------------- the fleet

_LIVE = []  # fleets started and not stopped yet: the atexit guard stops them


@atexit.register
def _stop_live_fleets():
    for fleet in list(_LIVE):
        try:
            fleet.stop()
        except Exception:  # pylint: disable=broad-except
            pass


def host_name(prefix, index):
    """``gb10-001`` for index 0."""
    return "%s%03d" % (prefix, index + 1)


class SSHFleet(object):
    """``size`` hosts on loopback addresses, reached over one real sshd, each with its own simulated vLLM.

    ``ssh_port``: sshd's port (on every address; one port per fleet). ``first_address``: the first
    host's address; the others follow. ``sim``: a running :class:`SimulatorClient` to create the
    servers in (they are deleted at ``stop()``); else the fleet starts its own simulator with its
    control port in ``sim_port_range``. ``vllm_port``: each host's vLLM port on its own address.
    ``server_options``: simulator options of every server (``max_num_seqs``, ``step_rate``, ...).
    ``workdir``: where keys, config, log and inventory go (default: a new temp dir, removed at stop).
    """

    def __init__(self, size, ssh_port, first_address=DEFAULT_FIRST_ADDRESS, sim=None, sim_port_range=None,
                 vllm_port=VLLM_PORT, host_prefix="gb10-", group=DEFAULT_GROUP, server_options=None,
                 workdir=None, user=None):
        if size < 1:
            raise ValueError("a fleet needs at least one host")
        self.size = size
        self.ssh_port = int(ssh_port)
        self.addresses = host_addresses(first_address, size)
        self.hosts = [host_name(host_prefix, i) for i in range(size)]
        self.group = group
        self.vllm_port = vllm_port
        self.server_options = dict(server_options or {})
        self.user = user or pwd.getpwuid(os.geteuid()).pw_name
        self.sim = sim
        self._sim_port_range = sim_port_range
        self._sim_process = None
        self._owns_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else None
        self._control_dir = None
        self._short_control_dir = None
        self.servers = {}  # host -> the simulator's server info
        self.sshd = None
        self.client_key = None
        self.final_log = None  # sshd's log, kept at stop() when the work dir is removed

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self):
        """Keys, config, sshd, simulator, one server per host. On failure, stops what it started."""
        if self.sshd is not None:
            raise SSHFleetError("this fleet was started already; make a new one")
        require_ssh_tools()
        ensure_privsep_dir()
        _LIVE.append(self)
        try:
            self._make_workdir()
            self._start_sshd()
            self._start_servers()
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        """Close Ansible's persistent connections, stop sshd (and every connection), delete the
        servers (or the fleet's own simulator), remove the work dir if the fleet made it. Idempotent."""
        errors = []
        for step in (self._close_control_masters, self._stop_sshd, self._stop_servers, self._remove_workdir):
            try:
                step()
            except Exception as exc:  # pylint: disable=broad-except  # do every step, then report
                errors.append("%s: %s" % (step.__name__, exc))
        if self in _LIVE:
            _LIVE.remove(self)
        if errors:
            raise SSHFleetError("stopping the fleet: " + "; ".join(errors))

    # -- paths ------------------------------------------------------------------------------------
    @property
    def log_path(self):
        return self.workdir / "sshd.log"

    @property
    def control_path_dir(self):
        """Where Ansible's ssh keeps its control sockets for this fleet (``ansible_control_path_dir``)."""
        return self._control_dir

    def _make_workdir(self):
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="sshfleet-%d-" % self.ssh_port))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._control_dir = self.workdir / "cp"
        if len(str(self._control_dir)) > _CONTROL_PATH_MAX:  # a deep work dir: the sockets go to a short one
            self._short_control_dir = Path(tempfile.mkdtemp(prefix="sshfleet-cp-"))
            self._control_dir = self._short_control_dir
        self._control_dir.mkdir(mode=0o700, exist_ok=True)

    def _start_sshd(self):
        host_key = generate_key(self.workdir / "ssh_host_ed25519_key", "sshfleet-host")
        self.client_key = generate_key(self.workdir / "id_ed25519", "sshfleet-client")
        authorized = self.workdir / "authorized_keys"
        authorized.write_text('from="%s" %s' % (LOOPBACK, Path(str(self.client_key) + ".pub").read_text()))
        config = self.workdir / "sshd_config"
        config.write_text(sshd_config_text(self.workdir, self.ssh_port, self.user, host_key, authorized))
        self.sshd = SSHD(config, self.log_path, self.ssh_port).start()

    def _start_servers(self):
        if self.sim is None:
            self._sim_process = SimulatorProcess(port_range=self._sim_port_range)
            self.sim = self._sim_process.start()
        specs = [dict(self.server_options, name=self._server_name(host), host=address, port=self.vllm_port)
                 for host, address in zip(self.hosts, self.addresses)]
        for host, info in zip(self.hosts, self.sim.create_each(specs)):
            self.servers[host] = info

    def _server_name(self, host):
        return "ssh%d-%s" % (self.ssh_port, host)

    def close_connections(self, timeout=10.0):
        """End Ansible's persistent connections to the fleet (``ControlPersist``), so the next run
        opens new ones; returns once sshd has no connection left (False if some stayed open)."""
        self._close_control_masters()
        return _wait_until(lambda: len(self.sshd_pids()) <= 1, timeout)

    def _close_control_masters(self):
        """``ssh -O exit`` on every control socket Ansible left in the fleet's control dir."""
        directory = self._control_dir
        if directory is None or not directory.is_dir():
            return
        for sock in directory.iterdir():
            if sock.is_socket():
                subprocess.run(["ssh", "-o", "ControlPath=%s" % sock, "-O", "exit", "sshfleet"],
                               capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL)

    def _stop_sshd(self):
        if self.sshd is not None:
            self.sshd.stop()

    def _stop_servers(self):
        if self._sim_process is not None:
            self._sim_process.stop()
            self._sim_process = None
            self.sim = None
        elif self.sim is not None:
            for host in list(self.servers):
                self.sim.delete(self.servers[host]["id"])
        self.servers = {}

    def _remove_workdir(self):
        if self.workdir is not None and self.log_path.exists():
            self.final_log = self.log_path.read_text(errors="replace")
        if self._short_control_dir is not None:
            shutil.rmtree(self._short_control_dir, ignore_errors=True)
        if self._owns_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- hosts and their servers ------------------------------------------------------------------
    def address(self, host):
        return self.addresses[self.hosts.index(host)]

    def server_id(self, host):
        return self.servers[host]["id"]

    def vllm_url(self, host):
        return "http://%s:%d" % (self.address(host), self.vllm_port)

    def set_state(self, host, state):
        """Put a fresh host's server in ``state``: ``idle`` (as created), ``busy`` (requests decoding),
        ``prefill`` (a long chunked prefill), ``stuck`` (requests in flight, engine hung) or ``down``
        (process gone, port closed): tests/support/servers.py."""
        server_states.put(self.sim, self.server_id(host), state)

    def set_states(self, states):
        """``{host: state}`` for :meth:`set_state`; hosts not named stay as they are."""
        for host, state in states.items():
            self.set_state(host, state)

    # -- inventory --------------------------------------------------------------------------------
    def host_vars(self, host):
        """What Ansible needs to reach ``host`` over the fleet's sshd, and the host's ``vllm_url``."""
        return {
            "ansible_connection": "ssh",
            "ansible_host": self.address(host),
            "ansible_port": self.ssh_port,
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.client_key),
            "ansible_ssh_common_args": SSH_COMMON_ARGS,
            "ansible_control_path_dir": str(self._control_dir),
            "ansible_python_interpreter": sys.executable,
            "vllm_url": self.vllm_url(host),
        }

    def inventory(self, path=None, extra_host_vars=None, extra_groups=None):
        """Write the inventory; returns its path (default ``<workdir>/inventory.json``).

        ``extra_host_vars``: ``{host: {var: value}}`` added to (or overriding) the fleet's host vars;
        ``extra_groups``: ``{group: {host: {var: value}}}`` more groups (hosts not of the fleet
        get exactly the vars given)."""
        hosts = {}
        for host in self.hosts:
            hostvars = self.host_vars(host)
            hostvars.update((extra_host_vars or {}).get(host, {}))
            hosts[host] = hostvars
        children = {self.group: {"hosts": hosts}}
        for group, members in (extra_groups or {}).items():
            children.setdefault(group, {"hosts": {}})["hosts"].update(members)
        path = Path(path or self.workdir / "inventory.json")
        path.write_text(json.dumps({"all": {"children": children}}, indent=1) + "\n")
        return str(path)

    # -- what sshd saw ----------------------------------------------------------------------------
    def log_text(self):
        """sshd's log so far (after ``stop()``: as it was at the stop)."""
        if self.workdir is not None and self.log_path.exists():
            return self.log_path.read_text(errors="replace")
        return self.final_log or ""

    def log_mark(self):
        """A position in sshd's log, for ``since=`` of :meth:`connections` and :meth:`sessions`."""
        return len(self.log_text())

    def _log_lines(self, since):
        return self.log_text()[since:].splitlines()

    def connections(self, since=0):
        """Every TCP connection sshd logged: ``{"client", "client_port", "server", "server_port"}``."""
        out = []
        for line in self._log_lines(since):
            match = CONNECTION_RE.match(line)
            if match:
                out.append({"client": match.group(1), "client_port": int(match.group(2)),
                            "server": match.group(3), "server_port": int(match.group(4))})
        return out

    def sessions(self, since=0):
        """Every session sshd started: ``{"kind", "tty", "user", "client_port"}``; ``kind`` is
        ``command``, ``shell`` or ``subsystem 'sftp'``, ``tty`` the pty or None; a connection's
        sessions share its ``client_port``."""
        out = []
        for line in self._log_lines(since):
            match = SESSION_RE.match(line)
            if match:
                out.append({"kind": match.group(1), "tty": match.group(2), "user": match.group(3),
                            "client_port": int(match.group(5))})
        return out

    def session_counts(self, since=0):
        """``{"connections": n, "sessions": n, "by_kind": {"command": n, "subsystem 'sftp'": n}, "by_server":
        {address: connections}}``: a summary of :meth:`connections` and :meth:`sessions`."""
        conns = self.connections(since)
        sessions = self.sessions(since)
        by_kind, by_server = {}, {}
        for item in sessions:
            by_kind[item["kind"]] = by_kind.get(item["kind"], 0) + 1
        for item in conns:
            by_server[item["server"]] = by_server.get(item["server"], 0) + 1
        return {"connections": len(conns), "sessions": len(sessions), "by_kind": by_kind, "by_server": by_server}

    def sshd_pids(self):
        """The sshd listener and every process below it now."""
        return self.sshd.pids() if self.sshd else []

    def accepts(self, address=None, timeout=1.0):
        """True if something accepts TCP connections on the fleet's sshd port at ``address``."""
        try:
            with socket.create_connection((address or self.addresses[0], self.ssh_port), timeout=timeout):
                return True
        except OSError:
            return False
