"""The stand-ins for ``systemctl``, ``journalctl`` and ``docker`` (``tests/standins/``), as tests use them.

``Standins(directory, control_url)`` writes their config (which service runs which simulated server)
and reads the argv log they append to; ``env()`` is the environment that puts them first on PATH.
See ``tests/standins/README.md`` for what each stand-in does.
"""

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDINS = str(REPO / "tests" / "standins")
# ansible_connection: standin_local - Ansible's local connection that refuses to reboot this machine
# (tests/standins/connection_plugins/standin_local.py): ansible.builtin.reboot refuses `local` itself.
CONNECTION_PLUGINS = str(REPO / "tests" / "standins" / "connection_plugins")
# The stand-in for a host reboot: ansible.builtin.reboot's reboot_command, or a power cycle from the controller.
HOST_REBOOT = str(REPO / "tests" / "standins" / "host-reboot")

# The calls that start a new process of a service (a restart, a start after a stop, a recreate), or reboot the host.
_STARTS = {"systemctl": ("restart", "try-restart", "reload-or-restart", "start"), "docker": ("restart", "start"),
           "vllm-restart": None, "host-reboot": None}


def starts(argv):
    """Whether a stand-in call starts a new process of a service (or reboots the host)."""
    tool, rest = argv[0], argv[1:]
    if tool in ("vllm-restart", "host-reboot"):
        return True
    if tool == "docker" and rest[:1] == ["compose"]:
        words = [a for a in rest[1:] if not a.startswith("-")]
        # docker compose --project-directory DIR <command> ...: the command follows the directory
        command = words[1] if "--project-directory" in rest and len(words) > 1 else (words[0] if words else "")
        return command in ("restart", "start", "up")
    words = [a for a in rest if not a.startswith("-")]
    return tool in ("systemctl", "docker") and bool(words) and words[0] in _STARTS[tool]


def stops(argv):
    """Whether a stand-in call stops a service (the first half of the watchdog's stop, wait, start)."""
    tool, rest = argv[0], argv[1:]
    words = [a for a in rest if not a.startswith("-")]
    if tool == "docker" and rest[:1] == ["compose"]:
        command = words[2] if "--project-directory" in rest and len(words) > 2 else (words[1] if len(words) > 1 else "")
        return command == "stop"
    return tool in ("systemctl", "docker") and words[:1] == ["stop"]


def standins_path(extra=()):
    """A PATH with the stand-ins first, then the interpreter's bin (ansible, ...), then ``extra``, then PATH."""
    return os.pathsep.join([STANDINS, os.path.dirname(sys.executable)] + list(extra) + [os.environ.get("PATH", "")])


class Standins(object):
    """The stand-ins' config and argv log in ``directory``."""

    def __init__(self, directory, control_url, log_name="argv.log"):
        self.config = os.path.join(str(directory), "standins.json")
        self.log = os.path.join(str(directory), log_name)
        self.control_url = control_url

    def write(self, services, **extra):
        """``services``: {name: {server, state, started_at, load_seconds, restart_rc, ...}}."""
        data = dict(extra, control_url=self.control_url, services=services)
        with open(self.config, "w") as handle:
            json.dump(data, handle, indent=1)

    def env(self):
        return {"PATH": standins_path(), "MODELOPS_STANDIN_CONFIG": self.config, "MODELOPS_STANDIN_LOG": self.log,
                "ANSIBLE_CONNECTION_PLUGINS": CONNECTION_PLUGINS}

    def data(self):
        """The config as the stand-ins left it (restarts counted, states, ...)."""
        with open(self.config) as handle:
            return json.load(handle)

    def entries(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def calls(self):
        return [entry["argv"] for entry in self.entries()]

    def restart_entries(self):
        """The log entries (argv, time, pid, ...) of the calls that start a new process of a service: a restart, the
        start after a stop (the watchdog stops, waits for the memory, then starts), a recreate, a host reboot."""
        return [entry for entry in self.entries() if starts(entry["argv"])]

    def restarts(self):
        return [entry["argv"] for entry in self.restart_entries()]

    def stops(self):
        """The calls that stopped a service."""
        return [entry["argv"] for entry in self.entries() if stops(entry["argv"])]
