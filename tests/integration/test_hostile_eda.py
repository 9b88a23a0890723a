"""The hostile-input tier (issue 16), class 19: the EDA event source ``modelops.vllm.alertmanager``
(``extensions/eda/plugins/event_source/alertmanager.py``) cannot be knocked over or steered.

The source runs in a process of its own, loaded as ansible-rulebook loads it (``runpy``) and fed
to a queue of one event, as ansible-rulebook's, that a slow consumer empties (the rule engine);
its log goes to stderr at DEBUG (``ansible-rulebook -vv``). Against it, over real loopback HTTP:
keys that are not UTF-8, JSON nested deep, a 3 MB notification of a million empty alerts (with
and without a Content-Length), too many alerts, a body that never arrives, host names that are
``all``, a group, a pattern or a file, requests that are not HTTP, and a flood of good
notifications. What must hold:

* every bad request gets a 4xx and one log line; a good one in a flood gets 202, or 503 with
  ``Retry-After`` while the source holds its bound of events (Alertmanager retries it);
* nothing refused is ever put on the queue, and no event names a host that is not one
  inventory host;
* never a traceback in the log;
* the peak memory of the process (``VmHWM``) stays under 150 MB (the million empty alerts took
  the source to 848 MB before the bounds).

``measure(source, body)`` is also how the memory of the old and the new source was measured for the
changelog (run the module: ``python -m tests.integration.test_hostile_eda OLD_SOURCE``).
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support import hostile as h
from tests.support import prometheus as prom
from tests.support.eda import SOURCE_PLUGIN
from tests.support.ports import block

PORTS = block("eda-services")
TOKEN = "hostile-eda-token-%s" % os.urandom(4).hex()
MAX_RSS = 150 * 1000 * 1000

# The source as ansible-rulebook runs it: its main() with a queue of one event, emptied by a consumer that takes
# one event per millisecond; every event taken is written to the events file. SIGTERM stops it.
_RUNNER = r"""
import asyncio, json, logging, runpy, signal, sys
source, args, events_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")
main = runpy.run_path(source)["main"]

async def consume(queue, out):
    while True:
        event = await queue.get()
        out.write(json.dumps(event.get("meta", {}).get("hosts")) + "\n")
        out.flush()
        await asyncio.sleep(0.001)

async def run():
    queue = asyncio.Queue(1)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    with open(events_path, "w") as out:
        tasks = [asyncio.create_task(main(queue, args)), asyncio.create_task(consume(queue, out))]
        waiter = asyncio.create_task(stop.wait())
        done, _pending = await asyncio.wait(tasks + [waiter], return_when=asyncio.FIRST_COMPLETED)
        for task in tasks + [waiter]:
            task.cancel()
        for task in done:
            if task is not waiter and task.exception():
                raise task.exception()

asyncio.run(run())
"""


class Source:
    """The event source in its own process, on a free port of the EDA block."""

    def __init__(self, workdir, source=str(SOURCE_PLUGIN), **args):
        self.workdir = str(workdir)
        self.port = prom.free_port(PORTS)
        self.args = dict({"host": "127.0.0.1", "port": self.port, "token": TOKEN,
                          "data_host_path": "labels.vllm_host", "skip_original_data": True}, **args)
        self.source = source
        self.events_path = os.path.join(self.workdir, "events.jsonl")
        self.log_path = os.path.join(self.workdir, "source.log")
        self.proc = None

    def start(self):
        self._log = open(self.log_path, "wb")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-c", _RUNNER, self.source, json.dumps(self.args), self.events_path],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, cwd=self.workdir)
        prom.wait_until(lambda: self.proc.poll() is not None or prom._listening(self.port),  # pylint: disable=protected-access
                        "the event source on port %d" % self.port, timeout=60)
        assert self.proc.poll() is None, self.log()
        return self

    def peak_rss(self):
        with open("/proc/%d/status" % self.proc.pid) as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def log(self):
        with open(self.log_path, errors="replace") as handle:
            return handle.read()

    def events(self):
        if not os.path.exists(self.events_path):
            return []
        with open(self.events_path) as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def send(port, data, timeout=60.0, trickle=None):
    """Raw bytes to the source; (status or None, seconds). ``trickle``: send the body part of ``data`` this slowly
    (seconds between chunks of 64 KB) after the head."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            if trickle is None:
                sock.sendall(data)
            else:
                head, body = data.split(b"\r\n\r\n", 1)
                sock.sendall(head + b"\r\n\r\n")
                for start in range(0, len(body), 65536):
                    sock.sendall(body[start:start + 65536])
                    time.sleep(trickle)
        except OSError:
            pass  # the source may answer and close before it has read everything: the answer counts
        answer = b""
        try:
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except OSError:
            pass
    first = answer.split(b"\r\n", 1)[0].split()
    status = int(first[1]) if len(first) > 1 and first[1].isdigit() else None
    return status, time.monotonic() - started, answer


def post(body, headers=None, chunked=False, path=b"/alerts", auth=True):
    """An HTTP/1.1 POST as bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    lines = [b"POST " + path + b" HTTP/1.1", b"Host: 127.0.0.1", b"Content-Type: application/json",
             b"Connection: close"]
    if auth:
        lines.append(b"Authorization: Bearer " + TOKEN.encode())
    lines += list(headers or [])
    if chunked:
        lines.append(b"Transfer-Encoding: chunked")
        payload = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 65536]), data[i:i + 65536])
                           for i in range(0, len(data), 65536)) + b"0\r\n\r\n"
    else:
        lines.append(b"Content-Length: %d" % len(data))
        payload = data
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload


def alerts(*hosts):
    return {"receiver": "vllm-watchdog", "status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "VllmEngineStuck", "vllm_host": host}} for host in hosts]}


MILLION = b'{"alerts": [' + b",".join([b"{}"] * 1000000) + b"]}"


def cases():
    """(name, request bytes, what the answer must be: '4xx', or a set of statuses)."""
    deep = b"[" * 200000 + b"]" * 200000
    nested = b'{"alerts": [' + b'{"a":' * 80 + b"1" + b"}" * 80 + b"]}"
    out = [
        ("no Authorization header", post(alerts("gb10-01"), auth=False), {401}),
        ("Authorization not UTF-8", post(alerts("gb10-01"), [b"Authorization: Bearer \xff\xfe\xfd"], auth=False), {401}),
        ("Authorization the token then a byte that is not UTF-8",
         post(alerts("gb10-01"), [b"Authorization: Bearer " + TOKEN.encode() + b"\xc3"], auth=False), {401}),
        ("Authorization Basic with the token", post(alerts("gb10-01"), [b"Authorization: Basic " + TOKEN.encode()],
                                                    auth=False), {401}),
        ("a million empty alerts, 3 MB, Content-Length", post(MILLION), {413}),
        ("a million empty alerts, 3 MB, chunked", post(MILLION, chunked=True), {413}),
        ("1001 alerts", post({"alerts": [{"status": "firing", "labels": {}}] * 1001}), {413}),
        ("JSON nested 200000 deep", post(deep), {400}),
        ("JSON objects nested 80 deep", post(nested), {400}),
        ("not JSON", post(b"{not json"), {400}),
        ("not UTF-8", post(b"\xff\xfe{}"), {400}),
        ("a JSON list", post(b"[1, 2]"), {400}),
        ("vllm_host all", post(alerts("all")), {422}),
        ("vllm_host ungrouped", post(alerts("ungrouped")), {422}),
        ("vllm_host a group of the inventory", post(alerts("vllm")), {422}),
        ("vllm_host a host the inventory does not have", post(alerts("gb10-99")), {422}),
        ("vllm_host gb10-*", post(alerts("gb10-*")), {422}),
        ("vllm_host gb10-01,gb10-02", post(alerts("gb10-01,gb10-02")), {422}),
        ("vllm_host gb10-01:gb10-02", post(alerts("gb10-01:gb10-02")), {422}),
        ("vllm_host !gb10-01", post(alerts("!gb10-01")), {422}),
        ("vllm_host &vllm", post(alerts("&vllm")), {422}),
        ("vllm_host ~gb10.*", post(alerts("~gb10.*")), {422}),
        ("vllm_host @/etc/passwd", post(alerts("@/etc/passwd")), {422}),
        ("vllm_host with a newline inside", post(alerts("gb10-01\nall")), {422}),
        ("vllm_host a list", post({"alerts": [{"status": "firing", "labels": {"vllm_host": ["all"]}}]}), {422}),
        ("not HTTP", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64, "4xx"),
        ("a header line of 20 KB", post(alerts("gb10-01"), [b"X-Big: " + b"a" * 20000]), "4xx"),
        ("a Content-Length that is not a number", b"POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
         "4xx"),
        ("GET /alerts", b"GET /alerts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "4xx"),
        ("DELETE /", b"DELETE / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "4xx"),
    ]
    return out


def test_the_event_source_answers_every_bad_request_with_4xx_and_stays_small(tmp_path):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  children:\n    vllm:\n      hosts:\n        gb10-01:\n        gb10-02:\n")
    violations = h.Violations()
    with Source(tmp_path, inventory=str(inventory)) as source:
        # A body that never arrives, alongside the others: 408 once the source stops waiting for it.
        slow = {}
        head = post(alerts("gb10-01")).split(b"\r\n\r\n")[0].replace(b"Content-Length: ", b"Content-Length: 9")
        slow_thread = threading.Thread(target=lambda: slow.update(answer=send(source.port, head + b"\r\n\r\n{",
                                                                              timeout=90)))
        slow_thread.start()
        answers = {}
        for name, data, expected in cases():
            status, seconds, raw = send(source.port, data)
            answers[name] = (status, expected, seconds, raw[:200])
        # A flood of good notifications while the rule engine is slow: 202, or 503 with Retry-After.
        flood = []
        threads = [threading.Thread(target=lambda: flood.append(send(source.port, post(alerts(*["gb10-01"] * 200)))))
                   for _i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        good = send(source.port, post(alerts("gb10-02")))
        slow_thread.join(90)
        rss = source.peak_rss()
        prom.wait_until(lambda: len(source.events()) >= sum(200 for s, _t, _r in flood if s == 202) + 1,
                        "the consumer took every accepted event", timeout=60)
        log = source.log()
        events = source.events()
    tracebacks = "Traceback" in log
    refusal_lines = len(re.findall(r"refused a \w+ to|Error handling request", log))
    for name, (status, expected, seconds, raw) in answers.items():
        problems = []
        if expected == "4xx":
            if status is not None and not 400 <= status < 500:
                problems.append("answered %s, not a 4xx: %r" % (status, raw))
        elif status not in expected:
            problems.append("answered %s, expected %s: %r" % (status, sorted(expected), raw))
        if tracebacks:
            problems.append("a traceback in the source's log")
        violations.check(19, "event source: %s" % name, problems)
    problems = [] if slow.get("answer", (None,))[0] == 408 else ["a body that never arrives: %s" % slow.get("answer")]
    violations.check(19, "event source: a body that never arrives", problems)
    problems = []
    statuses = sorted(set(s for s, _t, _r in flood))
    if not set(statuses) <= {202, 503} or 202 not in statuses:
        problems.append("a flood of good notifications answered %s" % statuses)
    if any(s == 503 and b"Retry-After: 5" not in r for s, _t, r in flood):
        problems.append("a 503 without Retry-After")
    if good[0] != 202:
        problems.append("after the flood a good notification answered %s" % good[0])
    violations.check(19, "event source: a flood of 20 notifications of 200 alerts, the rule engine slow", problems)
    problems = []
    bad = [hosts for hosts in events if hosts and (len(hosts) != 1 or hosts[0] not in ("gb10-01", "gb10-02"))]
    if bad:
        problems.append("events with hosts that are not one inventory host: %s" % bad[:5])
    if len(answers) + 1 > refusal_lines:
        problems.append("%d bad requests and only %d refusal lines in the log" % (len(answers) + 1, refusal_lines))
    if rss is None or rss > MAX_RSS:
        problems.append("peak memory %s MB, over %d MB" % (rss and round(rss / 1e6), MAX_RSS // 10 ** 6))
    print("\nevent source: peak RSS %.1f MB after %d bad requests and a flood (%s)" % (
        rss / 1e6, len(answers) + 1, ", ".join("%s x%d" % (s, sum(1 for f in flood if f[0] == s)) for s in statuses)))
    violations.check(19, "event source: nothing refused is queued, one log line each, bounded memory", problems)
    violations.assert_none()


@pytest.fixture(scope="module", autouse=True)
def hostile_summary(request):
    h.install_summary(request.config)


def measure(source, body=MILLION, chunked=False):
    """The peak RSS of a source (a path to its file) before and after one notification, and its answer."""
    import tempfile  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as workdir, Source(workdir, source=source, token=TOKEN) as running:
        before = running.peak_rss()
        answer = []
        thread = threading.Thread(target=lambda: answer.append(send(running.port, post(body, chunked=chunked),
                                                                    timeout=30)))
        thread.daemon = True  # a source that takes every alert answers only once the rule engine took them all
        thread.start()
        thread.join(30)
        return {"idle_mb": round(before / 1e6, 1), "peak_mb": round(running.peak_rss() / 1e6, 1),
                "status": answer[0][0] if answer else "no answer within 30 s"}


if __name__ == "__main__":
    for path in sys.argv[1:] or [str(SOURCE_PLUGIN)]:
        for chunked in (False, True):
            print(path, "chunked" if chunked else "Content-Length", measure(path, chunked=chunked))
