"""A small asyncio HTTP/1.1 server (keep-alive, Content-Length and chunked bodies).

Enough of HTTP for the simulator: one coroutine per connection, a handler coroutine
per request returning a :class:`Response`; a response may stream its body itself,
or ask for the connection to be dropped without an answer.
"""

import asyncio
import email.utils
import json
from http import HTTPStatus

MAX_HEADER_LINES = 200
MAX_BODY = 64 * 1024 * 1024


class Request:
    __slots__ = ("method", "target", "path", "query", "version", "headers", "body", "reader", "writer", "conn", "started")

    def __init__(self, method, target, version, headers, body, reader, writer, conn, started):
        self.method = method
        self.target = target
        path, dummy, query = target.partition("?")
        self.path = path
        self.query = query
        self.version = version
        self.headers = headers
        self.body = body
        self.reader = reader
        self.writer = writer
        self.conn = conn
        self.started = started

    def header(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def json(self):
        return json.loads(self.body.decode("utf-8") or "null")

    def client_gone(self):
        """True once the client closed its side of the connection."""
        return self.reader.at_eof() or self.writer.is_closing()


class Response:
    """A response; ``stream`` (async callable taking the writer) writes the body itself."""

    __slots__ = ("status", "body", "headers", "stream", "close", "abort", "chunked")

    def __init__(self, status=200, body=b"", content_type=None, headers=None, *,
                 stream=None, close=False, abort=False, chunked=False, content_length=None):
        self.status = int(status)
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.body = body
        self.headers = []
        self.stream = stream
        self.close = close
        self.abort = abort
        self.chunked = chunked
        if not chunked:
            length = len(body) if content_length is None else content_length
            self.headers.append(("content-length", str(length)))
        if content_type:
            self.headers.append(("content-type", content_type))
        if chunked:
            self.headers.append(("transfer-encoding", "chunked"))
        if headers:
            self.headers.extend(headers)

    @classmethod
    def json(cls, obj, status=200, headers=None, **kw):
        body = json.dumps(obj, separators=(",", ":")).encode("utf-8")
        return cls(status, body, "application/json", headers, **kw)

    def content_length(self):
        for k, v in self.headers:
            if k == "content-length":
                return int(v)
        return 0


class Connection:
    """One accepted connection; tracked so that a restart can drop them all."""

    __slots__ = ("reader", "writer", "busy")

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.busy = False

    def abort(self):
        transport = self.writer.transport
        if transport is not None and not transport.is_closing():
            transport.abort()


def _reason(status):
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def head_bytes(status, headers, server_header="uvicorn"):
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    lines.append(f"date: {email.utils.formatdate(usegmt=True)}")
    if server_header:
        lines.append(f"server: {server_header}")
    for k, v in headers:
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_body(reader, headers):
    te = headers.get("transfer-encoding", "").lower()
    if "chunked" in te:
        chunks = []
        total = 0
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise ConnectionError("eof in chunked body")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                break
            total += size
            if total > MAX_BODY:
                raise ValueError("body too large")
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        return b"".join(chunks)
    length = int(headers.get("content-length", "0") or "0")
    if length < 0 or length > MAX_BODY:
        raise ValueError("bad content-length")
    if length == 0:
        return b""
    return await reader.readexactly(length)


async def serve_connection(reader, writer, handler, *, connections=None, server_header="uvicorn", on_bad_request=None):
    """Serve HTTP/1.1 requests on one connection until it closes."""
    conn = Connection(reader, writer)
    if connections is not None:
        connections.add(conn)
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                line = await reader.readline()
            except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.LimitOverrunError, OSError):
                break
            if not line:
                break
            if line in (b"\r\n", b"\n"):
                continue
            conn.busy = True
            started = loop.time()
            try:
                parts = line.decode("latin-1").rstrip("\r\n").split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                    raise ValueError("bad request line")
                method, target, version = parts
                headers = {}
                for dummy in range(MAX_HEADER_LINES):
                    hline = await reader.readline()
                    if hline in (b"\r\n", b"\n"):
                        break
                    if not hline:
                        raise ConnectionError("eof in headers")
                    name, sep, value = hline.decode("latin-1").partition(":")
                    if not sep:
                        raise ValueError("bad header line")
                    name = name.strip().lower()
                    value = value.strip()
                    headers[name] = f"{headers[name]}, {value}" if name in headers else value
                else:
                    raise ValueError("too many headers")
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await _read_body(reader, headers)
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                break
            except (ValueError, UnicodeDecodeError):
                if on_bad_request is not None:
                    on_bad_request()
                writer.write(head_bytes(400, [("content-length", "11"), ("content-type", "text/plain; charset=utf-8"),
                                              ("connection", "close")], server_header) + b"Bad Request")
                break
            req = Request(method, target, version, headers, body, reader, writer, conn, started)
            try:
                resp = await handler(req)
            except Exception as exc:  # pylint: disable=broad-except
                msg = f"Internal Server Error: {exc!r}".encode("utf-8")
                resp = Response(500, msg, "text/plain; charset=utf-8", close=True)
            if resp is None or resp.abort:
                conn.abort()
                break
            conn_hdr = headers.get("connection", "").lower()
            keep_alive = (version == "HTTP/1.1" and conn_hdr != "close") or (version == "HTTP/1.0" and conn_hdr == "keep-alive")
            extra = []
            if resp.close or not keep_alive:
                extra.append(("connection", "close"))
            try:
                writer.write(head_bytes(resp.status, resp.headers + extra, server_header))
                if resp.stream is not None:
                    await resp.stream(writer)
                elif resp.body and method != "HEAD":
                    writer.write(resp.body)
                await writer.drain()
            except (ConnectionError, OSError, asyncio.IncompleteReadError):
                break
            conn.busy = False
            if resp.close or not keep_alive:
                break
    except asyncio.CancelledError:
        conn.abort()
        raise
    finally:
        if connections is not None:
            connections.discard(conn)
        try:
            writer.close()
        except (ConnectionError, OSError, RuntimeError):
            pass


async def write_chunk(writer, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    if data:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()


async def end_chunks(writer):
    writer.write(b"0\r\n\r\n")
    await writer.drain()
