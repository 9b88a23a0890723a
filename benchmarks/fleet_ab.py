"""Two checkouts' watchdog pass side by side over one fleet, alternating, with the ping floor and the naive loop.

A machine's load moves a pass by more than most changes do (a 50-host ping took 23 to 31 s within an hour here),
so a change to the role's cost is measured against the code before it in the same run: each pair runs ``ping``,
``naive``, then the role of checkout A and of checkout B, in turn A-B and B-A, on one fleet of
benchmarks/fleet.py (real SSH, one simulated vLLM server per host, forks 5, ``interval: 5``).

    .venv/bin/python benchmarks/fleet_ab.py --a ../main --b . --size 50 --pairs 3 --pipelining on

Each checkout needs ``.cache/collections`` (any test run or ``make collection-link`` makes it). One JSON line per
run is printed and appended to ``--out`` (default benchmarks/results/fleet-ab.jsonl): the pair, the run, its wall
time, its return code, the hosts judged otherwise than planned and the load average before and after.
"""

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fleet as bench  # noqa: E402  pylint: disable=wrong-import-position


def _load():
    with open('/proc/loadavg') as handle:
        return handle.read().split()[0]


def order(pair, runs):
    """The runs of a pair: the floors first, then A and B, reversed every other pair."""
    floors = [run for run in runs if run not in ('A', 'B')]
    roles = [run for run in runs if run in ('A', 'B')]
    return floors + (roles if pair % 2 == 0 else roles[::-1])


def run_one(fleet, name, checkouts, pipelining, workdir):
    approach = 'role' if name in checkouts else name
    before = _load()
    run = bench.check_fleet(fleet, approach, workdir=workdir, sample_memory=False, pipelining=pipelining,
                            checkout=checkouts.get(name))
    return {'run': name, 'seconds': round(run.seconds, 1), 'rc': run.rc,
            'wrong': None if approach == 'ping' else run.wrong(fleet.expected), 'load_before': before,
            'load_after': _load(), 'tail': (run.stdout + run.stderr)[-1500:] if run.rc else ''}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--a', required=True, help='checkout A (the code before)')
    parser.add_argument('--b', required=True, help='checkout B (the change)')
    parser.add_argument('--size', type=int, default=50)
    parser.add_argument('--pairs', type=int, default=3)
    parser.add_argument('--pipelining', choices=('on', 'off'), default='on')
    parser.add_argument('--runs', default='ping,naive,A,B', help='the runs of a pair (default ping,naive,A,B)')
    parser.add_argument('--out', default=str(HERE / 'results' / 'fleet-ab.jsonl'))
    args = parser.parse_args(argv)
    checkouts = {'A': args.a, 'B': args.b}
    fleet = bench.Fleet(args.size, states=bench.plan(args.size, healthy=True)).build()
    top = Path(os.environ.get('TMPDIR', '/tmp')) / ('modelops-vllm-fleet-ab-%d' % os.getpid())
    try:
        for pair in range(args.pairs):
            for name in order(pair, args.runs.split(',')):
                workdir = top / ('%d-%s-%s' % (pair, name, args.pipelining))
                workdir.mkdir(parents=True, exist_ok=True)
                record = dict({'size': args.size, 'pipelining': args.pipelining, 'pair': pair},
                              **run_one(fleet, name, checkouts, args.pipelining == 'on', workdir))
                print(json.dumps(record), flush=True)
                with open(args.out, 'a') as handle:
                    handle.write(json.dumps(record) + '\n')
    finally:
        fleet.delete()


if __name__ == '__main__':
    main()
