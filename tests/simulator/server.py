"""One simulated vLLM API server (its own port, its own engines and metrics registry)."""

import asyncio
import collections
import dataclasses
import gzip
import json
import random
import secrets
import ssl
import time
from urllib.parse import parse_qsl

from .engine import Engine, RequestFailed, SimRequest
from .httpd import Response, end_chunks, serve_connection, write_chunk
from .metrics import OPENMETRICS_CONTENT_TYPE, RL_OPERATIONS, TEXT_CONTENT_TYPE, Registry, Renderer

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "away")
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
RESTART_MESSAGE = "The server is shutting down; the request was aborted."
EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")

STATES = (
    "normal", "hang", "resume", "restart", "dead", "stop", "sleep", "wake",
    "no_metrics", "metrics_html", "metrics_garbage", "metrics_huge", "metrics_trickle", "metrics_redirect",
    "metrics_normal", "slow_metrics", "slow_health", "disable_log_stats", "multiprocess", "v0_idle_ticks",
    "weight_update", "decode_stall", "reprefill_loop", "pause_answer",
)
PAUSE_MODES = ("abort", "wait", "keep")           # vllm.v1.engine.PauseMode
# pydantic's bool parsing of a query parameter (clear_cache), case-insensitive
PYDANTIC_TRUE = ("1", "on", "t", "true", "y", "yes")
PYDANTIC_FALSE = ("0", "off", "f", "false", "n", "no")
DEV_ROUTES = {"/pause": ("POST",), "/resume": ("POST",), "/is_paused": ("GET",)}


@dataclasses.dataclass
class ServerConfig:
    """Options of one simulated server (all can be given at creation and changed later)."""

    model: str = "tiny"
    root: str = ""                    # /v1/models "root"; default /models/<model>
    max_model_len: int = 32768
    version: str = ""                 # /version; default 0.32.0 (v1) or 0.6.6 (v0)
    api_key: str = ""                 # like --api-key: guards /v1/* only
    max_num_seqs: int = 256
    step_rate: float = 8.0            # engine steps per second (one token per running request per step)
    chunk_tokens: int = 2048          # per-step token budget (--max-num-batched-tokens), chunked prefill
    engines: int = 1                  # data-parallel ranks: engine="0".."n-1"
    kv_block_size: int = 16
    kv_num_blocks: int = 16384
    tls: bool = False
    multiprocess: bool = False        # --api-server-count > 1: no process_*, python_*, *_created
    disable_log_stats: bool = False   # no vllm:* series at all
    mfu_metrics: bool = False         # estimated_flops/read/write counters move every scheduled step
    flops_per_token: float = 2.0e9
    v0_idle_ticks: float = 0.0        # seconds; observe 0 into the step histogram while idle (V0/0.7.x)
    flavor: str = "v1"                # v1 | v0 (no engine label, gpu_cache_usage_perc, no sleep/by_reason)
    slow_metrics: float = 0.0         # seconds before /metrics answers
    slow_health: float = 0.0          # seconds before /health answers
    load_seconds: float = 0.0         # restart: seconds during which the port does not listen
    start_loading: bool = False       # begin as if just (re)started: not listening for load_seconds
    default_max_tokens: int = 16      # requests without max_tokens stop ("stop") after this many tokens
    restart_inflight: str = "500"     # 500 | close: what in-flight requests get on restart
    reasoning: bool = False           # chat answers carry reasoning_content and content null
    server_load_tracking: bool = False  # /load counts in-flight requests
    gzip: bool = True                 # honour Accept-Encoding: gzip on /metrics (prometheus_client does)
    openmetrics: bool = True          # honour Accept: application/openmetrics-text on /metrics
    process_age: float = 0.0          # seconds: the first process reports it started this long ago
    hang_after_restart: bool = False  # a restart that does not help: every new process hangs at once
    dev_mode: bool = False            # VLLM_SERVER_DEV_MODE=1: POST /pause, POST /resume, GET /is_paused

    RESTART_FIELDS = ("engines", "model", "tls")

    @classmethod
    def field_names(cls):
        return [f.name for f in dataclasses.fields(cls)]

    def update(self, options):
        names = self.field_names()
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; known: {names}")
        for name, value in options.items():
            default = getattr(ServerConfig, name)
            if value is None:
                value = default
            elif isinstance(default, bool):
                if isinstance(value, str):
                    value = value.strip().lower() in ("1", "true", "yes", "on")
                else:
                    value = bool(value)
            elif isinstance(default, int):
                value = int(value)
            elif isinstance(default, float):
                value = float(value)
            else:
                value = str(value)
            setattr(self, name, value)
        self.validate()

    def validate(self):
        if self.engines < 1 or self.engines > 64:
            raise ValueError("engines must be 1..64")
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.step_rate <= 0:
            raise ValueError("step_rate must be > 0")
        if self.chunk_tokens < 1:
            raise ValueError("chunk_tokens must be >= 1")
        if self.flavor not in ("v1", "v0"):
            raise ValueError("flavor must be v1 or v0")
        if self.flavor == "v0" and self.engines != 1:
            raise ValueError("flavor v0 has no engine label: engines must be 1")
        if self.restart_inflight not in ("500", "close"):
            raise ValueError("restart_inflight must be '500' or 'close'")

    def resolved_version(self):
        return self.version or ("0.6.6" if self.flavor == "v0" else "0.32.0")

    def resolved_root(self):
        return self.root or f"/models/{self.model}"

    def as_dict(self):
        return {name: getattr(self, name) for name in self.field_names()}


def count_text_tokens(text):
    """Prompt tokens of a text: about one token per 4 characters (at least one per word)."""
    if not text:
        return 0
    return max(len(text.split()), (len(text) + 3) // 4)


def generated_text(n):
    return "".join(" " + WORDS[i % len(WORDS)] for i in range(n))


def openai_error(status, message, typ):
    return Response.json({"error": {"message": message, "type": typ, "param": None, "code": status}}, status=status)


class LoadBatch:
    __slots__ = ("id", "params", "tasks", "inflight", "completed", "failed", "stopped")

    def __init__(self, batch_id, params):
        self.id = batch_id
        self.params = params
        self.tasks = []
        self.inflight = set()
        self.completed = 0
        self.failed = 0
        self.stopped = False

    def info(self):
        return {"id": self.id, "params": self.params, "active": len(self.inflight), "completed": self.completed,
                "failed": self.failed, "stopped": self.stopped}


class SimServer:
    """A simulated vLLM server process: listening socket, engines, registry, fault states."""

    def __init__(self, sim, sid, host, port, config):
        self.sim = sim
        self.id = sid
        self.host = host
        self.port = port
        self.config = config
        self.status = "new"       # new | loading | listening | stopped | exited
        self.dead = False
        self.sleep_level = 0
        self.metrics_mode = None  # None or {"mode": ..., params}
        self.connections = set()
        self.listener = None
        self.counts = collections.Counter()
        self.status_counts = collections.Counter()
        self.log = collections.deque(maxlen=1000)
        self.restarts = 0
        self.generation = 0
        self.timers = []
        self.loads = []
        self._load_seq = 0
        self.inflight_http = 0
        self.http_handled = 0
        self.engines = []
        self.start_time = 0.0
        self.reg = None
        self.renderer = None
        self.created_at = time.time()
        self.weight_ops = {}       # operation -> start times of the ones in flight (this process)
        self.pause_answer = None   # {"status", "body", "content_type", "delay"}: what /is_paused says
        self.sticky_faults = []    # (engine index or None, state, params) re-applied to every new process

    # -- process lifecycle ---------------------------------------------------------------
    def _new_process(self, load_seconds=0.0):
        for eng in self.engines:
            eng.stop()
        # process_start_time_seconds has 10 ms resolution: a new process always gets a new value
        first = self.start_time == 0.0
        self.start_time = max(time.time() - (self.config.process_age if first else 0.0), self.start_time + 0.011)
        self.reg = Registry(self.config.engines, created_at=self.start_time + max(load_seconds, 0.0) + 0.3)
        self.renderer = Renderer(self.config.model, engine_label=self.config.flavor != "v0", flavor=self.config.flavor)
        self.engines = [Engine(self, i) for i in range(self.config.engines)]
        for eng in self.engines:
            eng.start()
        self.http_handled = 0
        self.weight_ops = {}
        if self.sleep_level:
            self._set_sleep_gauges()
        for index, state, params in self.sticky_faults:
            for eng in self.engines if index is None else self.engines[index:index + 1]:
                self._apply_fault(eng, state, params)

    def ssl_context(self):
        if not self.config.tls:
            return None
        paths = self.sim.tls_paths()
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(paths["cert_path"]), str(paths["key_path"]))
        return ctx

    async def start(self):
        """Bind the port (raises OSError when it is taken) and start the engines."""
        self._new_process(self.config.load_seconds if self.config.start_loading else 0.0)
        if self.config.start_loading and self.config.load_seconds > 0:
            # reserve the port now (so that it is ours), then let it go while "loading"
            await self._listen()
            await self._close_listener()
            self.status = "loading"
            self._later(self.config.load_seconds, self._relisten, self.generation)
        else:
            await self._listen()

    async def _listen(self):
        self.listener = await asyncio.start_server(
            self._on_connection, self.host, self.port, ssl=self.ssl_context(), backlog=1024, reuse_address=True)
        sock = self.listener.sockets[0]
        self.port = sock.getsockname()[1]
        self.status = "listening"
        for eng in self.engines:
            eng.kick()

    async def _relisten(self, generation):
        if generation != self.generation:
            return
        for dummy in range(100):
            try:
                await self._listen()
                return
            except OSError:
                await asyncio.sleep(0.1)
        self.status = "stopped"

    async def _close_listener(self):
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def _later(self, delay, coro_fn, *args):
        async def runner():
            await asyncio.sleep(delay)
            await coro_fn(*args)
        task = asyncio.get_running_loop().create_task(runner())
        self.timers.append(task)
        task.add_done_callback(lambda t: self.timers.remove(t) if t in self.timers else None)

    async def _on_connection(self, reader, writer):
        await serve_connection(reader, writer, self.handle, connections=self.connections,
                               on_bad_request=self._count_bad_request)

    def _count_bad_request(self):
        self.counts["INVALID"] += 1

    async def _shutdown_process(self, exc):
        """The API server goes away: stop accepting, fail in-flight requests, drop connections."""
        self.generation += 1
        await self._close_listener()
        for eng in self.engines:
            eng.fail_all(exc)
            eng.stop()
        if self.connections:
            await asyncio.sleep(0.1)  # let the handlers write their 500s
        for conn in list(self.connections):
            conn.abort()

    async def restart(self, load_seconds=None, inflight=None):
        load = self.config.load_seconds if load_seconds is None else float(load_seconds)
        close = (inflight or self.config.restart_inflight) == "close"
        await self._shutdown_process(RequestFailed(500, RESTART_MESSAGE, close=close))
        self.restarts += 1
        self.dead = False
        self.sleep_level = 0
        self.status = "loading"
        self._new_process(load)
        if self.config.hang_after_restart:
            for eng in self.engines:
                eng.hang()
        if load > 0:
            self._later(load, self._relisten, self.generation)
        else:
            await self._relisten(self.generation)

    async def stop(self, status="stopped"):
        await self._shutdown_process(RequestFailed(500, RESTART_MESSAGE, close=True))
        self.status = status

    async def delete(self):
        for task in list(self.timers):
            task.cancel()
        for batch in self.loads:
            batch.stopped = True
            for task in batch.tasks:
                task.cancel()
        await self.stop("deleted")

    def accepting(self):
        return self.status == "listening" and not self.dead

    def weight_operations_in_flight(self):
        return sum(len(starts) for starts in self.weight_ops.values())

    def set_weight_operations(self, operations):
        """What ``WeightOperationMetrics.record`` does as operations start (inc) and end (dec, observe)."""
        if not isinstance(operations, dict):
            raise ValueError("operations must be an object like {\"update\": 1}")
        wanted = {}
        for op, count in operations.items():
            if op not in RL_OPERATIONS:
                raise ValueError(f"unknown weight operation {op!r}; known: {list(RL_OPERATIONS)}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError("each operation count must be an integer >= 0")
            wanted[op] = count
        if self.config.flavor == "v0":
            raise ValueError("flavor v0 (vLLM 0.6) has no RL weight-transfer API")
        now = time.time()
        for op in list(wanted) + [o for o in self.weight_ops if o not in wanted]:
            want = wanted.get(op, 0)
            starts = self.weight_ops.setdefault(op, [])
            if want != len(starts):
                while len(starts) < want:
                    starts.append(now)          # in_flight.inc()
                while len(starts) > want:       # in_flight.dec(); duration.observe()
                    self.reg.rl_observe(op, max(now - starts.pop(0), 0.0), now)
                self.reg.rl_set_in_flight(op, want)
            if not starts:
                del self.weight_ops[op]
        for eng in self.engines:
            eng.kick()

    @staticmethod
    def _apply_fault(eng, state, params):
        if state == "decode_stall":
            eng.set_decode_stall(params.get("seconds", 0.0), params.get("abort_after", 5.0))
        else:
            eng.set_reprefill_loop(params.get("count_preemptions", True), params.get("requeue_seconds", 0.0))

    # -- states --------------------------------------------------------------------------
    def _engines_for(self, params):
        idx = params.get("engine")
        if idx is None:
            return self.engines
        idx = int(idx)
        if not 0 <= idx < len(self.engines):
            raise ValueError(f"engine must be 0..{len(self.engines) - 1}")
        return [self.engines[idx]]

    def _set_sleep_gauges(self):
        level = self.sleep_level
        for eng in range(self.config.engines):
            for state, value in (("awake", 1.0 if level == 0 else 0.0), ("weights_offloaded", 1.0 if level == 1 else 0.0),
                                 ("discard_all", 1.0 if level == 2 else 0.0)):
                self.reg.set("vllm:engine_sleep_state", eng, value, (("sleep_state", state),))

    async def set_state(self, state, params):
        params = dict(params or {})
        if state == "normal":
            for eng in self.engines:
                eng.hung = False
                eng.pause = None
                eng.clear_faults()
            self.sticky_faults = []
            self.pause_answer = None
            if self.weight_ops:
                self.set_weight_operations({})
            self.dead = False
            if self.sleep_level:
                self.sleep_level = 0
                self._set_sleep_gauges()
            self.metrics_mode = None
            self.config.slow_metrics = 0.0
            self.config.slow_health = 0.0
            for eng in self.engines:
                eng.kick()
        elif state == "hang":
            for eng in self._engines_for(params):
                eng.hang()
        elif state == "resume":
            for eng in self._engines_for(params):
                eng.resume()
        elif state == "restart":
            await self.restart(params.get("load_seconds"), params.get("inflight"))
        elif state == "dead":
            self.dead = True
            for eng in self.engines:
                eng.fail_all(RequestFailed(500, ENGINE_DEAD_MESSAGE))
            exit_after = params.get("exit_after")
            if exit_after is not None:
                self._later(float(exit_after), self._exit_if_dead, self.generation)
        elif state in ("stop", "down"):
            await self.stop()
        elif state == "sleep":
            level = int(params.get("level", 1))
            if level not in (1, 2):
                raise ValueError("sleep level must be 1 or 2")
            self.sleep_level = level
            self._set_sleep_gauges()
        elif state == "wake":
            self.sleep_level = 0
            self._set_sleep_gauges()
            for eng in self.engines:
                eng.kick()
        elif state == "no_metrics":
            self.metrics_mode = {"mode": "no_metrics"}
        elif state == "metrics_html":
            self.metrics_mode = {"mode": "html", "status": int(params.get("status", 502))}
        elif state == "metrics_garbage":
            kind = params.get("kind", "truncated")
            if kind not in ("truncated", "short", "syntax", "binary"):
                raise ValueError("kind must be truncated, short, syntax or binary")
            self.metrics_mode = {"mode": "garbage", "kind": kind}
        elif state == "metrics_huge":
            self.metrics_mode = {"mode": "huge", "size_mb": float(params.get("size_mb", 20))}
        elif state == "metrics_trickle":
            self.metrics_mode = {"mode": "trickle", "bytes_per_second": float(params.get("bytes_per_second", 16))}
        elif state == "metrics_redirect":
            self.metrics_mode = {"mode": "redirect", "status": int(params.get("status", 302)),
                                 "location": str(params.get("location", "/login?next=%2Fmetrics"))}
        elif state == "metrics_normal":
            self.metrics_mode = None
        elif state == "slow_metrics":
            self.config.slow_metrics = float(params.get("delay", params.get("seconds", 5.0)))
        elif state == "slow_health":
            self.config.slow_health = float(params.get("delay", params.get("seconds", 5.0)))
        elif state == "disable_log_stats":
            self.config.disable_log_stats = bool(params.get("on", True))
        elif state == "multiprocess":
            self.config.multiprocess = bool(params.get("on", True))
        elif state == "v0_idle_ticks":
            self.config.v0_idle_ticks = float(params.get("seconds", 10.0))
            for eng in self.engines:
                eng.wake.set()
        elif state == "weight_update":
            self.set_weight_operations(params.get("operations", {"update": 1}))
        elif state in ("decode_stall", "reprefill_loop"):
            engines = self._engines_for(params)
            fault = {k: v for k, v in params.items() if k not in ("engine", "after_restart")}
            known = {"decode_stall": {"seconds", "abort_after"},
                     "reprefill_loop": {"count_preemptions", "requeue_seconds"}}[state]
            if set(fault) - known:
                raise ValueError(f"unknown parameter(s) {sorted(set(fault) - known)} for {state}; known: {sorted(known)}")
            for eng in engines:
                self._apply_fault(eng, state, fault)
            if params.get("after_restart"):
                index = None if params.get("engine") is None else int(params["engine"])
                self.sticky_faults.append((index, state, fault))
        elif state == "pause_answer":
            self.pause_answer = {"status": int(params.get("status", 200)),
                                 "body": str(params.get("body", '{"is_paused":true}')),
                                 "content_type": str(params.get("content_type", "application/json")),
                                 "delay": float(params.get("delay", 0.0))}
        else:
            raise ValueError(f"unknown state {state!r}; known: {list(STATES)}")

    async def _exit_if_dead(self, generation):
        if self.dead and generation == self.generation:
            await self.stop("exited")

    async def configure(self, options):
        old = self.config.as_dict()
        self.config.update(options)
        changed = {k for k, v in self.config.as_dict().items() if old[k] != v}
        if changed & set(ServerConfig.RESTART_FIELDS) and self.status == "listening":
            await self.restart(load_seconds=0.0)
        else:
            if changed & {"flavor"}:
                self.renderer = Renderer(self.config.model, engine_label=self.config.flavor != "v0",
                                         flavor=self.config.flavor)
            for eng in self.engines:
                eng.wake.set()
        return changed

    # -- load generator ---------------------------------------------------------------------
    def start_load(self, concurrency=1, max_tokens=1000, prompt_tokens=16, endpoint="/v1/completions",
                   repeat=False, deferred_seconds=0.0, engine=None):
        if endpoint not in ("/v1/completions", "/v1/chat/completions"):
            raise ValueError("endpoint must be /v1/completions or /v1/chat/completions")
        if engine is not None and not 0 <= int(engine) < len(self.engines):
            raise ValueError("no such engine")
        self._load_seq += 1
        params = {"concurrency": int(concurrency), "max_tokens": int(max_tokens), "prompt_tokens": int(prompt_tokens),
                  "endpoint": endpoint, "repeat": bool(repeat), "deferred_seconds": float(deferred_seconds),
                  "engine": None if engine is None else int(engine)}
        batch = LoadBatch(self._load_seq, params)
        loop = asyncio.get_running_loop()
        for dummy in range(params["concurrency"]):
            batch.tasks.append(loop.create_task(self._load_worker(batch)))
        self.loads.append(batch)
        return batch.info()

    async def _load_worker(self, batch):
        p = batch.params
        loop = asyncio.get_running_loop()
        while not batch.stopped:
            if not self.accepting():
                await asyncio.sleep(0.05)
                continue
            sreq = SimRequest(p["prompt_tokens"], p["max_tokens"], kind="load", endpoint=p["endpoint"],
                              deferred_seconds=p["deferred_seconds"], max_tokens_param=p["max_tokens"])
            eng = self.engines[p["engine"]] if p["engine"] is not None else self.pick_engine()
            generation = self.generation
            batch.inflight.add(sreq)
            t0 = loop.time()
            eng.submit(sreq)
            status = 200
            try:
                await sreq.future
                batch.completed += 1
            except RequestFailed as exc:
                batch.failed += 1
                status = exc.status
            finally:
                batch.inflight.discard(sreq)
            if generation == self.generation and sreq.finish_reason != "abort":
                self.reg.record_http(p["endpoint"], "POST", status, 60 + 4 * p["prompt_tokens"],
                                     300 + 6 * sreq.generated, loop.time() - t0)
            if not p["repeat"]:
                break
            if status != 200:
                await asyncio.sleep(0.05)

    def stop_load(self, abort=True):
        stopped = []
        for batch in self.loads:
            if batch.stopped:
                continue
            batch.stopped = True
            if abort:
                for sreq in list(batch.inflight):
                    if sreq.engine is not None and sreq.engine < len(self.engines):
                        if self.engines[sreq.engine].abort(sreq):
                            sreq.fail(RequestFailed(499, "aborted before the engine saw it"))
            stopped.append(batch.info())
        return stopped

    def on_request_done(self, req):
        """Engine callback when a request finished (any reason)."""

    # -- HTTP -------------------------------------------------------------------------------
    def pick_engine(self):
        return min(self.engines, key=lambda e: (e.load(), e.index))

    async def handle(self, req):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        key = f"{req.method} {req.path}"
        self.counts[key] += 1
        entry = {"time": time.time(), "method": req.method, "path": req.path, "query": req.query,
                 "headers": dict(req.headers), "body_bytes": len(req.body)}
        if req.path.startswith("/v1/") and req.body:
            entry["body"] = req.body[:4096].decode("utf-8", "replace")
        self.log.append(entry)
        generation = self.generation
        self.inflight_http += 1
        try:
            resp, handler = await self._route(req)
        finally:
            self.inflight_http -= 1
        entry["status"] = None if resp.abort else resp.status
        self.status_counts[f"{key} {entry['status']}"] += 1
        self.http_handled += 1
        if resp.abort:
            return resp
        resp.headers.append(("vary", "Origin"))
        if handler is not None and generation == self.generation and not handler.startswith(EXCLUDED_HANDLERS):
            try:
                req_size = int(req.header("content-length", "0") or 0)
            except ValueError:
                req_size = 0
            self.reg.record_http(handler, req.method, resp.status, req_size, resp.content_length(), loop.time() - t0)
        return resp

    async def _route(self, req):
        path = req.path
        method = req.method
        cfg = self.config
        if path.startswith("/metrics"):
            return await self._metrics(req), "/metrics"
        if cfg.api_key and path.startswith("/v1") and method != "OPTIONS":
            if req.header("authorization", "") != f"Bearer {cfg.api_key}":
                handler = path if path in ("/v1/models", "/v1/completions", "/v1/chat/completions") else "none"
                return Response.json({"error": "Unauthorized"}, status=401), handler
        routes = {
            "/health": ("GET",), "/ping": ("GET", "POST"), "/load": ("GET",), "/version": ("GET",),
            "/v1/models": ("GET",), "/v1/completions": ("POST",), "/v1/chat/completions": ("POST",),
        }
        if cfg.dev_mode:
            routes.update(DEV_ROUTES)
        if path not in routes:
            return Response.json({"detail": "Not Found"}, status=404), "none"
        if method not in routes[path]:
            return Response.json({"detail": "Method Not Allowed"}, status=405, headers=[("allow", ", ".join(routes[path]))]), path
        if path in ("/health", "/ping"):
            if cfg.slow_health > 0:
                await asyncio.sleep(cfg.slow_health)
            return Response(503 if self.dead else 200, b""), path
        if path == "/load":
            load = self.inflight_http - 1 if cfg.server_load_tracking else 0
            if cfg.server_load_tracking:
                load += sum(len(b.inflight) for b in self.loads)
            return Response.json({"server_load": max(load, 0)}), path
        if path == "/version":
            return Response.json({"version": cfg.resolved_version()}), path
        if path == "/v1/models":
            return Response.json(self._models_body()), path
        if path in DEV_ROUTES:
            return await self._dev_route(req, path), path
        return await self._completion(req, chat=path == "/v1/chat/completions"), path

    # -- the pause API (dev mode, vllm/entrypoints/rl/online/api_router.py) ------------------
    async def _engine_rpc(self, req):
        """A utility RPC to every engine core: answered between steps, so never while one hangs.

        Returns False when the client gave up first (the call itself stays queued, as in vLLM).
        """
        gone = False
        while any(e.hung for e in self.engines):
            await asyncio.sleep(0.05)
            gone = gone or req.client_gone()
        return not gone and not req.client_gone()

    @staticmethod
    def _validation_error(errors):
        """FastAPI's 422 (JSONResponse: compact, ensure_ascii=False)."""
        body = json.dumps({"detail": errors}, ensure_ascii=False, separators=(",", ":"))
        return Response(422, body.encode("utf-8"), "application/json")

    async def _dev_route(self, req, path):
        engines = self.engines
        if path == "/is_paused":
            answer = self.pause_answer
            if answer is not None:
                if answer["delay"] > 0:
                    await asyncio.sleep(answer["delay"])
                return Response(answer["status"], answer["body"], answer["content_type"] or None)
            if self.dead:
                return Response.json({"error": f"Failed to fetch pause status: {ENGINE_DEAD_MESSAGE}"}, status=500)
            if not await self._engine_rpc(req):
                return Response(abort=True)
            paused = self.sleep_level > 0 or any(e.pause is not None for e in engines)
            return Response.json({"is_paused": paused})
        if path == "/resume":
            if self.dead:
                return Response.json({"error": f"Failed to resume generation: {ENGINE_DEAD_MESSAGE}"}, status=500)
            answered = await self._engine_rpc(req)
            for eng in self.engines:
                eng.set_pause(None)
            return Response.json({"status": "resumed"}) if answered else Response(abort=True)
        # /pause: query parameters validated as FastAPI does (the last value of a repeated one wins)
        query = dict(parse_qsl(req.query, keep_blank_values=True))
        mode = query.get("mode", "abort")
        errors = []
        if mode not in PAUSE_MODES:
            errors.append({"type": "literal_error", "loc": ["query", "mode"],
                           "msg": "Input should be 'abort', 'wait' or 'keep'", "input": mode,
                           "ctx": {"expected": "'abort', 'wait' or 'keep'"}})
        clear_cache = query.get("clear_cache")
        if clear_cache is not None and clear_cache.lower() not in PYDANTIC_TRUE + PYDANTIC_FALSE:
            errors.append({"type": "bool_parsing", "loc": ["query", "clear_cache"],
                           "msg": "Input should be a valid boolean, unable to interpret input", "input": clear_cache})
        if errors:
            return self._validation_error(errors)
        if self.dead:
            return Response.json({"error": f"Failed to pause generation: {ENGINE_DEAD_MESSAGE}"}, status=500)
        answered = await self._engine_rpc(req)
        generation = self.generation
        for eng in self.engines:
            if mode == "abort":
                eng.abort_all_for_pause()
            eng.set_pause("all" if mode == "keep" else "new")
        if mode != "keep":
            # the call returns once every engine drained (wait: no timeout, as in vLLM)
            while generation == self.generation and not all(e.drained() for e in self.engines):
                await asyncio.sleep(0.02)
                answered = answered and not req.client_gone()
        return Response.json({"status": "paused"}) if answered and not req.client_gone() else Response(abort=True)

    def _models_body(self):
        now = int(time.time())
        return {"object": "list", "data": [{
            "id": self.config.model, "object": "model", "created": now, "owned_by": "vllm",
            "root": self.config.resolved_root(), "parent": None, "max_model_len": self.config.max_model_len,
            "permission": [{
                "id": f"modelperm-{secrets.token_hex(8)}", "object": "model_permission", "created": now,
                "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                "organization": "*", "group": None, "is_blocking": False}]}]}

    # -- /metrics -------------------------------------------------------------------------------
    def _update_process_metrics(self):
        reg = self.reg
        steps = sum(e.steps for e in self.engines)
        reg.set("process_start_time_seconds", None, round(self.start_time, 2))
        reg.set("process_cpu_seconds_total", None, round(1.5 + 0.0007 * self.http_handled + 0.00015 * steps, 2))
        reg.set("process_open_fds", None, 33 + len(self.connections))
        reg.set("process_resident_memory_bytes", None, 653414400.0 + 4096.0 * min(steps // 100, 4096))

    def render_metrics(self, openmetrics=False):
        self._update_process_metrics()
        return self.renderer.render(self.reg, multiprocess=self.config.multiprocess,
                                    log_stats=not self.config.disable_log_stats, openmetrics=openmetrics)

    async def _metrics(self, req):
        cfg = self.config
        if cfg.slow_metrics > 0:
            await asyncio.sleep(cfg.slow_metrics)
        mode = self.metrics_mode
        if mode is not None:
            return await self._bad_metrics(mode)
        accept = req.header("accept", "")
        om = cfg.openmetrics and any(a.split(";")[0].strip() == "application/openmetrics-text" for a in accept.split(","))
        body = self.render_metrics(openmetrics=om).encode("utf-8")
        ctype = OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE
        headers = []
        if cfg.gzip and any(a.split(";")[0].strip().lower() == "gzip" for a in req.header("accept-encoding", "").split(",")):
            body = gzip.compress(body)
            headers.append(("content-encoding", "gzip"))
        return Response(200, body, ctype, headers)

    async def _bad_metrics(self, mode):
        kind = mode["mode"]
        if kind == "no_metrics":
            return Response.json({"detail": "Not Found"}, status=404)
        if kind == "html":
            status = mode["status"]
            if status == 200:
                html = ("<!DOCTYPE html><html><head><title>Sign in</title></head><body><h1>Sign in</h1>"
                        "<form method=\"post\" action=\"/login\"><input name=\"user\"><input name=\"password\" "
                        "type=\"password\"></form></body></html>\n")
            else:
                html = (f"<html>\r\n<head><title>{status} Bad Gateway</title></head>\r\n<body>\r\n"
                        f"<center><h1>{status} Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
                        "</body>\r\n</html>\r\n")
            return Response(status, html, "text/html; charset=utf-8")
        if kind == "redirect":
            return Response(mode["status"], b"", None, [("location", mode["location"])])
        text = self.render_metrics()
        if kind == "garbage":
            sub = mode["kind"]
            if sub == "truncated":
                # a complete HTTP answer whose body stops inside a sample line (after its "{")
                pos = text.find("\nvllm:", int(len(text) * 0.4)) + 1
                if pos <= 0:
                    pos = text.find("{", int(len(text) * 0.4)) - 10
                brace = text.find("{", pos)
                return Response(200, text[: brace + 4], TEXT_CONTENT_TYPE)
            if sub == "short":
                data = text.encode("utf-8")
                part = data[: len(data) * 2 // 5]

                async def short(writer):
                    writer.write(part)
                    await writer.drain()
                    writer.transport.abort()
                return Response(200, b"", TEXT_CONTENT_TYPE, stream=short, content_length=len(data), close=True)
            if sub == "syntax":
                lines = text.splitlines()
                bad = [
                    'vllm:num_requests_running{engine="0",model_name="' + self.config.model + '" 3.0',
                    'vllm:num_requests_waiting{engine="0",model_name="' + self.config.model + '"} three',
                    "# TYPE vllm:generation_tokens_total sideways",
                    'vllm:generation_tokens_total{engine="0",model_name=tiny} 1.0',
                    "}}}{{{ 1 2 3",
                ]
                step = max(len(lines) // (len(bad) + 1), 1)
                for i, line in enumerate(bad):
                    lines.insert((i + 1) * step, line)
                return Response(200, "\n".join(lines) + "\n", TEXT_CONTENT_TYPE)
            rnd = random.Random(1234)
            return Response(200, bytes(rnd.getrandbits(8) for dummy in range(4096)), TEXT_CONTENT_TYPE)
        if kind == "huge":
            head = text.encode("utf-8")
            total = int(mode["size_mb"] * 1024 * 1024)
            pad_line = b"# padding: this line only makes the body big; a scraper must bound what it reads\n"
            block = pad_line * (1024 * 1024 // len(pad_line))
            pad_total = max(total - len(head), 0)

            async def huge(writer):
                writer.write(head)
                left = pad_total
                while left > 0:
                    piece = block if left >= len(block) else block[:left]
                    writer.write(piece)
                    left -= len(piece)
                    await writer.drain()
            return Response(200, b"", TEXT_CONTENT_TYPE, stream=huge, content_length=len(head) + pad_total)
        if kind == "trickle":
            data = text.encode("utf-8")
            bps = max(mode["bytes_per_second"], 0.1)
            generation = self.generation

            async def trickle(writer):
                per_tick = max(int(bps / 10), 1)
                delay = per_tick / bps
                pos = 0
                while pos < len(data):
                    if writer.is_closing() or generation != self.generation or self.metrics_mode is not mode:
                        break
                    writer.write(data[pos:pos + per_tick])
                    pos += per_tick
                    await writer.drain()
                    await asyncio.sleep(delay)
                if pos < len(data):
                    writer.transport.abort()
            return Response(200, b"", TEXT_CONTENT_TYPE, stream=trickle, content_length=len(data), close=True)
        raise ValueError(f"unknown metrics mode {kind}")

    # -- completions -----------------------------------------------------------------------------
    def _prompt_tokens(self, body, chat):
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise ValueError("messages must be a non-empty list")
            total = 3
            for msg in messages:
                if not isinstance(msg, dict):
                    raise ValueError("each message must be an object")
                content = msg.get("content")
                if isinstance(content, list):
                    content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                total += 4 + count_text_tokens(str(content or ""))
            return total
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return max(count_text_tokens(prompt), 1)
        if isinstance(prompt, list) and prompt:
            if all(isinstance(x, int) for x in prompt):
                return len(prompt)
            if all(isinstance(x, str) for x in prompt):
                return max(count_text_tokens(prompt[0]), 1)
            if all(isinstance(x, list) for x in prompt):
                return max(len(prompt[0]), 1)
        raise ValueError("prompt must be a string, a list of strings or a list of token ids")

    async def _completion(self, req, chat):
        cfg = self.config
        try:
            body = req.json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            model = body.get("model")
            if model is not None and model != cfg.model:
                return openai_error(404, f"The model `{model}` does not exist.", "NotFoundError")
            prompt_tokens = self._prompt_tokens(body, chat)
            max_tokens = body.get("max_completion_tokens") if chat else None
            if max_tokens is None:
                max_tokens = body.get("max_tokens")
            if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
                raise ValueError("max_tokens must be an integer >= 1")
        except (ValueError, UnicodeDecodeError) as exc:
            return openai_error(400, str(exc), "BadRequestError")
        if max_tokens is not None and prompt_tokens + max_tokens > cfg.max_model_len:
            return openai_error(400, (
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."), "BadRequestError")
        if prompt_tokens >= cfg.max_model_len:
            return openai_error(400, f"This model's maximum context length is {cfg.max_model_len} tokens.", "BadRequestError")
        if self.dead:
            return openai_error(500, ENGINE_DEAD_MESSAGE, "InternalServerError")
        if max_tokens is None:
            limit, reason = min(cfg.default_max_tokens, cfg.max_model_len - prompt_tokens), "stop"
        else:
            limit, reason = max_tokens, "length"
        stream = bool(body.get("stream"))
        queue = asyncio.Queue() if stream else None
        sreq = SimRequest(prompt_tokens, limit, finish_reason_on_limit=reason, endpoint=req.path,
                          on_token=(lambda r, n: queue.put_nowait(("token", n))) if stream else None,
                          max_tokens_param=max_tokens)
        engine = self.pick_engine()
        engine.submit(sreq)
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(16)
        created = int(time.time())
        if stream:
            return self._stream(req, sreq, queue, chat, rid, created, body)
        while True:
            done, dummy = await asyncio.wait({sreq.future}, timeout=0.3)
            if done:
                break
            if req.client_gone():
                if sreq.engine is not None and sreq.engine < len(self.engines):
                    self.engines[sreq.engine].abort(sreq)
                return Response(abort=True)
        exc = sreq.future.exception()
        if exc is not None:
            if getattr(exc, "close", False):
                return Response(abort=True)
            resp = openai_error(getattr(exc, "status", 500), str(exc), "InternalServerError")
            resp.close = True
            return resp
        usage = {"prompt_tokens": sreq.prompt_tokens, "total_tokens": sreq.prompt_tokens + sreq.generated,
                 "completion_tokens": sreq.generated, "prompt_tokens_details": None}
        text = generated_text(sreq.generated)
        if chat:
            message = {"role": "assistant", "content": None if cfg.reasoning else text, "refusal": None,
                       "annotations": None, "audio": None, "function_call": None, "tool_calls": [],
                       "reasoning_content": text if cfg.reasoning else None}
            out = {"id": rid, "object": "chat.completion", "created": created, "model": cfg.model,
                   "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": sreq.finish_reason,
                                "stop_reason": None}],
                   "service_tier": None, "system_fingerprint": None, "usage": usage, "prompt_logprobs": None,
                   "kv_transfer_params": None}
        else:
            out = {"id": rid, "object": "text_completion", "created": created, "model": cfg.model,
                   "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": sreq.finish_reason,
                                "stop_reason": None, "prompt_logprobs": None}],
                   "service_tier": None, "system_fingerprint": None, "usage": usage, "kv_transfer_params": None}
        return Response.json(out)

    def _stream(self, req, sreq, queue, chat, rid, created, body):
        cfg = self.config
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        sreq.future.add_done_callback(lambda f: queue.put_nowait(("done", None)))
        obj = "chat.completion.chunk" if chat else "text_completion"
        engines = self.engines

        def chunk(choice, usage=None):
            data = {"id": rid, "object": obj, "created": created, "model": cfg.model, "choices": choice}
            if usage is not None:
                data["usage"] = usage
            return "data: " + json.dumps(data, separators=(",", ":")) + "\n\n"

        async def run(writer):
            sent = 0
            if chat:
                await write_chunk(writer, chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                  "logprobs": None, "finish_reason": None}]))
            while True:
                try:
                    kind, dummy = await asyncio.wait_for(queue.get(), timeout=0.3)
                except asyncio.TimeoutError:
                    if req.client_gone():
                        if sreq.engine is not None and sreq.engine < len(engines):
                            engines[sreq.engine].abort(sreq)
                        writer.transport.abort()
                        return
                    continue
                if kind == "token":
                    word = " " + WORDS[sent % len(WORDS)]
                    sent += 1
                    delta = {"content": word} if chat else None
                    if chat:
                        choice = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]
                    else:
                        choice = [{"index": 0, "text": word, "logprobs": None, "finish_reason": None, "stop_reason": None}]
                    await write_chunk(writer, chunk(choice))
                    continue
                exc = sreq.future.exception()
                if exc is not None:
                    if getattr(exc, "close", False):
                        writer.transport.abort()
                        return
                    err = {"error": {"message": str(exc), "type": "InternalServerError", "param": None, "code": 500}}
                    await write_chunk(writer, "data: " + json.dumps(err) + "\n\n")
                    break
                if chat:
                    choice = [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": sreq.finish_reason,
                               "stop_reason": None}]
                else:
                    choice = [{"index": 0, "text": "", "logprobs": None, "finish_reason": sreq.finish_reason,
                               "stop_reason": None}]
                await write_chunk(writer, chunk(choice))
                if include_usage:
                    usage = {"prompt_tokens": sreq.prompt_tokens, "total_tokens": sreq.prompt_tokens + sreq.generated,
                             "completion_tokens": sreq.generated}
                    await write_chunk(writer, chunk([], usage))
                break
            await write_chunk(writer, "data: [DONE]\n\n")
            await end_chunks(writer)

        return Response(200, b"", "text/event-stream; charset=utf-8", stream=run, chunked=True)

    # -- introspection ----------------------------------------------------------------------------
    def info(self):
        scheme = "https" if self.config.tls else "http"
        host = self.host if ":" not in self.host else f"[{self.host}]"
        data = {
            "id": self.id, "host": self.host, "port": self.port, "scheme": scheme,
            "url": f"{scheme}://{host}:{self.port}", "status": self.status,
            "state": self.state_summary(), "config": self.config.as_dict(),
            "start_time": self.start_time, "restarts": self.restarts,
        }
        if self.config.tls:
            paths = self.sim.tls_paths()
            data["ca_path"] = str(paths["ca_path"])
            data["cert_path"] = str(paths["cert_path"])
        else:
            data["ca_path"] = None
        return data

    def state_summary(self):
        return {
            "dead": self.dead, "sleep_level": self.sleep_level,
            "hung_engines": [e.index for e in self.engines if e.hung],
            "metrics_mode": self.metrics_mode, "slow_metrics": self.config.slow_metrics,
            "slow_health": self.config.slow_health, "multiprocess": self.config.multiprocess,
            "disable_log_stats": self.config.disable_log_stats, "dev_mode": self.config.dev_mode,
            "paused": sorted({e.pause for e in self.engines if e.pause is not None}),
            "weight_operations": {op: len(starts) for op, starts in self.weight_ops.items()},
            "pause_answer": self.pause_answer,
            "decode_stall_engines": [e.index for e in self.engines if e.decode_stall is not None],
            "reprefill_engines": [e.index for e in self.engines if e.reprefill is not None],
            "after_restart": [{"engine": i, "state": st, **p} for i, st, p in self.sticky_faults],
        }

    def stats(self):
        engines = [e.snapshot() for e in self.engines]
        totals = {}
        for key in ("running", "waiting", "inbox", "steps", "output_steps", "generation_tokens", "prompt_tokens",
                    "iteration_tokens_count", "iteration_tokens_sum", "preemptions"):
            totals[key] = sum((e[key] or 0) for e in engines)
        return {
            "id": self.id, "port": self.port, "status": self.status, "state": self.state_summary(),
            "start_time": self.start_time, "process_start_time_seconds": round(self.start_time, 2),
            "restarts": self.restarts, "requests": dict(self.counts), "responses": dict(self.status_counts),
            "requests_total": sum(self.counts.values()), "connections_open": len(self.connections),
            "http_in_flight": self.inflight_http, "engines": engines, "totals": totals,
            "load": [b.info() for b in self.loads],
        }

    def reset_counts(self):
        self.counts.clear()
        self.status_counts.clear()
        self.log.clear()
