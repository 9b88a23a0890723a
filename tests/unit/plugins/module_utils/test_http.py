"""The HTTP client against real sockets on loopback: bad answers of every kind."""

import json
import socket
import ssl
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme

from ansible_collections.modelops.vllm.plugins.module_utils._http import Client
from ansible_collections.modelops.vllm.plugins.module_utils._urls import display_url, url_secrets, validate_url
from ansible_collections.modelops.vllm.plugins.module_utils._types import CheckError
from ansible_collections.modelops.vllm.plugins.module_utils._verdict import Judge

from fakes import capture

METRICS = capture('idle_after_load.prom')


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    routes = {}
    seen = []

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype='text/plain; version=1.0.0; charset=utf-8', headers=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.seen.append(('GET', self.path, self.headers.get('Authorization'), self.headers.get('Accept')))
        route = self.routes.get(self.path)
        if route is None:
            return self._send(404, '{"detail":"Not Found"}', 'application/json')
        return route(self)

    def do_POST(self):
        length = int(self.headers.get('Content-Length', 0))
        body = json.loads(self.rfile.read(length) or b'{}')
        self.seen.append(('POST', self.path, self.headers.get('Authorization'), body))
        route = self.routes.get(self.path)
        if route is None:
            return self._send(404, '{}', 'application/json')
        return route(self)


def _metrics_head(handler):
    """The status line and headers of a whole capture, none of its body yet."""
    handler.send_response(200)
    handler.send_header('Content-Type', 'text/plain')
    handler.send_header('Content-Length', str(len(METRICS)))
    handler.end_headers()


def trickle(handler):
    _metrics_head(handler)
    try:
        for char in METRICS[:200]:
            handler.wfile.write(char.encode())
            handler.wfile.flush()
            time.sleep(0.05)
    except OSError:
        pass


def silent(handler):
    time.sleep(3)


def stall(handler):
    """The status line, the headers and a little of the body, then nothing."""
    _metrics_head(handler)
    try:
        handler.wfile.write(METRICS[:100].encode())
        handler.wfile.flush()
        time.sleep(3)
    except OSError:
        pass


def huge(handler):
    handler.send_response(200)
    handler.send_header('Content-Type', 'text/plain')
    handler.send_header('Transfer-Encoding', 'chunked')
    handler.end_headers()
    line = b'vllm:num_requests_running{engine="0"} 1\n' * 1000
    try:
        for dummy in range(200):
            handler.wfile.write(b'%x\r\n%s\r\n' % (len(line), line))
        handler.wfile.write(b'0\r\n\r\n')
    except OSError:
        pass


def completion(handler):
    handler._send(200, json.dumps({'choices': [{'text': 'x', 'finish_reason': 'length'}],
                                   'usage': {'completion_tokens': 1}}), 'application/json')


ROUTES = {
    '/metrics': lambda h: h._send(200, METRICS),
    '/health': lambda h: h._send(200, ''),
    '/version': lambda h: h._send(200, '{"version":"0.32.0"}', 'application/json'),
    '/v1/models': lambda h: h._send(200, json.dumps({'data': [{'id': 'tiny'}]}), 'application/json'),
    '/v1/completions': completion,
    '/slow/metrics': silent,
    '/trickle/metrics': trickle,
    '/stall/metrics': stall,
    '/huge/metrics': huge,
    '/html/metrics': lambda h: h._send(200, '<!DOCTYPE html><html><body>Login</body></html>', 'text/html'),
    '/big-declared/metrics': lambda h: h._send(200, 'x' * 5000),
    '/same/metrics': lambda h: h._send(307, '', headers={'Location': '/metrics'}),
    '/loop/metrics': lambda h: h._send(302, '', headers={'Location': '/loop/metrics'}),
}


@pytest.fixture(scope='module')
def server():
    Handler.routes = dict(ROUTES)
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d' % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_metrics_ok_and_accept_text_plain(server):
    Handler.seen[:] = []
    fetched = Client(server).metrics()
    assert fetched.status == 200 and fetched.error is None
    assert fetched.text == METRICS
    assert Handler.seen[-1][3] == 'text/plain'
    assert Handler.seen[-1][2] is None


def test_api_key_goes_only_to_v1(server):
    Handler.seen[:] = []
    client = Client(server, api_key='s3cret')
    client.metrics()
    client.health()
    client.models()
    client.probe('tiny')
    auth = dict(((method, path), key) for method, path, key, dummy in Handler.seen)
    assert auth[('GET', '/metrics')] is None and auth[('GET', '/health')] is None
    assert auth[('GET', '/v1/models')] == 'Bearer s3cret'
    assert auth[('POST', '/v1/completions')] == 'Bearer s3cret'
    body = Handler.seen[-1][3]
    assert body == {'prompt': 'ping', 'max_tokens': 1, 'temperature': 0, 'stream': False, 'model': 'tiny'}


def test_silent_server_times_out(server):
    fetched = Client(server + '/slow', metrics_timeout=0.5).metrics()
    assert fetched.error == 'timeout'
    assert fetched.seconds < 2.5


def test_trickling_server_is_cut_off_at_the_deadline(server):
    fetched = Client(server + '/trickle', metrics_timeout=1.0).metrics()
    # The status line and headers came back: an answer that did not complete, not a silent server.
    assert fetched.error == 'incomplete' and fetched.status == 200
    assert fetched.seconds < 3


@pytest.mark.parametrize('route, error, status, words', [
    ('/slow', 'timeout', None, 'no answer in 0.5 s'),  # nothing came back: the status line's phase
    ('/stall', 'incomplete', 200, 'the answer started but did not complete in 0.5 s'),  # the body's phase
])
def test_an_answer_cut_off_in_time_is_said_the_same_whichever_timer_ends_it(server, route, error, status, words):
    # Two timers end a request that takes too long: the worker's join (Client.request) and the socket's own timeout
    # (inside the worker, Client._do). On a loaded host either may win; the kind, the status and the words must not
    # depend on which did. The socket's path is taken here directly, so that the race cannot choose for the test.
    client = Client(server + route, metrics_timeout=0.5)
    by_join = client.metrics()
    by_socket = client._do('GET', 'metrics', 0.5, None, False, None, True, 10 ** 6, {})  # pylint: disable=protected-access
    for fetched in (by_join, by_socket):
        assert (fetched.error, fetched.status, fetched.message) == (error, status, words), fetched.describe()


def test_a_probe_answer_that_starts_but_never_completes_is_no_unanswered_probe(server):
    Handler.routes['/trickle/v1/completions'] = trickle
    fetched = Client(server + '/trickle', probe_timeout=1.0).probe('tiny')
    assert fetched.error == 'incomplete'
    assert Judge(FakeProbeServer(fetched), interval=0.1, sleep=time.sleep, clock=time.time,
                 probe_timeout=1.0).run()['state'] == 'unknown'


class FakeProbeServer(object):
    """An idle server whose probe gives ``fetched``."""

    def __init__(self, fetched):
        self.fetched = fetched
        self.client = None

    def metrics(self):
        from fakes import ok
        return ok(METRICS)

    def health(self):
        from fakes import HEALTH_OK
        return HEALTH_OK

    def version(self):
        from fakes import VERSION
        return VERSION

    def models(self):
        from fakes import MODELS
        return MODELS

    def is_paused(self):
        from fakes import NOT_FOUND
        return NOT_FOUND

    def probe(self, model):
        return self.fetched


def test_body_over_the_cap(server):
    fetched = Client(server + '/huge', max_bytes=1024 * 1024).metrics()
    assert fetched.error == 'too_large'
    declared = Client(server + '/big-declared', max_bytes=1024).metrics()
    assert declared.error == 'too_large' and '5000' in declared.message


def test_html_page_is_invalid(server):
    fetched = Client(server + '/html').metrics()
    assert fetched.error == 'invalid' and 'HTML' in fetched.message


def test_same_server_redirect_is_followed(server):
    fetched = Client(server + '/same').metrics()
    assert fetched.status == 200 and fetched.text == METRICS


def test_redirect_loop_stops(server):
    assert Client(server + '/loop').metrics().error == 'redirect'


def test_redirect_to_another_server_is_refused(server):
    Handler.routes['/away/metrics'] = lambda h: h._send(302, '', headers={'Location': 'http://127.0.0.2:1/metrics'})
    fetched = Client(server + '/away').metrics()
    assert fetched.error == 'redirect' and 'another server' in fetched.message


def test_nothing_listening_is_refused():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    fetched = Client('http://127.0.0.1:%d' % port).metrics()
    assert fetched.error == 'refused'


def test_name_that_does_not_resolve_is_refused_with_a_reason():
    fetched = Client('http://no-such-host.invalid:8000', metrics_timeout=5).metrics()
    assert fetched.error == 'refused'
    assert 'resolve' in fetched.message


@pytest.mark.parametrize('url', ['127.0.0.1:8000', 'ftp://host/', 'http://', 'http://h:8000/?x=1', '', None])
def test_bad_urls_are_configuration_errors(url):
    with pytest.raises(CheckError):
        validate_url(url)


@pytest.mark.parametrize('url', ['http://[::1', 'http://[::1]:99999', 'http://host:port', 'http://h ost:8000',
                                 'http://host:8000\n'])
def test_urls_that_do_not_parse_are_configuration_errors(url):
    with pytest.raises(CheckError):
        validate_url(url)


def test_a_url_password_is_never_in_a_message():
    with pytest.raises(CheckError) as info:
        validate_url('ftp://user:pa55word@host/')
    assert 'pa55word' not in str(info.value) and '********' in str(info.value)
    assert display_url('http://u:p%40ss@h:8000/') == 'http://u:********@h:8000/'
    assert url_secrets('http://u:p%40ss@h:8000') == ['p%40ss', 'p@ss']


@pytest.mark.parametrize('key, why', [
    ('s3cret\n', 'whitespace'), (' s3cret', 'whitespace'), ('s3c\x00ret', 'control character'),
    ('s3c\rret', 'control character'), ('s3cr\u20acet', 'outside Latin-1'),
])
def test_an_api_key_that_cannot_be_sent_is_a_configuration_error_that_never_shows_it(server, key, why):
    Handler.seen[:] = []
    with pytest.raises(CheckError) as info:
        Client(server, api_key=key)
    assert why in str(info.value)
    assert 's3c' not in str(info.value)
    assert Handler.seen == []  # nothing was sent


def test_a_request_that_cannot_be_prepared_is_a_configuration_error_not_a_lost_answer(server):
    client = Client(server)
    client.api_key = 'bad\nkey'  # past the constructor's check: the request itself must refuse it
    with pytest.raises(CheckError, match='could not be sent'):
        client.probe('tiny')


def reset(handler):
    # An abortive close (RST), as a firewall or a proxy that refuses POSTs does.
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    handler.close_connection = True
    handler.connection.close()


def test_a_reset_probe_is_dropped_at_once_not_a_timeout(server):
    Handler.routes['/reset/v1/completions'] = reset
    fetched = Client(server + '/reset', probe_timeout=5).probe('tiny')
    assert fetched.error == 'dropped'
    assert fetched.seconds < 2.5


def test_no_request_outlives_the_overall_deadline(server):
    client = Client(server + '/slow', metrics_timeout=10, ends=time.monotonic() + 0.5)
    fetched = client.metrics()
    assert fetched.error == 'timeout' and fetched.seconds < 2.5
    after = client.metrics()
    assert after.error == 'deadline'


@pytest.fixture
def proxy_502():
    """An HTTP proxy in the environment that answers 502 to everything, and records what reached it."""
    seen = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append((self.path, self.headers.get('Authorization')))
            self.send_response(502)
            self.send_header('Content-Length', '0')
            self.end_headers()

        do_POST = do_GET

    httpd = ThreadingHTTPServer(('127.0.0.1', 0), Proxy)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d' % httpd.server_address[1], seen
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize('variable', ['HTTP_PROXY', 'http_proxy', 'ALL_PROXY'])
def test_environment_proxies_are_ignored_by_default(server, proxy_502, monkeypatch, variable):
    proxy, seen = proxy_502
    monkeypatch.setenv(variable, proxy)
    fetched = Client(server, api_key='s3cret').models()
    assert fetched.status == 200
    assert seen == []


def test_a_loopback_url_never_goes_through_a_proxy_even_with_use_proxy(server, proxy_502, monkeypatch):
    proxy, seen = proxy_502
    monkeypatch.setenv('HTTP_PROXY', proxy)
    assert Client(server, use_proxy=True).metrics().status == 200
    assert seen == []


def test_use_proxy_sends_other_urls_through_the_environment_proxy(proxy_502, monkeypatch):
    proxy, seen = proxy_502
    monkeypatch.setenv('HTTP_PROXY', proxy)
    monkeypatch.delenv('NO_PROXY', raising=False)
    monkeypatch.delenv('no_proxy', raising=False)
    fetched = Client('http://vllm.example:8000', use_proxy=True).metrics()
    assert fetched.status == 502
    assert seen == [('http://vllm.example:8000/metrics', None)]
    # Without it, the same URL is looked up directly (and does not resolve here).
    assert Client('http://vllm.example:8000', metrics_timeout=5).metrics().error == 'refused'


def test_a_whole_check_against_the_socket_server(server):
    result = Judge(Client(server), interval=0.1, sleep=time.sleep, clock=time.time).run()
    assert result['state'] == 'idle'
    assert result['probe']['ok'] is True


# -- TLS ------------------------------------------------------------------------

@pytest.fixture(scope='module')
def tls_server(tmp_path_factory):
    ca = trustme.CA()
    cert = ca.issue_cert('127.0.0.1', 'localhost')
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(context)
    Handler.routes = dict(ROUTES)
    httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    ca_path = tmp_path_factory.mktemp('ca') / 'ca.pem'
    ca.cert_pem.write_to_path(str(ca_path))
    yield 'https://127.0.0.1:%d' % httpd.server_address[1], str(ca_path)
    httpd.shutdown()
    httpd.server_close()


def test_self_signed_fails_by_default(tls_server):
    url, dummy = tls_server
    fetched = Client(url).metrics()
    assert fetched.error == 'tls'
    with pytest.raises(CheckError, match='TLS'):
        Judge(Client(url), interval=0, sleep=time.sleep, clock=time.time).run()


def test_ca_path_verifies(tls_server):
    url, ca_path = tls_server
    fetched = Client(url, ca_path=ca_path).metrics()
    assert fetched.status == 200 and fetched.text == METRICS


@pytest.mark.filterwarnings('ignore::urllib3.exceptions.InsecureRequestWarning')
def test_validate_certs_false_skips_verification(tls_server):
    url, dummy = tls_server
    assert Client(url, validate_certs=False).metrics().status == 200
