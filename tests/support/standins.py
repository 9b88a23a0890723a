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
        return {"PATH": standins_path(), "MODELOPS_STANDIN_CONFIG": self.config, "MODELOPS_STANDIN_LOG": self.log}

    def entries(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def calls(self):
        return [entry["argv"] for entry in self.entries()]

    def restart_entries(self):
        """The log entries (argv, time, pid, ...) of the calls that restart something."""
        return [entry for entry in self.entries() if "restart" in entry["argv"]]

    def restarts(self):
        return [entry["argv"] for entry in self.restart_entries()]
