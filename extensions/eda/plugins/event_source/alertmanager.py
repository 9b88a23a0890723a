# Copyright (c) 2026 modelops.vllm contributors
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
import ipaddress
import json
import logging
import re
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path

from aiohttp import web

DOCUMENTATION = r"""
---
short_description: Receive Prometheus Alertmanager's webhook notifications, one event per alert.
description:
  - An ansible-rulebook event source that listens on O(host):O(port) for the POSTs of an
    Alertmanager C(webhook_configs) receiver (any path) and puts one event per alert on the queue,
    with the shape of the events of C(ansible.eda.alertmanager), C(alert) (the alert as Alertmanager
    sent it, with C(status), C(labels), C(annotations), C(startsAt), C(endsAt), C(generatorURL),
    C(fingerprint)) and C(meta) (C(endpoint), the path posted to; C(headers); C(hosts)).
  - C(meta.hosts) is the alert's host (O(data_host_path), without a port), so a C(run_playbook) or
    C(run_module) action of the rule runs on that host only.
  - C(meta.hosts) names one inventory host or nothing. An alert whose host is neither a plain host
    name (letters, digits, C(_ . -)) nor an IP address is refused and never put on the queue, and so
    are C(all) and C(ungrouped), since ansible-rulebook passes the host on as the C(--limit) of the
    playbook run, where a pattern (C(all), C(gb10-*), C(a,b), C(!a), C(&a), C(~regex), C(@file))
    names many hosts. With O(inventory), so is a host that is not a host of that inventory (a group
    name, an unknown host).
  - Answers 202 to a notification whose alerts were all put on the queue, 422 to one with an alert
    whose host was refused (its other alerts are put on the queue; the answer names what was
    refused), 400 to a body that is not a JSON object (not JSON, not UTF-8, nested deeper than 64
    levels), 401 without the O(token) when one is set (whatever bytes the C(Authorization) header
    holds), 408 to a body that does not arrive within 30 seconds, 413 to a body over
    O(max_body_bytes) or a notification of more than O(max_alerts) alerts, 503 (with C(Retry-After),
    which Alertmanager honours by retrying) while O(max_alerts) events already wait for the rule
    engine, and 200 to C(GET /) (a readiness check). Every refusal is one line in the log, never a
    traceback.
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
      - C(false) puts the whole payload on the queue as one more event before the alerts, with the
        keys C(payload) and C(meta) (C(endpoint), C(headers)); C(true) puts the alerts only.
    type: bool
    default: false
  token:
    description:
      - When set, a POST must carry the header C(Authorization) with the value C(Bearer <token>)
        (Alertmanager's C(http_config.authorization.credentials)); the header is never put into an
        event.
      - Required when O(host) is not a loopback address (C(localhost), C(127.0.0.0/8), C(::1)),
        since a webhook that anyone on the network can post to would let anyone start watchdog runs.
        Unlike C(ansible.eda.alertmanager), the source refuses to start without it.
      - The webhook speaks plain HTTP; across machines, put a TLS proxy in front of it so the token
        does not cross the network in clear.
    type: str
  inventory:
    description:
      - The inventory the playbooks of the rules run with (what is given to ansible-rulebook's
        C(-i)). When set, an alert's host must be a host of it, not a group and not a host it does
        not have. Its hosts are read with C(ansible-inventory --graph) at start-up (the source does
        not start when that fails) and again, at most once a minute, when an alert names a host it
        does not know.
    type: str
  max_body_bytes:
    description:
      - The largest notification, in bytes. A larger one is refused (413) before it is read.
    type: int
    default: 1048576
  max_alerts:
    description:
      - The most alerts of one notification (a larger one is refused, 413), and the most events that
        may wait in the source for the rule engine at once (past it, 503 and Alertmanager retries).
        Keep Alertmanager's C(max_alerts) of the webhook at or below it.
    type: int
    default: 1000
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

# Alertmanager sends every alert of a group in one POST; one alert is about 1-2 KB.
MAX_BODY = 1024 * 1024
MAX_ALERTS = 1000
# Deeper JSON than any notification has; deeper would cost recursion in whatever handles the event.
MAX_DEPTH = 64
# Seconds a body may take to arrive.
READ_TIMEOUT = 30.0
# Seconds between two reads of the inventory's hosts, at most (when an alert names a host it does
# not know), and the most one read may take.
INVENTORY_REFRESH = 60.0
INVENTORY_TIMEOUT = 120.0
# A host name as an inventory has it: no pattern (all, gb10-*, a:b, a,b, !a, &a, ~regex, @file,
# [0:3]).
_HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}\Z")
# The host patterns Ansible gives every host of the inventory.
_EVERY_HOST = ("all", "ungrouped", "*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# How many alerts one log line describes, and how many refused hosts one answer names.
_LOGGED_ALERTS = 20
_NAMED_REFUSALS = 10
_NOT_IN_INVENTORY = "not a host of the inventory"

_SETTINGS = web.AppKey("modelops_vllm_alertmanager", dict)
# What asyncio.wait_for raises when time is up: TimeoutError from Python 3.11 on, asyncio's own
# TimeoutError before (ansible-rulebook runs on Python 3.9 and newer).
_TIMED_OUT = (TimeoutError, asyncio.TimeoutError)

# A JSON value as json.loads gives it.
Json = object
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RefusedError(Exception):
    """A request the source refuses: the HTTP status, why, and the headers of the answer."""

    def __init__(self, status: int, why: str, headers: dict | None = None) -> None:
        """Keep the answer's status, reason and headers."""
        super().__init__(why)
        self.status = status
        self.why = why
        self.headers = headers


def _get_path(data: Json, path: str, separator: str) -> Json:
    """Return the value at ``path`` (keys joined by ``separator``), or raise KeyError.

    An integer key indexes a list.
    """
    value = data
    for key in path.split(separator) if path else []:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif (isinstance(value, list) and key.lstrip("-").isdigit() and
              -len(value) <= int(key) < len(value)):
            value = value[int(key)]
        else:
            raise KeyError(path)
    return value


def clean_host(host: Json) -> str | None:
    """Return a host without its port.

    ``gb10-01:8000`` is ``gb10-01``, ``[::1]:8000`` is ``::1``, ``::1`` stays; only a port of
    digits is removed: ``a:b`` stays as it is, a pattern.
    """
    if host is None:
        return None
    host = str(host).strip()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    if host.count(":") == 1 and host.split(":", 1)[1].isdigit():
        host = host.split(":", 1)[0]
    return host or None


class Inventory:
    """The host and group names of an inventory, as ``ansible-inventory --graph`` lists them."""

    def __init__(self, hosts: tuple | set = (), groups: tuple | set = ()) -> None:
        """Keep the names, and when they were read."""
        self.hosts = frozenset(hosts)
        self.groups = frozenset(groups)
        self.read_at = time.monotonic()

    @classmethod
    def from_graph(cls, text: str) -> Inventory:
        """Read the names of ``ansible-inventory --graph``'s output."""
        hosts, groups = set(), set()
        for line in text.splitlines():
            name = line.strip().lstrip("| -")  # "  |  |--gb10-01", "  |--@vllm:"
            if not name:
                continue
            if name.startswith("@") and name.endswith(":"):
                groups.add(name[1:-1])
            else:
                hosts.add(name)
        return cls(hosts, groups)


def _ansible_inventory() -> str:
    found = shutil.which("ansible-inventory")
    return found or str(Path(sys.executable).parent / "ansible-inventory")


async def read_inventory(path: str) -> Inventory:
    """Read the hosts and groups of the inventory at ``path``.

    ValueError when ansible-inventory cannot list them within INVENTORY_TIMEOUT seconds.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            _ansible_inventory(), "-i", path, "--graph", stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        msg = f"alertmanager: cannot run ansible-inventory to list the hosts of {path}: {exc}"
        raise ValueError(msg) from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(), INVENTORY_TIMEOUT)
    except _TIMED_OUT as exc:
        proc.kill()
        await proc.wait()
        msg = (f"alertmanager: ansible-inventory -i {path} --graph did not answer in "
               f"{INVENTORY_TIMEOUT:.0f} s")
        raise ValueError(msg) from exc
    inventory = Inventory.from_graph(out.decode("utf-8", "replace"))
    if proc.returncode != 0 or not inventory.hosts:
        why = err.decode("utf-8", "replace").strip()[-500:]
        msg = (f"alertmanager: ansible-inventory -i {path} --graph lists no host "
               f"(rc {proc.returncode}): {why}")
        raise ValueError(msg)
    return inventory


def host_problem(host: str, inventory: Inventory | None = None) -> str | None:
    """Say why ``host`` is not one inventory host (None when it is).

    ansible-rulebook makes it the --limit of a playbook run, where ``all``, a group or a pattern
    would run the watchdog on many hosts.
    """
    if host in _EVERY_HOST:
        return "a pattern of every host, not one host"
    if not _HOST_NAME.match(host):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return "not a host name (a host pattern, or characters no host name has)"
    if inventory is not None:
        if host in inventory.groups:
            return "a group of the inventory, not one host"
        if host not in inventory.hosts:
            return _NOT_IN_INVENTORY
    return None


def _alerts_of(payload: Json, settings: dict) -> list:
    """Return the alerts of a notification; ValueError past ``max_alerts``."""
    if settings["data_alerts_path"]:
        try:
            alerts = _get_path(payload, settings["data_alerts_path"],
                               settings["data_path_separator"])
        except KeyError:
            alerts = []
        if not isinstance(alerts, list):
            alerts = [alerts]
    else:
        alerts = [payload]
    if len(alerts) > settings["max_alerts"]:
        msg = (f"{len(alerts)} alerts in one notification, more than max_alerts "
               f"{settings['max_alerts']}")
        raise ValueError(msg)
    return alerts


def _host_of(alert: Json, settings: dict) -> str | None:
    """Return the host an alert names (without a port), or None."""
    if not settings["data_host_path"]:
        return None
    try:
        return clean_host(_get_path(alert, settings["data_host_path"],
                                    settings["data_path_separator"]))
    except KeyError:
        return None


def alert_events(payload: Json, settings: dict, endpoint: str, headers: dict,
                 inventory: Inventory | None = None) -> tuple[list, list]:
    """Return the events of one notification and its refused alerts: ``(events, refused)``.

    The events are the payload itself (unless ``skip_original_data``, or when an alert was
    refused), then one per alert whose host is one inventory host or none; ``refused`` is
    ``[(host, why)]`` of the others. ValueError past ``max_alerts``.
    """
    events, refused = [], []
    for alert in _alerts_of(payload, settings):
        host = _host_of(alert, settings)
        why = host_problem(host, inventory) if host else None
        if why:
            refused.append((host, why))
            continue
        # One headers dict per notification, shared by its events: a copy per alert costs memory,
        # not safety.
        events.append({"alert": alert,
                       "meta": {"endpoint": endpoint, "headers": headers,
                                "hosts": [host] if host else []}})
    if not settings["skip_original_data"] and not refused:
        events.insert(0, {"payload": payload, "meta": {"endpoint": endpoint, "headers": headers}})
    return events, refused


def _authorized(request: web.Request, token: str | None) -> bool:
    """Tell whether the request carries ``Authorization: Bearer <token>``.

    The header's bytes are compared as they came (aiohttp keeps bytes that are not UTF-8 as
    surrogates): any header that is not the token is refused.
    """
    if not token:
        return True
    header = request.headers.get("Authorization", "")
    scheme, _sep, given = header.partition(" ")
    try:
        given_bytes = given.strip().encode("utf-8", "surrogateescape")
    except UnicodeError:
        return False
    return scheme.lower() == "bearer" and hmac.compare_digest(given_bytes, token.encode("utf-8"))


def _text(value: Json, limit: int = 120) -> str:
    """Return a value for one log line: printable, one line, bounded."""
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    text = _CONTROL.sub("?", text)
    return text if len(text) <= limit else text[:limit] + "..."


def _describe(alert: Json) -> str:
    if not isinstance(alert, dict):
        return "?"
    labels = alert.get("labels") if isinstance(alert.get("labels"), dict) else {}
    return (f"{_text(labels.get('alertname', '?'), 60)} {_text(alert.get('status', '?'), 20)} "
            f"{_text(labels.get('instance', ''), 80)}")


def _deeper_than(value: Json, limit: int) -> bool:
    """Tell whether JSON ``value`` nests deeper than ``limit`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _refuse(request: web.Request, status: int, why: str,
            headers: dict | None = None) -> web.Response:
    LOG.warning("alertmanager: refused a %s to %s from %s with %d: %s", request.method,
                _text(request.path, 200), request.remote, status, why)
    return web.Response(status=status, text=why, headers=headers)


def _clean_headers(request: web.Request) -> dict:
    """Return the request's headers for the events.

    Never the Authorization header; bytes that are not UTF-8 are replaced.
    """
    return {_text(key, 200): value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            for key, value in request.headers.items() if key.lower() != "authorization"}


async def _status(_request: web.Request) -> web.Response:
    return web.Response(status=200, text="up")


async def _inventory_for(settings: dict, refused: list) -> Inventory | None:
    """Return the inventory, read again (at most once a minute) when an alert names a new host."""
    inventory = settings.get("inventory_hosts")
    if inventory is None or not any(why == _NOT_IN_INVENTORY for _host, why in refused):
        return inventory
    async with settings["inventory_lock"]:
        inventory = settings["inventory_hosts"]
        if time.monotonic() - inventory.read_at >= INVENTORY_REFRESH:
            try:
                inventory = settings["inventory_hosts"] = await read_inventory(
                    settings["inventory"])
            except ValueError as exc:
                LOG.warning("%s; the hosts read before are kept", exc)
                inventory.read_at = time.monotonic()
    return inventory


async def _read_payload(request: web.Request, settings: dict) -> dict:
    """Return the notification a request carries, or raise RefusedError."""
    if not _authorized(request, settings["token"]):
        raise RefusedError(401, "no valid bearer token")
    limit = settings["max_body_bytes"]
    if request.content_length is not None and request.content_length > limit:
        raise RefusedError(413, f"a body of {request.content_length} bytes, over max_body_bytes "
                                f"{limit}")
    try:
        body = await asyncio.wait_for(request.read(), READ_TIMEOUT)
    except web.HTTPRequestEntityTooLarge as exc:
        raise RefusedError(413, f"a body over max_body_bytes {limit}") from exc
    except _TIMED_OUT as exc:
        raise RefusedError(408, f"the body did not arrive within {READ_TIMEOUT:.0f} s") from exc
    try:
        payload = json.loads(body)
    except RecursionError as exc:
        raise RefusedError(400, "the body is JSON nested too deep") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise RefusedError(400, f"the body is not JSON: {_text(str(exc), 200)}") from exc
    if not isinstance(payload, dict):
        raise RefusedError(400, "the body is not a JSON object")
    if _deeper_than(payload, MAX_DEPTH):
        raise RefusedError(400, f"the body is JSON nested deeper than {MAX_DEPTH} levels")
    return payload


async def _events_of(request: web.Request, settings: dict, payload: dict) -> tuple[list, list]:
    """Return the events of a notification and its refused alerts, or raise RefusedError."""
    endpoint = request.match_info.get("endpoint", "")
    try:
        events, refused = alert_events(payload, settings, endpoint, _clean_headers(request),
                                       settings.get("inventory_hosts"))
    except ValueError as exc:
        raise RefusedError(413, str(exc)) from exc
    if refused and settings.get("inventory_hosts") is not None:
        # A host added to the inventory since it was read: read it again, then judge the alerts
        # again.
        inventory = await _inventory_for(settings, refused)
        events, refused = alert_events(payload, settings, endpoint, _clean_headers(request),
                                       inventory)
    if settings["pending"] + len(events) > settings["max_alerts"]:
        raise RefusedError(503, f"{settings['pending']} events already wait for the rule engine "
                                f"(max_alerts {settings['max_alerts']}): retry later",
                           headers={"Retry-After": "5"})
    return events, refused


async def _enqueue(settings: dict, events: list) -> None:
    """Put the events on the queue; they wait here, counted, until the rule engine takes each."""
    settings["pending"] += len(events)
    left = len(events)
    try:
        for event in events:
            await settings["queue"].put(event)
            left -= 1
            settings["pending"] -= 1
    finally:
        settings["pending"] -= left


async def _receive(request: web.Request) -> web.Response:
    settings = request.app[_SETTINGS]
    try:
        payload = await _read_payload(request, settings)
        events, refused = await _events_of(request, settings, payload)
    except RefusedError as refusal:
        return _refuse(request, refusal.status, refusal.why, refusal.headers)
    del payload
    alerts = [event["alert"] for event in events if "alert" in event]
    if alerts or not refused:
        described = ", ".join(_describe(alert) for alert in alerts[:_LOGGED_ALERTS])
        if len(alerts) > _LOGGED_ALERTS:
            described += f" and {len(alerts) - _LOGGED_ALERTS} more"
        LOG.info("alertmanager: %d alert(s) received on /%s from %s: %s", len(alerts),
                 _text(request.match_info.get("endpoint", ""), 200), request.remote,
                 described or "none")
    await _enqueue(settings, events)
    if refused:
        names = "; ".join(f"{_text(host, 80)}: {why}" for host, why in refused[:_NAMED_REFUSALS])
        if len(refused) > _NAMED_REFUSALS:
            names += f" and {len(refused) - _NAMED_REFUSALS} more"
        return _refuse(request, 422, f"{len(alerts)} alert(s) put on the queue; {len(refused)} "
                                     f"refused, their host is not one inventory host ({names})")
    return web.Response(status=202, text="Received")


def is_loopback(host: str) -> bool:
    """Tell whether listening on ``host`` keeps the webhook on this machine."""
    host = host.strip().strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _limit(args: dict, name: str, default: int) -> int:
    """Return a limit of the arguments, a whole number of at least 1; else raise ValueError."""
    value = args.get(name)
    try:
        limit = default if value in (None, "") else int(value)
    except (TypeError, ValueError):
        limit = -1
    if limit < 1:
        msg = f"alertmanager: {name} must be a whole number of at least 1, got {value!r}"
        raise ValueError(msg)
    return limit


def settings_from(args: dict) -> dict:
    """Return the plugin's settings from the rulebook's arguments.

    ansible-rulebook may pass every value as a string. ValueError for a webhook open to the
    network without a token.
    """
    skip = args.get("skip_original_data", False)
    if isinstance(skip, str):
        skip = skip.strip().lower() in ("1", "true", "yes", "on")
    host = str(args.get("host") or "localhost")
    if not args.get("token") and not is_loopback(host):
        msg = (f"alertmanager: host {host} is reachable from other machines, and no token is set: "
               "anyone there could start watchdog runs. Set token (the bearer token of "
               "Alertmanager's webhook), or listen on localhost.")
        raise ValueError(msg)
    return {
        "host": host,
        "port": int(args.get("port") or 5000),
        "data_alerts_path": str(args.get("data_alerts_path", "alerts") or ""),
        "data_host_path": str(args.get("data_host_path", "labels.instance") or ""),
        "data_path_separator": str(args.get("data_path_separator") or "."),
        "skip_original_data": bool(skip),
        "token": str(args["token"]) if args.get("token") else None,
        "inventory": str(args["inventory"]) if args.get("inventory") else None,
        "max_body_bytes": _limit(args, "max_body_bytes", MAX_BODY),
        "max_alerts": _limit(args, "max_alerts", MAX_ALERTS),
    }


class _OneLine(logging.LoggerAdapter):
    """aiohttp's server logger with one line per error (the exception's type and message).

    Never a traceback: a request that is not HTTP, or whose headers are too long, is the client's
    error, not the source's.
    """

    def process(self, msg: str, kwargs: MutableMapping) -> tuple[str, MutableMapping]:
        exc = kwargs.pop("exc_info", None)
        if exc is True:
            exc = sys.exc_info()[1]
        if isinstance(exc, BaseException):
            msg = f"{msg}: {type(exc).__name__}: {_text(str(exc), 300)}"
        kwargs.pop("stack_info", None)
        return msg, kwargs


@web.middleware
async def _no_traceback(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer what a handler raised: one log line for every answer that is not a success.

    Nothing a client sends gives a traceback.
    """
    try:
        return await handler(request)
    except web.HTTPException as exc:
        LOG.warning("alertmanager: refused a %s to %s from %s with %d: %s", request.method,
                    _text(request.path, 200), request.remote, exc.status, exc.reason)
        raise
    # Any other failure of a request is a bad request, answered and logged in one line: this is
    # the one place that turns what a client sent into an answer, whatever it raised.
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-exception-caught
        why = f"{type(exc).__name__}: {_text(str(exc), 200)}"
        return _refuse(request, 400, f"the request could not be handled: {why}")


async def main(queue: asyncio.Queue, args: dict) -> None:
    """Serve Alertmanager's webhook until the task is cancelled (ansible-rulebook's entry point)."""
    settings = settings_from(args)
    settings["queue"] = queue
    settings["pending"] = 0
    settings["inventory_lock"] = asyncio.Lock()
    settings["inventory_hosts"] = None
    if settings["inventory"]:
        inventory = settings["inventory_hosts"] = await read_inventory(settings["inventory"])
        LOG.info("alertmanager: %d host(s) and %d group(s) in %s: an alert must name one of "
                 "those hosts", len(inventory.hosts), len(inventory.groups), settings["inventory"])
    app = web.Application(client_max_size=settings["max_body_bytes"],
                          middlewares=[_no_traceback])
    app[_SETTINGS] = settings
    app.router.add_get("/", _status)
    app.router.add_post("/{endpoint:.*}", _receive)
    runner = web.AppRunner(app, access_log=None,
                           logger=_OneLine(logging.getLogger("aiohttp.server"), {}))
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
        async def put(self, item: object) -> None:
            sys.stdout.write(json.dumps(item) + "\n")

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(_PrintQueue(), {}))
