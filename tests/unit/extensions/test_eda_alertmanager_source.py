"""The collection's ansible-rulebook event source ``modelops.vllm.alertmanager``
(``extensions/eda/plugins/event_source/alertmanager.py``), loaded as ansible-rulebook loads it
(``runpy.run_path``) and driven over real HTTP on loopback (127.0.0.1:27800-27899) with the
webhook payloads Alertmanager sends.
"""

import asyncio
import json
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
            for _try in range(200):
                if task.done():
                    task.result()  # raises what main() raised
                try:
                    async with session.get(url + "/") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientConnectionError:
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
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
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
                                   "skip_original_data", "token"}
    examples = yaml.safe_load(plugin["EXAMPLES"])
    assert list(examples[0]) == ["modelops.vllm.alertmanager"]
    assert set(examples[0]["modelops.vllm.alertmanager"]) <= set(doc["options"])
