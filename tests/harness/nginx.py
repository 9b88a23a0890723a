"""A real nginx (Debian's package) on loopback as a least-connections proxy in front of vLLM backends.

Importable from the test venv (standard library only). nginx runs in the foreground of its own
process group with its own prefix, configuration, pid file, error log and access log in a temp
dir: no system configuration is read or touched (``nginx -p PREFIX -c CONF -e ERROR_LOG``).

    from tests.harness.nginx import NginxProxy

    with NginxProxy(["127.0.0.1:22001", "127.0.0.1:22002"]) as proxy:
        requests.get(proxy.url + "/v1/models")
        proxy.access_log()     # [{"method": "GET", "uri": "/v1/models", "status": 200,
                               #   "upstream": "127.0.0.1:22001", ...}]

The access log is JSON, one request a line, with the method, URI, status, the upstream
address(es) nginx tried (``upstream`` as nginx wrote it, ``upstreams`` as a list) and their
statuses. Install nginx with ``scripts/ensure-nginx.sh`` (``make integration`` does).

Pytest fixtures (import them into a test module): ``nginx_proxies``, a function-scoped
factory ``nginx_proxies(backends, **kwargs) -> NginxProxy`` that stops every proxy it
started at teardown, and ``nginx_proxies_module``, its module-scoped twin.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterable, List, Optional, Sequence
from tests.support.ports import block

# Loopback ports the proxies of these tests may use (the simulator takes 22000-22799).
PORT_FIRST, PORT_LAST = block("nginx")

LOG_FORMAT = (
    '{"time":"$time_iso8601","msec":"$msec","method":"$request_method","uri":"$request_uri",'
    '"status":"$status","upstream":"$upstream_addr","upstream_status":"$upstream_status",'
    '"request_time":"$request_time","bytes":"$body_bytes_sent","connection":"$connection"}'
)

CONF_TEMPLATE = """\
# Written by tests/harness/nginx.py; nothing outside {prefix} is used.
{user}worker_processes 1;
daemon off;
master_process on;
pid {prefix}/nginx.pid;
lock_file {prefix}/nginx.lock;
error_log {prefix}/error.log info;

events {{
    worker_connections 4096;
}}

http {{
    log_format modelops escape=json '{log_format}';
    access_log {prefix}/access.log modelops;
    client_body_temp_path {prefix}/tmp/client_body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    types {{ }}
    default_type application/octet-stream;

    upstream vllm_backends {{
        {balance}
{servers}
        keepalive 32;
    }}

    server {{
        listen {host}:{port};
        server_name _;
        location / {{
            proxy_pass http://vllm_backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_connect_timeout {connect_timeout}s;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
            proxy_next_upstream error timeout;
        }}
    }}
}}
"""


class NginxError(RuntimeError):
    """nginx could not be found, configured, started or stopped; the message says why."""


def nginx_binary() -> str:
    """The nginx executable: ``$NGINX``, else ``nginx`` on PATH, else ``/usr/sbin/nginx``."""
    for candidate in (os.environ.get("NGINX"), shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise NginxError("nginx is not installed: run scripts/ensure-nginx.sh (Debian's nginx-light package)")


def _listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return not _listening(host, port)


def free_port(host: str = "127.0.0.1", first: int = PORT_FIRST, last: int = PORT_LAST,
              taken: Iterable[int] = ()) -> int:
    """A port of ``first``-``last`` that nothing listens on (and not in ``taken``)."""
    taken = set(taken)
    start = first + (os.getpid() % (last - first + 1))  # two sessions at once start apart
    for offset in range(last - first + 1):
        port = first + (start - first + offset) % (last - first + 1)
        if port not in taken and _bindable(host, port):
            return port
    raise NginxError("no free port in %d-%d" % (first, last))


def _backend_address(backend) -> str:
    """``"127.0.0.1:22001"``, ``"http://127.0.0.1:22001"``, ``22001`` or a simulator info dict."""
    if isinstance(backend, dict):
        return "%s:%s" % (backend.get("host") or "127.0.0.1", backend["port"])
    if isinstance(backend, int):
        return "127.0.0.1:%d" % backend
    text = str(backend)
    if "://" in text:
        text = text.split("://", 1)[1]
    return text.rstrip("/")


class NginxProxy:
    """One nginx master (+ one worker) proxying ``host:port`` to ``backends``.

    ``balance``: ``"least_conn"`` (default), ``"round_robin"`` or ``"ip_hash"``.
    ``connect_timeout``: seconds nginx waits to connect to a backend before the next one.
    """

    def __init__(self, backends: Sequence, port: Optional[int] = None, host: str = "127.0.0.1",
                 balance: str = "least_conn", workdir: Optional[os.PathLike] = None,
                 connect_timeout: float = 2, start_timeout: float = 15, binary: Optional[str] = None):
        if not backends:
            raise ValueError("a proxy needs at least one backend")
        if balance not in ("least_conn", "round_robin", "ip_hash"):
            raise ValueError("balance must be least_conn, round_robin or ip_hash")
        self.backends = [_backend_address(b) for b in backends]
        self.host = host
        self.port = port
        self.balance = balance
        self.connect_timeout = connect_timeout
        self.start_timeout = start_timeout
        self.binary = binary
        self._own_workdir = workdir is None
        self.prefix = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="modelops-nginx-"))
        self.conf_path = self.prefix / "nginx.conf"
        self.access_log_path = self.prefix / "access.log"
        self.error_log_path = self.prefix / "error.log"
        self.pid_path = self.prefix / "nginx.pid"
        self.proc: Optional[subprocess.Popen] = None
        self._log_offset = 0

    # -- configuration ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return "http://%s:%s" % (self.host, self.port)

    def render_conf(self) -> str:
        balance = {"least_conn": "least_conn;", "round_robin": "# round robin", "ip_hash": "ip_hash;"}[self.balance]
        servers = "\n".join("        server %s max_fails=1 fail_timeout=10s;" % b for b in self.backends)
        user = "user root root;\n" if os.geteuid() == 0 else ""
        return CONF_TEMPLATE.format(prefix=self.prefix, user=user, log_format=LOG_FORMAT, balance=balance,
                                    servers=servers, host=self.host, port=self.port,
                                    connect_timeout=self.connect_timeout)

    def _write_conf(self) -> None:
        (self.prefix / "tmp").mkdir(parents=True, exist_ok=True)
        self.conf_path.write_text(self.render_conf())

    def _nginx(self, *args: str, timeout: float = 15) -> subprocess.CompletedProcess:
        cmd = [self.binary, "-p", str(self.prefix), "-c", str(self.conf_path), "-e", str(self.error_log_path)]
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "NginxProxy":
        if self.is_running():
            raise NginxError("nginx on port %s is already running (pid %s)" % (self.port, self.proc.pid))
        self.binary = self.binary or nginx_binary()
        if self.port is None:
            self.port = free_port(self.host)
        elif _listening(self.host, self.port):
            raise NginxError("port %s is already in use on %s" % (self.port, self.host))
        self._write_conf()
        test = self._nginx("-t")
        if test.returncode != 0:
            raise NginxError("nginx -t rejected %s:\n%s" % (self.conf_path, test.stderr.strip()))
        self.access_log_path.touch()
        self._log_offset = 0
        with open(self.prefix / "stderr.log", "ab") as stderr:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [self.binary, "-p", str(self.prefix), "-c", str(self.conf_path), "-e", str(self.error_log_path)],
                stdin=subprocess.DEVNULL, stdout=stderr, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while not (_listening(self.host, self.port) and self.pid_path.exists()):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise NginxError("nginx exited with %s during start-up:\n%s" % (code, self.error_tail()))
            if time.monotonic() > deadline:
                self.stop()
                raise NginxError("nginx did not listen on %s within %s s:\n%s"
                                 % (self.url, self.start_timeout, self.error_tail()))
            time.sleep(0.05)
        return self

    def reload(self, backends: Optional[Sequence] = None, balance: Optional[str] = None) -> None:
        """Rewrite the configuration (new backends or balancing) and ``nginx -s reload``."""
        if backends is not None:
            self.backends = [_backend_address(b) for b in backends]
        if balance is not None:
            self.balance = balance
        self._write_conf()
        old_workers = set(self.worker_pids())
        res = self._nginx("-s", "reload")
        if res.returncode != 0:
            raise NginxError("nginx -s reload failed: %s" % res.stderr.strip())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            workers = set(self.worker_pids())
            if workers and not workers & old_workers:
                return
            time.sleep(0.05)
        raise NginxError("nginx did not replace its workers after a reload:\n%s" % self.error_tail())

    def stop(self, timeout: float = 10) -> None:
        """SIGQUIT (graceful), then SIGTERM, then SIGKILL to the process group; waits for the group."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        pgid = proc.pid
        for sig, wait in ((signal.SIGQUIT, timeout), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            if not self._group_alive(pgid):
                break
        if proc.poll() is None or self._group_alive(pgid):
            raise NginxError("nginx (process group %s) survived SIGKILL" % pgid)

    @staticmethod
    def _group_alive(pgid: int) -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        # zombies of the group still answer signal 0 until reaped: look at their state
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = Path("/proc/%s/stat" % pid).read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
        return False

    def cleanup(self) -> None:
        """Stop, then remove the prefix directory if this object made it."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.prefix, ignore_errors=True)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def worker_pids(self) -> List[int]:
        if not self.proc:
            return []
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = Path("/proc/%s/stat" % pid).read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == self.proc.pid and fields[0] != "Z":
                out.append(int(pid))
        return out

    def __enter__(self) -> "NginxProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

    # -- logs -------------------------------------------------------------------------------
    def access_log(self, since_mark: bool = True) -> List[dict]:
        """The access log as dicts (``method``, ``uri``, ``status`` (int), ``upstream`` (as nginx
        wrote it), ``upstreams`` (the addresses nginx tried, in order), ``upstream_statuses``, ...).

        ``since_mark``: only the lines written after the last :meth:`mark` (default True).
        """
        try:
            with open(self.access_log_path, "rb") as handle:
                if since_mark:
                    handle.seek(self._log_offset)
                data = handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return []
        entries = []
        for line in data.splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            entry["status"] = int(entry["status"]) if entry.get("status", "").isdigit() else entry.get("status")
            entry["upstreams"] = _split_upstream(entry.get("upstream", ""))
            entry["upstream_statuses"] = _split_upstream(entry.get("upstream_status", ""))
            entries.append(entry)
        return entries

    def requests_seen(self, since_mark: bool = True) -> List[str]:
        """``["GET /v1/models", ...]``: method and URI of every logged request."""
        return ["%s %s" % (e["method"], e["uri"]) for e in self.access_log(since_mark)]

    def mark(self) -> None:
        """Later :meth:`access_log` calls return only what is logged after this point."""
        try:
            self._log_offset = self.access_log_path.stat().st_size
        except FileNotFoundError:
            self._log_offset = 0

    def wait_logged(self, count: int, timeout: float = 5) -> List[dict]:
        """Wait until at least ``count`` lines are logged since the mark (nginx logs after the answer)."""
        deadline = time.monotonic() + timeout
        while True:
            entries = self.access_log()
            if len(entries) >= count or time.monotonic() > deadline:
                return entries
            time.sleep(0.05)

    def error_tail(self, lines: int = 30) -> str:
        text = ""
        for path in (self.error_log_path, self.prefix / "stderr.log"):
            try:
                text += path.read_text(errors="replace")
            except OSError:
                pass
        return "\n".join(text.splitlines()[-lines:]) or "(no error log)"

    def __repr__(self) -> str:
        return "NginxProxy(%s -> %s, %s, pid=%s)" % (self.url, ", ".join(self.backends), self.balance, self.pid)


def _split_upstream(text: str) -> List[str]:
    """nginx separates the servers tried for one request with ", " and internal redirects with " : "."""
    out = []
    for group in (text or "").split(" : "):
        out.extend(part.strip() for part in group.split(",") if part.strip() and part.strip() != "-")
    return out


class ProxyFactory:
    """``factory(backends, **kwargs) -> NginxProxy`` (started); ``factory.stop_all()`` at teardown."""

    def __init__(self):
        self.proxies: List[NginxProxy] = []

    def __call__(self, backends: Sequence, **kwargs) -> NginxProxy:
        taken = [p.port for p in self.proxies if p.port]
        if kwargs.get("port") is None:
            kwargs["port"] = free_port(kwargs.get("host", "127.0.0.1"), taken=taken)
        proxy = NginxProxy(backends, **kwargs)
        self.proxies.append(proxy)
        proxy.start()
        return proxy

    def stop_all(self) -> None:
        errors = []
        for proxy in reversed(self.proxies):
            try:
                proxy.cleanup()
            except Exception as exc:  # pylint: disable=broad-except  # stop the others, then report
                errors.append("%r: %s" % (proxy, exc))
        self.proxies.clear()
        if errors:
            raise NginxError("could not stop: " + "; ".join(errors))


try:  # fixtures, when imported by pytest
    import pytest
except ImportError:  # pragma: no cover
    pytest = None

if pytest is not None:
    @pytest.fixture
    def nginx_proxies():
        """Function-scoped factory of started :class:`NginxProxy` objects, all stopped at teardown."""
        factory = ProxyFactory()
        yield factory
        factory.stop_all()

    @pytest.fixture(scope="module")
    def nginx_proxies_module():
        """Module-scoped factory of started :class:`NginxProxy` objects, all stopped at teardown."""
        factory = ProxyFactory()
        yield factory
        factory.stop_all()
