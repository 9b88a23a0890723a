"""The collection's ansible-rulebook event source ``modelops.vllm.alertmanager``
(``extensions/eda/plugins/event_source/alertmanager.py``), loaded as ansible-rulebook loads it
(``runpy.run_path``) and driven over real HTTP on loopback (127.0.0.1:27800-27899) with the
webhook payloads Alertmanager sends.
"""

import asyncio
import functools
import json
import logging
import runpy
import socket

import aiohttp
import pytest

from tests.support import prometheus as prom
from tests.support.eda import SOURCE_PLUGIN

PORTS = (27800, 27899)

# What Alertmanager 0.25 posts to a webhook_configs receiver (version 4 of the payload).
PAYLOAD = {
    "receiver": "vllm-watchdog",
    "status": "firing",
    "alerts": [
        {"status": "firing",
         "labels": {"alertname": "VllmEngineStuck", "engine": "0", "instance": "10.0.0.7:8000", "job": "vllm",
                    "model_name": "tiny", "severity": "critical", "state": "stuck", "vllm_host": "gb10-07"},
         "annotations": {"summary": "vLLM engine 0 on 10.0.0.7:8000 (model tiny) is stuck: ..."},
         "startsAt": "2026-12-01T10:31:52.123456789Z", "endsAt": "0001-01-01T00:00:00Z",
         "generatorURL": "http://prometheus:9090/graph?g0.expr=...", "fingerprint": "6b1cdd3c5a0e4d3a"},
        {"status": "resolved",
         "labels": {"alertname": "VllmEngineStuck", "engine": "1", "instance": "[fd00::8]:8000", "job": "vllm",
                    "severity": "critical", "state": "stuck"},
         "annotations": {}, "startsAt": "2026-12-01T10:20:00Z", "endsAt": "2026-12-01T10:30:00Z",
         "generatorURL": "", "fingerprint": "0c6e43b4d61c2b11"},
    ],
    "groupLabels": {"alertname": "VllmEngineStuck"},
    "commonLabels": {"alertname": "VllmEngineStuck", "job": "vllm"},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "version": "4",
    "groupKey": "{}:{alertname=\"VllmEngineStuck\"}",
    "truncatedAlerts": 0,
}


@pytest.fixture(scope="module")
def plugin():
    """The plugin module's globals, as ansible-rulebook loads a source plugin."""
    return runpy.run_path(str(SOURCE_PLUGIN))


def serve(plugin, args, exchange):
    """Start the plugin's main() with ``args`` on a free loopback port, run ``exchange(url, session)``
    against it, cancel it; returns (what exchange returned, every event put on the queue)."""
    async def scenario():
        port = prom.free_port(PORTS)
        queue = asyncio.Queue()
        task = asyncio.create_task(plugin["main"](queue, dict({"host": "127.0.0.1", "port": port}, **args)))
        url = "http://127.0.0.1:%d" % port
        async with aiohttp.ClientSession() as session:
            # Until it answers or main() ends; one that never answers fails here. Its start may take more than 4 s on
            # a loaded machine: 200 tries of 20 ms refused a test beside two other test tiers.
            deadline = asyncio.get_running_loop().time() + 120
            while True:
                if task.done():
                    task.result()  # raises what main() raised
                assert asyncio.get_running_loop().time() < deadline, "the source never answered 200 on %s" % url
                try:
                    async with session.get(url + "/") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.02)
            result = await exchange(url, session)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events = []
        while not queue.empty():
            events.append(queue.get_nowait())
        # Cancelled: nothing listens any more.
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0
        return result, events

    return asyncio.run(scenario())


async def post(session, url, body, headers=None):
    data = json.dumps(body) if isinstance(body, (dict, list)) else body  # bytes, str, or an async generator
    async with session.post(url, data=data, headers=dict({"Content-Type": "application/json"}, **(headers or {}))) as resp:
        return resp.status, await resp.text()


def test_one_event_per_alert_with_the_host_of_its_instance(plugin):
    answer, events = serve(plugin, {}, lambda url, s: post(s, url + "/alerts", PAYLOAD))
    assert answer == (202, "Received")
    # The defaults of ansible.eda.alertmanager: the whole payload first, then one event per alert.
    assert [sorted(e) for e in events] == [["meta", "payload"], ["alert", "meta"], ["alert", "meta"]]
    assert events[0]["payload"] == PAYLOAD
    first, second = events[1], events[2]
    assert first["alert"] == PAYLOAD["alerts"][0]
    assert second["alert"] == PAYLOAD["alerts"][1]
    assert first["meta"]["hosts"] == ["10.0.0.7"]
    assert second["meta"]["hosts"] == ["fd00::8"]  # an IPv6 instance loses its brackets and port only
    assert first["meta"]["endpoint"] == "alerts"
    assert first["meta"]["headers"]["Content-Type"] == "application/json"


def test_the_host_from_another_label_and_only_the_alerts(plugin):
    args = {"data_host_path": "labels.vllm_host", "skip_original_data": True}
    answer, events = serve(plugin, args, lambda url, s: post(s, url + "/hooks/vllm", PAYLOAD))
    assert answer[0] == 202
    assert [e["alert"]["labels"]["engine"] for e in events] == ["0", "1"]
    assert events[0]["meta"]["hosts"] == ["gb10-07"]
    assert events[1]["meta"]["hosts"] == []  # no vllm_host label: no host, never a guess
    assert events[0]["meta"]["endpoint"] == "hooks/vllm"


def test_arguments_as_strings_as_ansible_rulebook_renders_them(plugin):
    # ansible-rulebook renders "{{ ... }}" arguments to strings: port "27801", "true".
    async def exchange(url, session):
        return await post(session, url + "/", PAYLOAD)

    async def scenario():
        port = prom.free_port(PORTS)
        queue = asyncio.Queue()
        task = asyncio.create_task(plugin["main"](queue, {"host": "127.0.0.1", "port": str(port),
                                                          "skip_original_data": "true", "token": ""}))
        async with aiohttp.ClientSession() as session:
            for _try in range(200):
                try:
                    result = await exchange("http://127.0.0.1:%d" % port, session)
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return result, queue.qsize()

    result, size = asyncio.run(scenario())
    assert result[0] == 202
    assert size == 2  # skip_original_data "true" is true; an empty token is no token


def test_the_whole_payload_as_one_alert(plugin):
    body = {"labels": {"alertname": "X", "instance": "gb10-01:8000"}, "status": "firing"}
    answer, events = serve(plugin, {"data_alerts_path": "", "skip_original_data": True},
                           lambda url, s: post(s, url + "/x", body))
    assert answer[0] == 202
    assert events == [{"alert": body, "meta": {"endpoint": "x", "headers": events[0]["meta"]["headers"],
                                               "hosts": ["gb10-01"]}}]


def test_not_json_or_not_an_object_is_refused_and_queues_nothing(plugin):
    async def exchange(url, session):
        return [await post(session, url + "/alerts", b"{not json"),
                await post(session, url + "/alerts", b"\xff\xfe"),
                await post(session, url + "/alerts", [1, 2])]

    answers, events = serve(plugin, {}, exchange)
    assert [status for status, _text in answers] == [400, 400, 400]
    assert events == []


def test_a_payload_without_alerts_queues_only_itself(plugin):
    answer, events = serve(plugin, {}, lambda url, s: post(s, url + "/alerts", {"receiver": "x"}))
    assert answer[0] == 202
    assert events == [{"payload": {"receiver": "x"}, "meta": events[0]["meta"]}]
    answer, events = serve(plugin, {"skip_original_data": True},
                           lambda url, s: post(s, url + "/alerts", {"receiver": "x"}))
    assert answer[0] == 202 and events == []


def test_token_required_and_never_passed_on(plugin):
    token = "s3cr3t-token"

    async def exchange(url, session):
        return [await post(session, url + "/alerts", PAYLOAD),
                await post(session, url + "/alerts", PAYLOAD, {"Authorization": "Bearer wrong"}),
                await post(session, url + "/alerts", PAYLOAD, {"Authorization": "Basic " + token}),
                await post(session, url + "/alerts", PAYLOAD, {"Authorization": "Bearer " + token})]

    answers, events = serve(plugin, {"token": token, "skip_original_data": True}, exchange)
    assert [status for status, _text in answers] == [401, 401, 401, 202]
    assert len(events) == 2  # the two alerts of the one accepted POST
    for event in events:
        assert "Authorization" not in event["meta"]["headers"]
        assert token not in json.dumps(event)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "eda.example.com", "127.0.0.1.example.com",
                                  "128.0.0.1"])
def test_a_webhook_open_to_the_network_needs_a_token(plugin, host):
    with pytest.raises(ValueError, match="no token is set"):
        plugin["settings_from"]({"host": host})
    assert plugin["settings_from"]({"host": host, "token": "t"})["token"] == "t"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.3.2.1", "::1", "[::1]", "LOCALHOST", None])
def test_a_webhook_on_loopback_needs_no_token(plugin, host):
    assert plugin["settings_from"]({"host": host})["token"] is None


@pytest.mark.parametrize("value, host", [
    ("gb10-01:8000", "gb10-01"), ("gb10-01", "gb10-01"), ("10.0.0.7:8000", "10.0.0.7"),
    ("[fd00::8]:8000", "fd00::8"), ("[fd00::8]", "fd00::8"), ("fd00::8", "fd00::8"), ("", None), (None, None),
])
def test_clean_host(plugin, value, host):
    assert plugin["clean_host"](value) == host


def test_documentation_is_yaml_with_every_option(plugin):
    import yaml  # pylint: disable=import-outside-toplevel
    doc = yaml.safe_load(plugin["DOCUMENTATION"])
    assert set(doc["options"]) == {"host", "port", "data_alerts_path", "data_host_path", "data_path_separator",
                                   "skip_original_data", "token", "inventory", "max_body_bytes", "max_alerts"}
    examples = yaml.safe_load(plugin["EXAMPLES"])
    assert list(examples[0]) == ["modelops.vllm.alertmanager"]
    assert set(examples[0]["modelops.vllm.alertmanager"]) <= set(doc["options"])


# ------------------------------------------------------------------------------------- bad requests (issue 16)

TOKEN = "t0ken-of-the-webhook"
AUTH = {"Authorization": "Bearer " + TOKEN}


async def raw(url, data, read=65536):
    """Send raw bytes to the webhook and return its status code (None when it closed without one)."""
    host, port = url.split("//")[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    try:
        answer = await asyncio.wait_for(reader.read(read), 10)
    finally:
        writer.close()
    first = answer.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) > 1 and first[1].isdigit() else None


def request_bytes(body, headers=b"", path=b"/alerts"):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers
            + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)


def alerts_of(*hosts, status="firing"):
    return {"alerts": [{"status": status, "labels": {"alertname": "VllmEngineStuck", "vllm_host": host}}
                       for host in hosts]}


def refusals(caplog):
    """The source's refusal lines; and never a traceback in any log record."""
    for record in caplog.records:
        assert record.exc_info is None and "Traceback" not in record.getMessage(), record.getMessage()
    return [r.getMessage() for r in caplog.records if "refused a " in r.getMessage()]


@pytest.mark.parametrize("header", [b"Bearer \xff\xfe\xfd", b"\xff\xfe", b"Bearer " + TOKEN.encode() + b"\xff",
                                    b"Bearer \xc3\x28", b"bearer \x80" + TOKEN.encode()])
def test_an_authorization_header_that_is_not_utf8_is_401_never_500(plugin, caplog, header):
    caplog.set_level(logging.INFO)

    async def exchange(url, session):
        return await raw(url, request_bytes(json.dumps(PAYLOAD).encode(), b"Authorization: " + header + b"\r\n"))

    status, events = serve(plugin, {"token": TOKEN}, exchange)
    assert status == 401 and events == []
    assert len(refusals(caplog)) == 1


@pytest.mark.parametrize("body", [b"[" * 200000, b'{"a":' * 100000, b'{"alerts": ' + b"[" * 5000 + b"]" * 5000 + b"}",
                                  json.dumps(functools.reduce(lambda inner, _i: {"x": inner}, range(70), {})).encode()])
def test_deeply_nested_json_is_400_never_a_recursion_error(plugin, caplog, body):
    caplog.set_level(logging.INFO)
    answer, events = serve(plugin, {}, lambda url, s: post(s, url + "/alerts", body))
    assert answer[0] == 400 and "nested" in answer[1]
    assert events == [] and len(refusals(caplog)) == 1


def test_a_body_over_max_body_bytes_is_413_before_it_is_read_and_so_is_a_chunked_one(plugin, caplog):
    caplog.set_level(logging.INFO)
    million = b'{"alerts": [' + b",".join([b"{}"] * 1000000) + b"]}"  # 3 MB: a million empty alerts

    async def chunks():
        for start in range(0, len(million), 65536):
            yield million[start:start + 65536]

    async def exchange(url, session):
        return [await post(session, url + "/alerts", million), await post(session, url + "/alerts", chunks())]

    answers, events = serve(plugin, {}, exchange)
    assert [status for status, _text in answers] == [413, 413]
    assert events == [] and len(refusals(caplog)) == 2


def test_more_alerts_than_max_alerts_is_413_and_queues_nothing(plugin):
    body = {"alerts": [{"status": "firing", "labels": {}}] * 11}
    answer, events = serve(plugin, {"max_alerts": "10"}, lambda url, s: post(s, url + "/alerts", body))
    assert answer[0] == 413 and "max_alerts 10" in answer[1]
    assert events == []
    answer, events = serve(plugin, {"max_alerts": 11, "skip_original_data": True},
                           lambda url, s: post(s, url + "/alerts", body))
    assert answer[0] == 202 and len(events) == 11


@pytest.mark.parametrize("value", ["0", "-1", "many", 0])
def test_limits_that_are_not_positive_whole_numbers_stop_the_source(plugin, value):
    with pytest.raises(ValueError, match="max_alerts must be"):
        plugin["settings_from"]({"max_alerts": value})


def test_the_events_waiting_for_the_rule_engine_are_bounded(plugin, caplog):
    """ansible-rulebook's queue holds one event; while the rule engine does not take them, at most max_alerts
    events wait in the source: the next notification gets 503 with Retry-After (Alertmanager retries it)."""
    caplog.set_level(logging.INFO)

    async def scenario():
        port = prom.free_port(PORTS)
        queue = asyncio.Queue(1)  # as ansible-rulebook's, and nobody takes from it yet
        task = asyncio.create_task(plugin["main"](queue, {"host": "127.0.0.1", "port": port, "max_alerts": 5,
                                                          "skip_original_data": True,
                                                          "data_host_path": "labels.vllm_host"}))
        url = "http://127.0.0.1:%d/alerts" % port
        async with aiohttp.ClientSession() as session:
            for _try in range(200):
                try:
                    async with session.get(url.replace("/alerts", "/")):
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.02)
            first = asyncio.create_task(post(session, url, alerts_of("a", "b", "c", "d")))
            while plugin_pending(caplog) < 1:
                await asyncio.sleep(0.01)
            second = await post(session, url, alerts_of("e", "f", "h"))  # 3 wait (one is in the queue): 3 + 3 > 5
            taken = [await queue.get() for _i in range(4)]
            first = await first
            third = await post(session, url, alerts_of("g"))
            taken.append(await queue.get())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return first, second, third, taken

    def plugin_pending(caplog):
        return sum(1 for r in caplog.records if "4 alert(s) received" in r.getMessage())

    first, second, third, taken = asyncio.run(scenario())
    assert first[0] == 202 and third[0] == 202
    assert second[0] == 503 and "retry later" in second[1]
    assert [e["meta"]["hosts"] for e in taken] == [["a"], ["b"], ["c"], ["d"], ["g"]]


BAD_HOSTS = ["all", "ungrouped", "*", "gb10-*", "gb10-01,gb10-02", "gb10-01:gb10-02", "!gb10-01", "&vllm",
             "~gb10.*", "@/etc/hosts", "gb10 01", "web[0:3]", "gb10-0?", "-gb10", ".hidden", "a" * 254, "all:8000",
             "gb10-01:", "gb10-01\x00"]


def test_a_host_that_is_not_one_host_is_refused_with_422_and_the_others_are_queued(plugin, caplog):
    caplog.set_level(logging.INFO)
    body = alerts_of(*(["gb10-01"] + BAD_HOSTS + ["10.0.0.7", "fd00::8"]))
    answer, events = serve(plugin, {"data_host_path": "labels.vllm_host", "skip_original_data": True},
                           lambda url, s: post(s, url + "/alerts", body))
    assert answer[0] == 422, answer
    assert "%d refused" % len(BAD_HOSTS) in answer[1]
    assert [e["meta"]["hosts"] for e in events] == [["gb10-01"], ["10.0.0.7"], ["fd00::8"]]
    assert len(refusals(caplog)) == 1


def test_a_notification_with_a_refused_host_does_not_queue_its_payload(plugin):
    answer, events = serve(plugin, {"data_host_path": "labels.vllm_host"},
                           lambda url, s: post(s, url + "/alerts", alerts_of("all", "gb10-01")))
    assert answer[0] == 422
    assert [sorted(e) for e in events] == [["alert", "meta"]]  # the payload (which holds "all") is not queued


@pytest.mark.parametrize("host", ["gb10-01", "gb10_01.example.com", "10.0.0.7", "fd00::8", "ALL", "all-gb10"])
def test_a_plain_host_name_or_an_address_is_one_host(plugin, host):
    assert plugin["host_problem"](host) is None


def test_hosts_are_checked_against_the_inventory(plugin, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  children:\n    vllm:\n      hosts:\n        gb10-01:\n        gb10-02:\n"
                         "    other:\n      children:\n        sub:\n          hosts:\n            h3:\n")
    body = alerts_of("gb10-01", "vllm", "other", "sub", "gb10-99", "h3")
    answer, events = serve(plugin, {"data_host_path": "labels.vllm_host", "skip_original_data": True,
                                    "inventory": str(inventory)}, lambda url, s: post(s, url + "/alerts", body))
    assert answer[0] == 422
    assert "vllm: a group of the inventory" in answer[1] and "gb10-99: not a host of the inventory" in answer[1]
    assert [e["meta"]["hosts"] for e in events] == [["gb10-01"], ["h3"]]
    assert any("3 host(s) and 5 group(s)" in r.getMessage() for r in caplog.records)


def test_an_inventory_that_lists_no_host_stops_the_source(plugin, tmp_path):
    async def start():
        await plugin["main"](asyncio.Queue(), {"host": "127.0.0.1", "port": prom.free_port(PORTS),
                                               "inventory": str(tmp_path / "missing.yml")})

    with pytest.raises(ValueError, match="lists no host"):
        asyncio.run(start())


def test_the_inventory_is_read_again_for_a_host_it_did_not_have(plugin, tmp_path):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  hosts:\n    gb10-01:\n")

    async def scenario():
        settings = {"inventory": str(inventory), "inventory_lock": asyncio.Lock(),
                    "inventory_hosts": await plugin["read_inventory"](str(inventory))}
        refused = [("gb10-02", "not a host of the inventory")]
        inventory.write_text("all:\n  hosts:\n    gb10-01:\n    gb10-02:\n")
        soon = await plugin["_inventory_for"](settings, refused)  # read a moment ago: not again
        settings["inventory_hosts"].read_at -= plugin["INVENTORY_REFRESH"]
        later = await plugin["_inventory_for"](settings, refused)
        return soon, later

    soon, later = asyncio.run(scenario())
    assert "gb10-02" not in soon.hosts and "gb10-02" in later.hosts


@pytest.mark.parametrize("data", [b"GARBAGE\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,
                                  b"POST /alerts HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
                                  b"POST /alerts HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                                  b"POST /alerts HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_a_request_that_is_not_http_gets_4xx_and_one_line_never_a_traceback(plugin, caplog, data):
    caplog.set_level(logging.DEBUG)
    status, events = serve(plugin, {}, lambda url, s: raw(url, data))
    assert status is None or 400 <= status < 500, status
    assert events == []
    refusals(caplog)  # no traceback in any record


def test_other_methods_and_paths_get_4xx_and_a_log_line(plugin, caplog):
    caplog.set_level(logging.INFO)

    async def exchange(url, session):
        out = []
        for method, path in (("GET", "/alerts"), ("PUT", "/alerts"), ("DELETE", "/")):
            async with session.request(method, url + path) as resp:
                out.append(resp.status)
        return out

    statuses, events = serve(plugin, {}, exchange)
    assert all(400 <= status < 500 for status in statuses), statuses
    assert len(refusals(caplog)) == 3
