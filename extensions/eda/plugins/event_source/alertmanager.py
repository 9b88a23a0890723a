# -*- coding: utf-8 -*-
# Copyright: modelops.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-rulebook event source: Alertmanager's webhook, one event per alert.

Used by the collection's rulebook (``extensions/eda/rulebooks/vllm_stuck.yml``) as
``modelops.vllm.alertmanager``. It takes the options and puts on the queue the events of the
``ansible.eda.alertmanager`` source, so a rulebook written for one runs with the other; this one
exists because that collection comes from Ansible Galaxy only. Needs nothing that ansible-rulebook
does not install (aiohttp).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from typing import Any

from aiohttp import web

DOCUMENTATION = r"""
---
short_description: Receive Prometheus Alertmanager's webhook notifications, one event per alert.
description:
  - An ansible-rulebook event source that listens on O(host):O(port) for the POSTs of an Alertmanager
    C(webhook_configs) receiver (any path) and puts one event per alert on the queue, with the shape of
    the events of C(ansible.eda.alertmanager), C(alert) (the alert as Alertmanager sent it, with C(status),
    C(labels), C(annotations), C(startsAt), C(endsAt), C(generatorURL), C(fingerprint)) and C(meta)
    (C(endpoint), the path posted to; C(headers); C(hosts)).
  - C(meta.hosts) is the alert's host (O(data_host_path), without a port), so a C(run_playbook) or
    C(run_module) action of the rule runs on that host only.
  - Answers 202 to a notification, 400 to a body that is not a JSON object, 401 without the O(token)
    when one is set, and 200 to C(GET /) (a readiness check).
options:
  host:
    description:
      - The address to listen on. C(0.0.0.0) listens on every interface.
    type: str
    default: localhost
  port:
    description:
      - The TCP port to listen on.
    type: int
    default: 5000
  data_alerts_path:
    description:
      - Where the alerts are in the payload, as a path of keys joined by O(data_path_separator).
      - An empty string treats the whole payload as one alert.
    type: str
    default: alerts
  data_host_path:
    description:
      - Where the host is in each alert, for C(meta.hosts). A trailing C(:port) is removed
        (C(gb10-01:8000) is C(gb10-01), C([::1]:8000) is C(::1)).
      - An empty string puts no host in C(meta.hosts).
    type: str
    default: labels.instance
  data_path_separator:
    description:
      - The separator of O(data_alerts_path) and O(data_host_path).
    type: str
    default: "."
  skip_original_data:
    description:
      - C(false) puts the whole payload on the queue as one more event before the alerts, with the keys
        C(payload) and C(meta) (C(endpoint), C(headers)); C(true) puts the alerts only.
    type: bool
    default: false
  token:
    description:
      - When set, a POST must carry the header C(Authorization) with the value C(Bearer <token>)
        (Alertmanager's C(http_config.authorization.credentials)); the header is never put into an event.
      - Required when O(host) is not a loopback address (C(localhost), C(127.0.0.0/8), C(::1)), since a webhook
        that anyone on the network can post to would let anyone start watchdog runs. Unlike
        C(ansible.eda.alertmanager), the source refuses to start without it.
      - The webhook speaks plain HTTP; across machines, put a TLS proxy in front of it so the token does
        not cross the network in clear.
    type: str
"""

EXAMPLES = r"""
- modelops.vllm.alertmanager:
    host: 0.0.0.0
    port: 5000
    token: "{{ vllm_eda_token }}"
    data_host_path: labels.vllm_host
    skip_original_data: true
"""

LOG = logging.getLogger(__name__)

# Alertmanager sends every alert of a group in one POST; a few MB is thousands of alerts.
MAX_BODY = 8 * 1024 * 1024

_SETTINGS = web.AppKey("modelops_vllm_alertmanager", dict)


def _get_path(data: Any, path: str, separator: str) -> Any:
    """The value at ``path`` (keys joined by ``separator``; an integer key indexes a list), or KeyError."""
    value = data
    for key in path.split(separator) if path else []:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.lstrip("-").isdigit() and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        else:
            raise KeyError(path)
    return value


def clean_host(host: Any) -> str | None:
    """A host without its port: ``gb10-01:8000`` -> ``gb10-01``, ``[::1]:8000`` -> ``::1``, ``::1`` stays."""
    if host is None:
        return None
    host = str(host).strip()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host or None


def alert_events(payload: Any, settings: dict, endpoint: str, headers: dict) -> list:
    """The events of one notification: the payload itself (unless ``skip_original_data``), then one per alert."""
    events = []
    if not settings["skip_original_data"]:
        events.append({"payload": payload, "meta": {"endpoint": endpoint, "headers": dict(headers)}})
    separator = settings["data_path_separator"]
    if settings["data_alerts_path"]:
        try:
            alerts = _get_path(payload, settings["data_alerts_path"], separator)
        except KeyError:
            alerts = []
        if not isinstance(alerts, list):
            alerts = [alerts]
    else:
        alerts = [payload]
    for alert in alerts:
        hosts = []
        if settings["data_host_path"]:
            try:
                host = clean_host(_get_path(alert, settings["data_host_path"], separator))
            except KeyError:
                host = None
            if host:
                hosts.append(host)
        events.append({"alert": alert, "meta": {"endpoint": endpoint, "headers": dict(headers), "hosts": hosts}})
    return events


def _authorized(request: web.Request, token: str | None) -> bool:
    if not token:
        return True
    scheme, _sep, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def _describe(alert: Any) -> str:
    if not isinstance(alert, dict):
        return "?"
    labels = alert.get("labels") if isinstance(alert.get("labels"), dict) else {}
    return "%s %s %s" % (labels.get("alertname", "?"), alert.get("status", "?"), labels.get("instance", ""))


async def _status(_request: web.Request) -> web.Response:
    return web.Response(status=200, text="up")


async def _receive(request: web.Request) -> web.Response:
    settings = request.app[_SETTINGS]
    if not _authorized(request, settings["token"]):
        LOG.warning("alertmanager: refused a POST to %s from %s: no valid bearer token", request.path, request.remote)
        return web.Response(status=401, text="Unauthorized")
    try:
        payload = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError) as exc:
        LOG.warning("alertmanager: a POST to %s from %s is not JSON: %s", request.path, request.remote, exc)
        return web.Response(status=400, text="the body is not JSON")
    if not isinstance(payload, dict):
        return web.Response(status=400, text="the body is not a JSON object")
    endpoint = request.match_info.get("endpoint", "")
    headers = dict((key, value) for key, value in request.headers.items() if key.lower() != "authorization")
    events = alert_events(payload, settings, endpoint, headers)
    alerts = [event["alert"] for event in events if "alert" in event]
    LOG.info("alertmanager: %d alert(s) received on /%s from %s: %s", len(alerts), endpoint, request.remote,
             ", ".join(_describe(alert) for alert in alerts) or "none")
    for event in events:
        await settings["queue"].put(event)
    return web.Response(status=202, text="Received")


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the webhook on this machine."""
    host = host.strip().strip("[]").lower()
    if host in ("localhost", "::1") or host.endswith(".localhost"):
        return True
    parts = host.split(".")
    return len(parts) == 4 and parts[0] == "127" and all(part.isdigit() and int(part) < 256 for part in parts)


def settings_from(args: dict) -> dict:
    """The plugin's settings from the rulebook's arguments (ansible-rulebook may pass every value as a string);
    ValueError for a webhook open to the network without a token."""
    skip = args.get("skip_original_data", False)
    if isinstance(skip, str):
        skip = skip.strip().lower() in ("1", "true", "yes", "on")
    host = str(args.get("host") or "localhost")
    if not args.get("token") and not is_loopback(host):
        raise ValueError("alertmanager: host %s is reachable from other machines, and no token is set: anyone "
                         "there could start watchdog runs. Set token (the bearer token of Alertmanager's "
                         "webhook), or listen on localhost." % host)
    return {
        "host": host,
        "port": int(args.get("port") or 5000),
        "data_alerts_path": str(args.get("data_alerts_path", "alerts") or ""),
        "data_host_path": str(args.get("data_host_path", "labels.instance") or ""),
        "data_path_separator": str(args.get("data_path_separator") or "."),
        "skip_original_data": bool(skip),
        "token": str(args["token"]) if args.get("token") else None,
    }


async def main(queue: Any, args: dict) -> None:
    """Serve Alertmanager's webhook until the task is cancelled (ansible-rulebook's source entry point)."""
    settings = settings_from(args)
    settings["queue"] = queue
    app = web.Application(client_max_size=MAX_BODY)
    app[_SETTINGS] = settings
    app.router.add_get("/", _status)
    app.router.add_post("/{endpoint:.*}", _receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings["host"], settings["port"])
        await site.start()
        LOG.info("alertmanager: listening on %s:%d", settings["host"], settings["port"])
        await asyncio.Future()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    class _PrintQueue(asyncio.Queue):
        async def put(self, item):
            print(json.dumps(item))

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(_PrintQueue(), {}))
