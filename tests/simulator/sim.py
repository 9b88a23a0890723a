"""Command line entry point of the vLLM simulator.

    python -m tests.simulator [options]        (from the repository root)
    python tests/simulator/sim.py [options]    (as a script, from anywhere)

Prints one JSON line on stdout when ready::

    {"event": "ready", "pid": 123, "control_port": 19000, "control_url": "http://127.0.0.1:19000", "servers": [...]}

and runs until SIGTERM/SIGINT or ``POST /shutdown`` on the control port.
"""

import argparse
import asyncio
import json
import os
import signal
import sys

if __name__ == "__main__" and not __package__:
    # Script mode: load this directory as a package under a private name, so that the
    # relative imports work and no top-level "tests" package is needed.
    import importlib.util
    from pathlib import Path

    _here = Path(__file__).resolve().parent
    _spec = importlib.util.spec_from_file_location("_vllm_simulator", _here / "__init__.py",
                                                   submodule_search_locations=[str(_here)])
    _pkg = importlib.util.module_from_spec(_spec)
    sys.modules["_vllm_simulator"] = _pkg
    _spec.loader.exec_module(_pkg)
    from _vllm_simulator.sim import main as _main  # pylint: disable=import-error

    sys.exit(_main())

from .control import Simulator  # noqa: E402  pylint: disable=wrong-import-position


def _option_value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def build_parser():
    p = argparse.ArgumentParser(prog="python -m tests.simulator", description="Simulated vLLM 0.32 servers.")
    p.add_argument("--host", default="127.0.0.1", help="address every simulated server and the control API bind to")
    p.add_argument("--control-port", type=int, default=0, help="control API port (0: first free one of --port-range, or any)")
    p.add_argument("--port-range", default=None, help="ports to allocate from, e.g. 19000-19999 (default: any free port)")
    p.add_argument("--servers", type=int, default=0, help="create this many servers at start")
    p.add_argument("--model", default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--step-rate", type=float, default=None, help="engine steps (tokens per running request) per second")
    p.add_argument("--chunk-tokens", type=int, default=None)
    p.add_argument("--engines", type=int, default=None)
    p.add_argument("--api-key", default=None)
    p.add_argument("--version-string", dest="version", default=None, help="what /version answers")
    p.add_argument("--tls", action="store_true", default=None)
    p.add_argument("--multiprocess", action="store_true", default=None)
    p.add_argument("--disable-log-stats", action="store_true", default=None)
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="any server option (JSON value), repeatable, e.g. -o load_seconds=2")
    p.add_argument("--ready-file", default=None, help="also write the ready line to this file")
    p.add_argument("--workdir", default=None, help="where TLS files go (default: a temporary directory)")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop when the process that started the simulator goes away")
    return p


def server_options(args):
    opts = {}
    for name in ("model", "max_num_seqs", "step_rate", "chunk_tokens", "engines", "api_key", "version",
                 "tls", "multiprocess", "disable_log_stats"):
        value = getattr(args, name)
        if value is not None:
            opts[name] = value
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--option needs KEY=VALUE, got {item!r}")
        opts[key.strip()] = _option_value(value)
    return opts


async def run(args):
    sim = Simulator(host=args.host, port_range=args.port_range, workdir=args.workdir)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, sim.stopped.set)
        except (NotImplementedError, RuntimeError):
            pass
    control_port = await sim.start_control(args.control_port)
    opts = server_options(args)
    created = []
    try:
        for dummy in range(args.servers):
            created.append(await sim.create_server(dict(opts)))
    except (ValueError, OSError) as exc:
        print(json.dumps({"event": "error", "error": str(exc)}), flush=True)
        await sim.close()
        return 2
    host = args.host if ":" not in args.host else f"[{args.host}]"
    ready = {"event": "ready", "pid": os.getpid(), "control_port": control_port,
             "control_url": f"http://{host}:{control_port}", "servers": [s.info() for s in created]}
    line = json.dumps(ready)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
        os.replace(tmp, args.ready_file)
    print(line, flush=True)
    if args.exit_with_parent:
        loop.create_task(_watch_parent(os.getppid(), sim.stopped))
    await sim.stopped.wait()
    await sim.close()
    return 0


async def _watch_parent(parent, stopped):
    while not stopped.is_set():
        if os.getppid() != parent:
            stopped.set()
            return
        await asyncio.sleep(0.5)


def main(argv=None):
    args = build_parser().parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
