"""A kept-alive connection the server closes as the check reuses it: vLLM's API server closes an idle connection after
VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s (vllm/envs.py, uvicorn's timeout_keep_alive), and the check's reads are ``interval``
apart, 5 s by default. A reused connection then meets the server's close (on a loaded host, its reset): the read
failed, the verdict was ``unknown`` (seen on real vLLM during a long engine step, test_long_step). The client asks for
one request per connection (``Connection: close``), so it never reuses one."""

import socket
import struct
import threading

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils._http import Client

BODY = b'# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n'


class RacingServer(object):
    """Answers the first request of a connection and keeps it open (HTTP/1.1 keep-alive); a second request on the same
    connection meets the keep-alive timeout: the connection is reset. A request that asks for ``Connection: close`` is
    answered with it, and the connection closed, as uvicorn does. Records the requests of each connection."""

    def __init__(self, echo_close=True):
        self.echo_close = echo_close  # uvicorn says Connection: close back; http.server's handler does not
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(8)
        self.sock.settimeout(10)
        self.url = 'http://127.0.0.1:%d' % self.sock.getsockname()[1]
        self.connections = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, dummy = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.one, args=(conn,), daemon=True).start()

    def one(self, conn):
        requests = []
        self.connections.append(requests)
        conn.settimeout(10)
        data = b''
        try:
            while True:
                while b'\r\n\r\n' not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b'\r\n\r\n', 1)
                requests.append(head.decode('latin-1'))
                if len(requests) > 1:  # the keep-alive timer fired as this request came: reset
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
                    return
                close = 'connection: close' in head.decode('latin-1').lower()
                conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n%s\r\n'
                             % (len(BODY), b'Connection: close\r\n' if close and self.echo_close else b'') + BODY)
                if close:
                    return
        except OSError:
            return
        finally:
            conn.close()

    def stop(self):
        self.sock.close()


@pytest.mark.parametrize('echo_close', [True, False], ids=['says-close', 'closes-silently'])
def test_every_read_is_on_a_connection_of_its_own_so_the_server_s_keep_alive_close_never_meets_one(echo_close):
    """Whether or not the server says that it closes: the client never puts a connection back to be reused."""
    server = RacingServer(echo_close)
    try:
        client = Client(server.url, metrics_timeout=5)
        reads = [client.metrics() for dummy in range(3)] + [client.health()]
        assert [(r.error, r.status) for r in reads] == [(None, 200)] * 4, [(r.error, r.message) for r in reads]
        assert [len(requests) for requests in server.connections] == [1, 1, 1, 1]
        assert all('connection: close' in requests[0].lower() for requests in server.connections)
    finally:
        server.stop()


def test_the_racing_server_resets_a_reused_connection():
    """The server above is the failure: a client that reuses the connection gets the reset the check saw."""
    server = RacingServer()
    try:
        with socket.create_connection(('127.0.0.1', int(server.url.rsplit(':', 1)[1])), timeout=5) as conn:
            request = b'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n'
            conn.sendall(request)
            first = conn.recv(65536)
            assert first.startswith(b'HTTP/1.1 200'), first
            conn.sendall(request)
            try:
                second = conn.recv(65536)
            except ConnectionResetError:
                second = None
            assert not second, second  # reset (or closed): no answer on the reused connection
    finally:
        server.stop()
