"""The simulator: many simulated vLLM servers in one asyncio process, and its HTTP control API.

Control API (JSON in, JSON out; errors are ``{"error": "..."}`` with 400/404):

=======  ================================  ===================================================
GET      /health                           ``{"ok": true, "servers": n, "pid": ...}``
GET      /servers                          ``{"servers": [info, ...]}``
POST     /servers                          create: ``{options}``, ``{"count": n, options}`` or
                                           ``{"servers": [{options}, ...]}`` -> ``{"servers": [info]}``
DELETE   /servers                          delete all -> ``{"deleted": [ids]}``
GET      /servers/{id}                     info
PATCH    /servers/{id}                     change options -> info (+ ``"changed"``)
DELETE   /servers/{id}                     ``{"deleted": id}``
POST     /servers/{id}/state               ``{"state": name, ...params}`` -> info
GET      /servers/{id}/stats               request counts, engine counters, load
GET      /servers/{id}/requests            ``{"requests": [recent requests with headers]}``
POST     /servers/{id}/reset_counts        zero the request counts and the log
POST     /servers/{id}/load                start load -> ``{"load": batch}``
DELETE   /servers/{id}/load                stop load (``?abort=0`` lets in-flight ones finish)
GET      /servers/{id}/metrics             the exposition as the server would render it now
GET      /tls                              CA / certificate paths (generated on first use)
POST     /shutdown                         stop the simulator
=======  ================================  ===================================================
"""

import asyncio
import itertools
import json
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs

from .httpd import Response, serve_connection
from .server import STATES, ServerConfig, SimServer
from .tls import available_backend, make_certificates


def parse_port_range(value):
    if not value:
        return None
    if isinstance(value, (tuple, list)):
        lo, hi = int(value[0]), int(value[1])
    else:
        lo_s, dummy, hi_s = str(value).partition("-")
        lo, hi = int(lo_s), int(hi_s or lo_s)
    if not 0 < lo <= hi < 65536:
        raise ValueError(f"bad port range {value!r}")
    return lo, hi


class Simulator:
    """Owns the simulated servers and the control endpoint."""

    def __init__(self, host="127.0.0.1", port_range=None, workdir=None):
        self.host = host
        self.port_range = parse_port_range(port_range)
        self._cursor = self.port_range[0] if self.port_range else 0
        self.servers = {}
        self._seq = itertools.count(1)
        self._workdir = Path(workdir) if workdir else None
        self._tmp = None
        self._tls = None
        self.control = None
        self.control_port = None
        self.stopped = asyncio.Event()
        self._control_connections = set()
        self.started_at = time.time()

    # -- TLS ------------------------------------------------------------------------------------
    def workdir(self):
        if self._workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="vllm-sim-")
            self._workdir = Path(self._tmp.name)
        return self._workdir

    def tls_paths(self):
        if self._tls is None:
            cert, key, ca, backend = make_certificates(self.workdir() / "tls")
            self._tls = {"cert_path": cert, "key_path": key, "ca_path": ca, "backend": backend}
        return self._tls

    # -- ports ----------------------------------------------------------------------------------
    def _candidate_ports(self):
        if not self.port_range:
            yield 0
            return
        lo, hi = self.port_range
        span = hi - lo + 1
        for i in range(span):
            port = lo + (self._cursor - lo + i) % span
            yield port

    async def bind_with_retry(self, bind):
        """Call ``bind(port)`` on candidate ports until one works; return the port."""
        last = None
        for port in self._candidate_ports():
            try:
                await bind(port)
            except OSError as exc:
                last = exc
                continue
            if self.port_range:
                lo, hi = self.port_range
                self._cursor = lo + (port - lo + 1) % (hi - lo + 1)
            return port
        raise OSError(f"no free port in range {self.port_range}: {last}")

    # -- servers --------------------------------------------------------------------------------
    async def create_server(self, options):
        options = dict(options or {})
        given_id = options.pop("id", None)
        given_name = options.pop("name", None)
        sid = str(given_id or given_name or f"sim-{next(self._seq)}")
        if sid in self.servers:
            raise ValueError(f"server id {sid!r} exists")
        host = str(options.pop("host", None) or self.host)
        port = options.pop("port", None)
        config = ServerConfig()
        config.update(options)
        if config.tls:
            self.tls_paths()
        server = SimServer(self, sid, host, int(port or 0), config)
        try:
            if port:
                await server.start()
            else:
                async def bind(p):
                    server.port = p
                    await server.start()
                await self.bind_with_retry(bind)
        except BaseException:
            await server.delete()
            raise
        self.servers[sid] = server
        return server

    def get(self, sid):
        try:
            return self.servers[sid]
        except KeyError:
            raise LookupError(f"no server {sid!r}") from None

    async def delete_server(self, sid):
        server = self.get(sid)
        del self.servers[sid]
        await server.delete()

    async def delete_all(self):
        ids = list(self.servers)
        servers = [self.servers.pop(sid) for sid in ids]
        await asyncio.gather(*(s.delete() for s in servers), return_exceptions=True)
        return ids

    async def close(self):
        await self.delete_all()
        if self.control is not None:
            self.control.close()
            for conn in list(self._control_connections):
                conn.abort()
            self.control = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- control API ----------------------------------------------------------------------------
    async def start_control(self, port=0):
        async def bind(p):
            self.control = await asyncio.start_server(self._on_control, self.host, p, reuse_address=True)
        if port:
            await bind(port)
        elif self.port_range:
            await self.bind_with_retry(bind)
        else:
            await bind(0)
        self.control_port = self.control.sockets[0].getsockname()[1]
        return self.control_port

    async def _on_control(self, reader, writer):
        await serve_connection(reader, writer, self._control_handler, connections=self._control_connections,
                               server_header="vllm-simulator")

    async def _control_handler(self, req):
        try:
            return await self._control_route(req)
        except LookupError as exc:
            return Response.json({"error": str(exc)}, status=404)
        except (ValueError, TypeError, json.JSONDecodeError) as exc:
            return Response.json({"error": str(exc)}, status=400)
        except OSError as exc:
            return Response.json({"error": str(exc)}, status=409)

    async def _control_route(self, req):
        parts = [p for p in req.path.split("/") if p]
        method = req.method
        query = {k: v[-1] for k, v in parse_qs(req.query).items()}
        body = req.json() if req.body else {}
        if parts == ["health"]:
            return Response.json({"ok": True, "servers": len(self.servers), "pid": os.getpid(),
                                  "states": list(STATES), "options": ServerConfig.field_names(),
                                  "tls_backend": available_backend()})
        if parts == ["shutdown"] and method == "POST":
            asyncio.get_running_loop().call_later(0.05, self.stopped.set)
            return Response.json({"ok": True}, close=True)
        if parts == ["tls"]:
            paths = self.tls_paths()
            return Response.json({k: str(v) for k, v in paths.items()})
        if parts == ["servers"]:
            if method == "GET":
                return Response.json({"servers": [s.info() for s in self.servers.values()]})
            if method == "POST":
                if not isinstance(body, dict):
                    raise ValueError("body must be an object")
                if "servers" in body:
                    specs = body["servers"]
                else:
                    count = int(body.pop("count", 1))
                    if count < 1 or count > 2000:
                        raise ValueError("count must be 1..2000")
                    if count > 1 and ("id" in body or "name" in body or "port" in body):
                        raise ValueError("id/name/port cannot be shared by several servers")
                    specs = [dict(body) for dummy in range(count)]
                created = []
                try:
                    for spec in specs:
                        created.append(await self.create_server(spec))
                except Exception:
                    for server in created:
                        await self.delete_server(server.id)
                    raise
                return Response.json({"servers": [s.info() for s in created]}, status=201)
            if method == "DELETE":
                return Response.json({"deleted": await self.delete_all()})
        if len(parts) >= 2 and parts[0] == "servers":
            server = self.get(parts[1])
            rest = parts[2:]
            if not rest:
                if method == "GET":
                    return Response.json(server.info())
                if method == "PATCH":
                    changed = await server.configure(body)
                    info = server.info()
                    info["changed"] = sorted(changed)
                    return Response.json(info)
                if method == "DELETE":
                    await self.delete_server(server.id)
                    return Response.json({"deleted": server.id})
            elif rest == ["state"] and method == "POST":
                params = dict(body)
                state = params.pop("state", None)
                if not state:
                    raise ValueError("missing 'state'")
                await server.set_state(state, params)
                return Response.json(server.info())
            elif rest == ["stats"] and method == "GET":
                return Response.json(server.stats())
            elif rest == ["requests"] and method == "GET":
                return Response.json({"requests": list(server.log)})
            elif rest == ["reset_counts"] and method == "POST":
                server.reset_counts()
                return Response.json({"ok": True})
            elif rest == ["load"] and method == "POST":
                return Response.json({"load": server.start_load(**body)}, status=201)
            elif rest == ["load"] and method == "DELETE":
                abort = str(query.get("abort", body.get("abort", "1") if isinstance(body, dict) else "1")).lower()
                return Response.json({"stopped": server.stop_load(abort=abort not in ("0", "false", "no"))})
            elif rest == ["metrics"] and method == "GET":
                om = query.get("openmetrics", "0") in ("1", "true")
                return Response(200, server.render_metrics(openmetrics=om), "text/plain; charset=utf-8")
        return Response.json({"error": f"no route {method} {req.path}"}, status=404)
