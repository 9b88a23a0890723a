"""Misbehaving HTTP servers on loopback, for the hostile-input tier (issue 8).

Everything here is standard library only and listens on ``127.0.0.1`` on an ephemeral port.

* :class:`HostileServer` is a raw-socket HTTP/1.x server: it reads one request per connection and
  hands the socket to a *behaviour* chosen by path (or a default one). A behaviour may answer
  properly, answer late, trickle bytes, reset the connection (RST, ``SO_LINGER`` 0), close it
  without a word, hold it forever, send garbage, redirect elsewhere, ... It records every request
  it read (method, target, headers, body, time), so a test can prove what was *not* sent (no probe
  to a server that reports work in flight, no bearer key to a proxy).
* ``vllm_routes(...)`` gives the routes of a vLLM-like server (``/version``, ``/health``, ``/metrics``,
  ``/v1/models``, ``/v1/completions``) with any of them replaced by a hostile behaviour.
* ``vllm_text(...)`` writes small vLLM-shaped expositions whose values are written verbatim
  (``NaN``, ``+Inf``, ``-1``) and whose series can be left out one by one.
* :class:`Registry` (``REGISTRY``) counts the hostile inputs a tier tries and how many of them hold
  (:class:`Violations` records each input as it is judged); ``install_summary(config)``, called by an
  autouse fixture of every hostile test module, prints the count at the end of the session.
* ``run_module`` runs a module file as a process, as Ansible does on the host, and measures its peak RSS.

Every server is stopped by ``stop()`` (or leaving its ``with`` block): the listening socket is
closed, every connection is shut down and every thread joined.
"""

import gzip
import json
import os
import re
import socket
import struct
import threading
import time

from tests.support.paths import FIXTURES, REPO

_REASONS = {200: 'OK', 301: 'Moved Permanently', 302: 'Found', 307: 'Temporary Redirect', 308: 'Permanent Redirect',
            400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 408: 'Request Timeout',
            500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout'}


def capture(name):
    """A real /metrics capture of vLLM 0.32.0 (tests/fixtures/vllm-0.32-cpu)."""
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def with_start_time(text, epoch):
    """The exposition with its ``process_start_time_seconds`` set to ``epoch`` (a number or a raw string)."""
    value = epoch if isinstance(epoch, str) else repr(float(epoch))
    out, count = re.subn(r'(?m)^process_start_time_seconds .*$', 'process_start_time_seconds %s' % value, text)
    assert count == 1, 'no process_start_time_seconds line to replace'
    return out


def cut_after_request_gauges(text):
    """The exposition cut at a line boundary right after the request gauges (running, waiting,
    waiting_by_reason): a complete-looking body without any progress series."""
    lines = text.split('\n')
    gauges = ('vllm:num_requests_running', 'vllm:num_requests_waiting')
    last = max(i for i, line in enumerate(lines) if line.startswith(gauges))
    return '\n'.join(lines[:last + 1]) + '\n'


# --------------------------------------------------------------------------- expositions

PROGRESS = ('vllm:iteration_tokens_total_count', 'vllm:iteration_tokens_total_sum', 'vllm:generation_tokens_total',
            'vllm:prompt_tokens_total', 'vllm:request_success_total', 'vllm:num_preemptions_total')


def vllm_text(engines, start=None, model='tiny', extra=''):
    """A small vLLM-shaped exposition.

    ``engines``: {engine: {field: value}} where field is ``running``, ``waiting``, ``kv`` or a
    progress counter's full name, and value a number or a raw string written as is (``NaN``,
    ``+Inf``, ``-1``); a field left out (or None) leaves that series out. ``start`` writes
    ``process_start_time_seconds`` (a number or a raw string). ``model`` None leaves the
    ``model_name`` label out. ``extra`` is appended verbatim.
    """
    out = ['# HELP python_info Python platform information', '# TYPE python_info gauge',
           'python_info{implementation="CPython",version="3.11.7"} 1.0']
    if start is not None:
        out += ['# TYPE process_start_time_seconds gauge',
                'process_start_time_seconds %s' % (start if isinstance(start, str) else repr(float(start)))]

    def labels(key):
        if model is None:
            return '{engine="%s"}' % key
        return '{engine="%s",model_name="%s"}' % (key, model)

    def fmt(value):
        return value if isinstance(value, str) else repr(float(value))

    for name, field, kind in (('vllm:num_requests_running', 'running', 'gauge'),
                              ('vllm:num_requests_waiting', 'waiting', 'gauge'),
                              ('vllm:kv_cache_usage_perc', 'kv', 'gauge')) + tuple((c, c, 'counter') for c in PROGRESS):
        rows = [(key, values[field]) for key, values in sorted(engines.items()) if values.get(field) is not None]
        if not rows:
            continue
        family = name[:-len('_total')] if kind == 'counter' and name.endswith('_total') else name
        out.append('# TYPE %s %s' % (family, kind))
        for key, value in rows:
            out.append('%s%s %s' % (name, labels(key), fmt(value)))
    text = '\n'.join(out) + '\n'
    return text + extra


def engine_numbers(running=0, waiting=0, kv=0.01, steps=100, tokens=1000, **more):
    """A plain engine: gauges, the KV-cache gauge and every progress counter."""
    values = {'running': running, 'waiting': waiting, 'kv': kv,
              'vllm:iteration_tokens_total_count': steps, 'vllm:iteration_tokens_total_sum': tokens,
              'vllm:generation_tokens_total': tokens, 'vllm:prompt_tokens_total': tokens,
              'vllm:request_success_total': steps // 10, 'vllm:num_preemptions_total': 0}
    values.update(more)
    return values


def completion_json(tokens=1):
    return json.dumps({'id': 'cmpl-hostile', 'object': 'text_completion', 'model': 'tiny',
                       'choices': [{'index': 0, 'text': ' a', 'finish_reason': 'length'}],
                       'usage': {'prompt_tokens': 2, 'completion_tokens': tokens, 'total_tokens': 2 + tokens}})


def gzip_bytes(data):
    return gzip.compress(data.encode() if isinstance(data, str) else data, 9)


# --------------------------------------------------------------------------- the server

class Request(object):
    __slots__ = ('method', 'target', 'path', 'headers', 'body', 'at', 'raw_head')

    def __init__(self, method, target, path, headers, body, at, raw_head):
        self.method = method
        self.target = target
        self.path = path
        self.headers = headers
        self.body = body
        self.at = at
        self.raw_head = raw_head

    def __repr__(self):
        return '<%s %s>' % (self.method, self.target)


class Conn(object):
    """One accepted connection, handed to a behaviour with the request it carried."""

    def __init__(self, sock, server):
        self.sock = sock
        self.server = server
        self.closed = False

    @property
    def stopping(self):
        return self.server.stopping.is_set()

    def send(self, data):
        self.sock.sendall(data)

    def head(self, status, headers=(), length=None):
        lines = ['HTTP/1.1 %d %s' % (status, _REASONS.get(status, 'Status'))]
        for key, value in headers:
            lines.append('%s: %s' % (key, value))
        if length is not None:
            lines.append('Content-Length: %d' % length)
        lines.append('Connection: close')
        self.send(('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1'))

    def respond(self, status, body=b'', ctype='text/plain; version=0.0.4; charset=utf-8', headers=()):
        data = body.encode() if isinstance(body, str) else body
        all_headers = [('Content-Type', ctype)] if ctype else []
        all_headers += list(headers)
        self.head(status, all_headers, len(data))
        self.send(data)

    def wait(self, seconds):
        """Sleep, but wake up when the server stops; False when it stopped."""
        return not self.server.stopping.wait(seconds)

    def client_gone(self):
        try:
            data = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return data == b''

    def reset(self):
        """Close with a TCP RST (SO_LINGER on, timeout 0)."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        except OSError:
            pass
        self.close()

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


class HostileServer(object):
    """A raw-socket HTTP server on 127.0.0.1:<ephemeral port>.

    ``routes``: {path: behaviour} or {(method, path): behaviour}; ``default``: the behaviour for
    anything else (404 unless given). A behaviour is ``callable(conn, request)``. One request per
    connection (``Connection: close``).
    """

    def __init__(self, routes=None, default=None, name='hostile'):
        self.routes = dict(routes or {})
        self.default = default or respond(404, '{"detail":"Not Found"}', 'application/json')
        self.name = name
        self.requests = []
        self.errors = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._conns = set()
        self._threads = []
        self._listener = None
        self._acceptor = None
        self.port = None

    # -- life cycle ----------------------------------------------------------

    def start(self):
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(('127.0.0.1', 0))
        self._listener.listen(128)
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name='hostile-accept-%s' % self.name)
        self._acceptor.daemon = True
        self._acceptor.start()
        return self

    def stop(self):
        self.stopping.set()
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        if self._acceptor is not None:
            self._acceptor.join(5)
        with self._lock:
            conns = list(self._conns)
            threads = list(self._threads)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in threads:
            thread.join(5)
        alive = [t for t in threads if t.is_alive()]
        if alive or (self._acceptor is not None and self._acceptor.is_alive()):
            raise RuntimeError('hostile server %s: %d thread(s) did not stop' % (self.name, len(alive)))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.port

    # -- what it saw ---------------------------------------------------------

    def seen(self, method=None, path=None):
        with self._lock:
            return [r for r in self.requests
                    if (method is None or r.method == method) and (path is None or r.path == path)]

    def posts(self):
        return self.seen('POST')

    # -- mechanics -----------------------------------------------------------

    def _accept_loop(self):
        while not self.stopping.is_set():
            try:
                sock, dummy = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(sock,), name='hostile-conn-%s' % self.name)
            thread.daemon = True
            with self._lock:
                self._conns.add(sock)
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _read_request(self, sock):
        sock.settimeout(0.2)
        data = b''
        while b'\r\n\r\n' not in data:
            if self.stopping.is_set() or len(data) > 1024 * 1024:
                return None
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                return None
            data += chunk
        head, body = data.split(b'\r\n\r\n', 1)
        lines = head.decode('latin-1').split('\r\n')
        parts = lines[0].split(' ')
        if len(parts) < 2:
            return None
        method, target = parts[0], parts[1]
        headers = {}
        for line in lines[1:]:
            key, sep, value = line.partition(':')
            if sep:
                headers[key.strip().lower()] = value.strip()
        length = int(headers.get('content-length', '0') or 0) if headers.get('content-length', '0').isdigit() else 0
        while len(body) < length:
            if self.stopping.is_set():
                return None
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            body += chunk
        path = target
        if '://' in target:
            path = '/' + target.split('://', 1)[1].partition('/')[2]
        path = path.split('?', 1)[0]
        return Request(method, target, path, headers, body, time.time(), head.decode('latin-1'))

    def _serve(self, sock):
        conn = Conn(sock, self)
        try:
            request = self._read_request(sock)
            if request is None:
                return
            with self._lock:
                self.requests.append(request)
            behaviour = self.routes.get((request.method, request.path)) or self.routes.get(request.path) \
                or self.default
            sock.settimeout(None)
            behaviour(conn, request)
        except (OSError, ValueError):
            pass
        except Exception as exc:  # noqa: BLE001 - a broken behaviour is a test bug: keep it for the test to see
            self.errors.append(repr(exc))
        finally:
            if not conn.closed:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                conn.close()
            with self._lock:
                self._conns.discard(sock)


# --------------------------------------------------------------------------- behaviours

def respond(status=200, body='', ctype='text/plain; version=0.0.4; charset=utf-8', headers=(), delay=0.0):
    """A proper answer, after ``delay`` seconds."""
    def behaviour(conn, request):
        if delay and not conn.wait(delay):
            return
        conn.respond(status, body, ctype, headers)
    return behaviour


def respond_gzip(body, ctype='text/plain; version=0.0.4; charset=utf-8', status=200):
    """The body gzip-compressed on the wire (Content-Encoding: gzip)."""
    data = gzip_bytes(body)

    def behaviour(conn, request):
        conn.respond(status, data, ctype, headers=[('Content-Encoding', 'gzip')])
    return behaviour


def sequence(bodies, ctype='text/plain; version=0.0.4; charset=utf-8', delay=0.0):
    """The n-th request gets ``bodies[n]`` (the last one repeats); a body may be a behaviour."""
    state = {'n': 0}
    lock = threading.Lock()

    def behaviour(conn, request):
        with lock:
            index = min(state['n'], len(bodies) - 1)
            state['n'] += 1
        body = bodies[index]
        if callable(body):
            return body(conn, request)
        if delay and not conn.wait(delay):
            return None
        conn.respond(200, body, ctype)
        return None
    behaviour.count = lambda: state['n']
    return behaviour


def dynamic(make_body, ctype='text/plain; version=0.0.4; charset=utf-8'):
    """``make_body(n)`` gives the body of the n-th request."""
    state = {'n': 0}
    lock = threading.Lock()

    def behaviour(conn, request):
        with lock:
            n = state['n']
            state['n'] += 1
        conn.respond(200, make_body(n), ctype)
    return behaviour


def reset(conn, request):
    """RST right after the request was read."""
    conn.reset()


def close(conn, request):
    """Close (FIN) without a word."""
    conn.close()


def hold(conn, request):
    """Never answer; let go when the client goes away or the server stops."""
    while conn.wait(0.1):
        if conn.client_gone():
            return


def trickle(body, every=0.2, status=200, ctype='text/plain; version=0.0.4; charset=utf-8'):
    """Announce the whole length, then send one byte every ``every`` seconds."""
    data = body.encode() if isinstance(body, str) else body

    def behaviour(conn, request):
        conn.head(status, [('Content-Type', ctype)], len(data))
        for i in range(len(data)):
            if not conn.wait(every):
                return
            conn.send(data[i:i + 1])
    return behaviour


def trickle_headers(every=0.2):
    """A status line, then one header byte at a time, forever."""
    def behaviour(conn, request):
        conn.send(b'HTTP/1.1 200 OK\r\n')
        while conn.wait(every):
            conn.send(b'X')
    return behaviour


def partial(body, keep, status=200, ctype='application/json'):
    """Announce the whole length, send the first ``keep`` bytes, close."""
    data = body.encode() if isinstance(body, str) else body

    def behaviour(conn, request):
        conn.head(status, [('Content-Type', ctype)], len(data))
        conn.send(data[:keep])
        conn.close()
    return behaviour


def headers_then_reset(status=200):
    def behaviour(conn, request):
        conn.head(status, [('Content-Type', 'application/json')], 1000)
        conn.reset()
    return behaviour


def garbage(data):
    """Raw bytes that are not HTTP, then close."""
    def behaviour(conn, request):
        conn.send(data)
        conn.close()
    return behaviour


def redirect(location, status=302):
    def behaviour(conn, request):
        conn.respond(status, '', None, headers=[('Location', location)])
    return behaviour


def redirect_echoing_auth(base):
    """A redirect to another server whose Location carries the request's Authorization header."""
    from urllib.parse import quote

    def behaviour(conn, request):
        auth = request.headers.get('authorization', '')
        conn.respond(302, '', None, headers=[('Location', '%s/steal?auth=%s' % (base, quote(auth, safe='')))])
    return behaviour


def error_echoing_auth(status=401):
    """An error answer whose body and headers repeat the Authorization header."""
    def behaviour(conn, request):
        auth = request.headers.get('authorization', '')
        conn.respond(status, json.dumps({'error': 'bad key: %s' % auth}), 'application/json',
                     headers=[('WWW-Authenticate', 'Bearer error="%s"' % auth.replace('"', ''))])
    return behaviour


def slow(behaviour, seconds):
    """Run ``behaviour`` after ``seconds``."""
    def wrapped(conn, request):
        if conn.wait(seconds):
            behaviour(conn, request)
    return wrapped


def proxy_502(conn, request):
    """A forward proxy that answers 502 to everything (CONNECT included)."""
    conn.respond(502, '<html><body>502 Bad Gateway (hostile proxy)</body></html>', 'text/html')


def proxy_impersonating(conn, request):
    """A forward proxy that answers every target as a healthy, idle vLLM would (so a client that uses it
    goes on to send its probe, with its bearer key, through it); anything else gets 502."""
    routes = vllm_routes()
    behaviour = routes.get(request.path)
    if behaviour is None or request.method == 'CONNECT':
        return proxy_502(conn, request)
    return behaviour(conn, request)


# --------------------------------------------------------------------------- a vLLM-like server

IDLE = capture('idle_after_load.prom')
BUSY_1 = capture('busy_1.prom')
BUSY_2 = capture('busy_2.prom')
STUCK = capture('stuck_1.prom')
MODELS_JSON = json.dumps({'object': 'list', 'data': [{'id': 'tiny', 'object': 'model', 'max_model_len': 32768}]})


def vllm_routes(metrics=None, probe=None, version=None, health=None, models=None, extra=None):
    """The routes of a vLLM 0.32-like server; any of them replaced by a behaviour (or, for
    ``metrics``, a text body, or a list of bodies served in turn)."""
    if metrics is None:
        metrics = IDLE
    if isinstance(metrics, str):
        metrics = respond(200, metrics)
    elif isinstance(metrics, (list, tuple)):
        metrics = sequence(list(metrics))
    routes = {
        '/version': version or respond(200, '{"version":"0.32.0"}', 'application/json'),
        '/health': health or respond(200, ''),
        '/metrics': metrics,
        '/v1/models': models or respond(200, MODELS_JSON, 'application/json'),
        '/v1/completions': probe or respond(200, completion_json(), 'application/json'),
        '/v1/chat/completions': probe or respond(200, completion_json(), 'application/json'),
    }
    routes.update(extra or {})
    return routes


def vllm_server(name='vllm', **kwargs):
    return HostileServer(vllm_routes(**kwargs), name=name)


class Servers(object):
    """Start many servers and stop them all, also when a test fails."""

    def __init__(self):
        self.servers = []

    def add(self, server):
        self.servers.append(server.start())
        return server

    def vllm(self, name='vllm', **kwargs):
        return self.add(vllm_server(name=name, **kwargs))

    def stop(self):
        errors = []
        for server in reversed(self.servers):
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others, then report
                errors.append(str(exc))
            if server.errors:
                errors.append('hostile server %s: a behaviour raised %s' % (server.name, server.errors[:3]))
        self.servers = []
        if errors:
            raise RuntimeError('; '.join(errors))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def free_port():
    """A loopback port where nothing listens (bound, then released)."""
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


# --------------------------------------------------------------------------- invariants on outputs

TRACEBACK_MARKERS = ('Traceback (most recent call last)', 'MODULE FAILURE', 'Module result deserialization failed')
# ansible-core 2.19 hides a module's traceback (DISPLAY_TRACEBACK defaults to never): an unhandled exception in
# a module shows as a result whose msg is "Task failed: Module failed: <the exception>", where a fail_json
# gives its own message. (The "[ERROR]: Task failed: Module failed: ..." display line comes with both.)
CRASH_MSG = 'Task failed: Module failed:'
_CRASH_LINE = re.compile(r'"msg": "Task failed: Module failed:')


def traceback_in(*texts):
    """The first traceback marker found in the texts (outputs of ansible-playbook or of a module), or None."""
    for text in texts:
        if not text:
            continue
        for marker in TRACEBACK_MARKERS:
            if marker in text:
                return marker
        if _CRASH_LINE.search(text):
            return 'a result with msg "%s ..." (an unhandled exception in the module)' % CRASH_MSG
    return None


# ansible-core 2.19 puts this placeholder in every failed task's result: it is not a traceback.
NO_TRACEBACK = '(traceback unavailable)'


def has_exception_key(value):
    """Whether a result (or any nested result) shows an unhandled exception: a real ``exception`` (a
    traceback; not the placeholder ansible-core 2.19 adds to every failure), a ``module_stderr``, or the
    msg ansible-core 2.19 gives a module that raised."""
    if isinstance(value, dict):
        if value.get('exception') not in (None, NO_TRACEBACK) or value.get('module_stderr'):
            return True
        msg = value.get('msg')
        if isinstance(msg, str) and (msg.startswith(CRASH_MSG) or 'MODULE FAILURE' in msg
                                     or 'Module result deserialization failed' in msg):
            return True
        return any(has_exception_key(v) for v in value.values())
    if isinstance(value, list):
        return any(has_exception_key(v) for v in value)
    return False


def secret_forms(secret):
    """The forms in which a secret can leak: itself, its repr, its JSON, URL-encoded, stripped, and each run of
    12 or more plain characters in it (a key's core survives any escaping of the characters around it)."""
    from urllib.parse import quote
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], secret.strip(), quote(secret, safe='')}
    forms.update(re.findall(r'[A-Za-z0-9_.~-]{12,}', secret))
    return sorted(f for f in forms if len(f) >= 6)


def leaks(secret, *texts):
    """Which forms of ``secret`` appear in any of the texts."""
    found = []
    for form in secret_forms(secret):
        for text in texts:
            if text and form in text:
                found.append(form)
                break
    return found


def dir_text(path):
    """Every file under ``path`` (names and contents), as one text."""
    out = []
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            out.append(os.path.join(root, name))
        for name in files:
            full = os.path.join(root, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            with open(full, 'rb') as handle:
                out.append(handle.read(4 * 1024 * 1024).decode('utf-8', 'replace'))
    return '\n'.join(out)


# --------------------------------------------------------------------------- counting inputs

CLASSES = {
    1: 'a request that could not be sent',
    2: 'an instant reset or close of the probe',
    3: 'no usable progress series / unusable metrics',
    4: 'NaN or Inf gauges',
    5: 'environment proxies',
    6: 'memory inside metrics_max_bytes',
    7: 'no overall deadline',
    8: 'the gate trusts its state directory',
    9: 'credentials in the URL',
    10: 'bad arguments',
    11: 'a failed restart is red for one run only',
    12: 'the start-up grace ignores vLLM\'s own start time',
    13: 'the rollout\'s restart commands',
    14: 'the same series twice, however its labels are written',
    15: 'a restart that changed nothing',
    16: 'a key in the service\'s log',
    17: 'a cut line in the verdict history',
    18: 'a textfile that cannot be written',
    19: 'the EDA event source',
    20: 'a restart command that hangs',
    21: 'a pause answer that is no proof of a pause',
    22: 'a restart that stops and then fails',
    23: 'a memory baseline that does not fit the host',
    24: 'evidence that swells the gate',
    25: 'a kernel line whose time cannot be true',
    26: 'evidence aimed at the wrong process',
    28: 'names and messages reach the terminal raw',
    29: 'an alert\'s host is still a pattern past the event source',
}


class Registry(object):
    """The hostile inputs tried, by class, and whether each held (every invariant asserted on it)."""

    def __init__(self):
        self.tried = {}  # (class, name) -> None (pending) / True / False
        self.generated = {}

    def hold(self, cls, name, held):
        key = (cls, name)
        previous = self.tried.get(key)
        self.tried[key] = bool(held) and previous is not False

    def examples(self, what, n=1):
        self.generated[what] = self.generated.get(what, 0) + n

    def lines(self):
        if not self.tried and not self.generated:
            return []
        out = []
        if self.tried:
            total = len(self.tried)
            held = sum(1 for v in self.tried.values() if v)
            out.append('hostile inputs: %d tried, %d hold, %d do not' % (total, held, total - held))
            for cls in sorted(set(c for c, dummy in self.tried)):
                items = [(n, v) for (c, n), v in self.tried.items() if c == cls]
                ok = sum(1 for dummy, v in items if v)
                out.append('  class %2d (%s): %d tried, %d hold' % (cls, CLASSES.get(cls, '?'), len(items), ok))
                for name, value in sorted(items):
                    if not value:
                        out.append('      does not hold: %s' % name)
        for what, n in sorted(self.generated.items()):
            out.append('generated examples: %s: %d' % (what, n))
        return out

    def export(self):
        """What a pytest-xdist worker sends the controller (tests/integration/conftest.py)."""
        return {'tried': [[cls, name, held] for (cls, name), held in self.tried.items()],
                'generated': dict(self.generated)}

    def merge(self, data):
        """Add a worker's :meth:`export`."""
        for cls, name, held in data['tried']:
            if held is None:
                self.tried.setdefault((cls, name), None)
            else:
                self.hold(cls, name, held)
        for what, n in data['generated'].items():
            self.examples(what, n)


REGISTRY = Registry()


class _SummaryPlugin(object):
    def pytest_terminal_summary(self, terminalreporter):
        lines = REGISTRY.lines()
        if lines:
            terminalreporter.section('hostile-input tier (issue 8)')
            for line in lines:
                terminalreporter.write_line(line)


def install_summary(config):
    """Print REGISTRY's count at the end of the session (once per session)."""
    if not config.pluginmanager.has_plugin('modelops-hostile-summary'):
        config.pluginmanager.register(_SummaryPlugin(), 'modelops-hostile-summary')


class Violations(object):
    """Collects invariant violations per hostile input, records each input in the registry,
    and fails the test at the end with every violation listed."""

    def __init__(self, registry=REGISTRY):
        self.registry = registry
        self.items = []

    def check(self, cls, name, problems):
        problems = [' | '.join(line for line in str(p).splitlines() if line.strip())[:700] for p in problems if p]
        self.registry.hold(cls, name, not problems)
        for problem in problems:
            self.items.append('[class %d] %s: %s' % (cls, name, problem))
        return not problems

    def assert_none(self, context=''):
        if self.items:
            raise AssertionError('%d invariant violation(s)%s:\n  %s' % (
                len(self.items), (' ' + context) if context else '', '\n  '.join(self.items)))


# --------------------------------------------------------------------------- a module as a process

class ModuleRun(object):
    """A module run as a process: its result, output, time (wall and CPU) and peak RSS."""

    def __init__(self, result, stdout, stderr, seconds, max_rss_bytes, timed_out, returncode, cpu_seconds=None):
        self.result = result
        self.cpu_seconds = cpu_seconds
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        self.max_rss_bytes = max_rss_bytes
        self.timed_out = timed_out
        self.returncode = returncode

    def __repr__(self):
        return '<ModuleRun rc=%s %.1fs (CPU %.1fs) rss=%.0fMB timed_out=%s stdout=%r stderr=%r>' % (
            self.returncode, self.seconds, self.cpu_seconds or 0.0, self.max_rss_bytes / 1e6, self.timed_out, self.stdout[:1500],
            self.stderr[-1500:])


# A small launcher process starts the module and reads its rusage: a child forked straight from a big
# test process would count the test process's pages in its peak RSS (ru_maxrss survives exec).
_LAUNCHER = r"""
import json, os, resource, subprocess, sys, time
spec = json.loads(sys.argv[1])
if spec['address_space']:
    resource.setrlimit(resource.RLIMIT_AS, (spec['address_space'], spec['address_space']))
with open(spec['out'], 'wb') as out, open(spec['err'], 'wb') as err:
    started = time.monotonic()
    proc = subprocess.Popen(spec['argv'], stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=spec['cwd'])
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > spec['timeout']:
            timed_out = True
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
print(json.dumps({'max_rss': usage.ru_maxrss * 1024, 'seconds': time.monotonic() - started,
                  'cpu_seconds': usage.ru_utime + usage.ru_stime,
                  'timed_out': timed_out, 'rc': os.waitstatus_to_exitcode(status)}))
"""


def run_module(module, args, workdir, timeout=60, env=None, address_space=6 * 1024 ** 3, check_mode=False):
    """Run ``plugins/modules/<module>.py`` directly with an args file, as Ansible would on the host.

    The collection must be importable from ``PYTHONPATH`` (``env``). Returns a :class:`ModuleRun`;
    the peak RSS comes from ``os.wait4`` (in a small launcher process). The process is killed at
    ``timeout`` (``timed_out``). ``address_space`` caps its virtual memory so that a runaway module
    cannot take the machine down.
    """
    import subprocess
    import sys
    import tempfile

    params = dict(args)
    if check_mode:
        params['_ansible_check_mode'] = True
    fd, path = tempfile.mkstemp(prefix='args-', suffix='.json', dir=workdir)
    with os.fdopen(fd, 'w') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': params}, handle)
    spec = {'argv': [sys.executable, os.path.join(REPO, 'plugins', 'modules', '%s.py' % module), path],
            'out': path + '.stdout', 'err': path + '.stderr', 'cwd': workdir, 'timeout': timeout,
            'address_space': address_space}
    launched = subprocess.run([sys.executable, '-c', _LAUNCHER, json.dumps(spec)], capture_output=True, text=True,
                              env=env, timeout=timeout + 60, check=False)
    try:
        info = json.loads(launched.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError('the launcher failed: %r %r' % (launched.stdout, launched.stderr))
    with open(spec['out'], 'rb') as handle:
        stdout = handle.read().decode('utf-8', 'replace')
    with open(spec['err'], 'rb') as handle:
        stderr = handle.read().decode('utf-8', 'replace')
    for name in (path, spec['out'], spec['err']):
        os.unlink(name)
    result = None
    try:
        result = json.loads(stdout)
    except ValueError:
        pass
    return ModuleRun(result, stdout, stderr, info['seconds'], info['max_rss'], info['timed_out'], info['rc'],
                     info['cpu_seconds'])


class Switch(object):
    """A behaviour whose answer can be changed while the server runs (``switch.to(behaviour)``)."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self._lock = threading.Lock()

    def to(self, behaviour):
        with self._lock:
            self.behaviour = behaviour

    def __call__(self, conn, request):
        with self._lock:
            behaviour = self.behaviour
        return behaviour(conn, request)
