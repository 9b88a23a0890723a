"""`make try` and every command of the docs marked for it, run as written against the sandbox.

A fenced block right after one of these markers in README.md or docs/*.md belongs to the sandbox:

    <!-- try -->               run the block; it must exit 0
    <!-- try: exit N -->       run the block; it must exit N (a command that shows a refusal)
    <!-- try: write FILE -->   write the block to FILE in the sandbox directory (a playbook that the
                               next blocks run)

Each block runs in its own ``bash -e -o pipefail`` that first sourced the sandbox's ``env.sh`` (the
one line ``make try`` prints), with nothing of this test session's environment: no ANSIBLE_*
variable, and a PATH without the project's venv, so the line alone must be enough. Each page
starts from a fresh sandbox (``make try-stop``, ``make try``), as a reader who follows it does.
Beyond the exit codes, the checks below assert what matters on each page: the verdicts printed,
the stuck server restarted once by the stand-ins and the busy one untouched, nothing sent to the
busy servers, the proxy asked for ``/v1/models`` only. At the end, ``make try-stop`` must leave
nothing running.

docs/schedule.md's cron line and systemd units are run and checked here too (they need the
sandbox's inventory).

Loopback ports 127.0.0.1:28000-28099: the sandbox's fixed block, used by this module only.
"""

import configparser
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO
from tests.support.ports import bindable
from tests.simulator.client import SimulatorClient

pytestmark = pytest.mark.timeout(1800)

PORTS = (28000, 28099)
MARKER = re.compile(r'<!-- try(?::\s*(?P<arg>[^>]*?))?\s*-->[ \t]*\n```(?P<lang>[\w-]*)\n(?P<body>.*?)\n```', re.S)
EXAMPLE = re.compile(r'<!-- example: ([\w-]+) -->\s*\n```[\w-]*\n(.*?)\n```', re.S)
# The pages whose commands run against the sandbox (a page that loses its markers fails here).
PAGES = ['README.md', 'docs/adhoc.md', 'docs/awx.md', 'docs/fleet.md', 'docs/local.md', 'docs/prometheus.md',
         'docs/rollout.md', 'docs/schedule.md']
SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'


def blocks(page):
    with open(os.path.join(REPO, page)) as handle:
        text = handle.read()
    return [(m.group('arg') or '', m.group('lang'), m.group('body')) for m in MARKER.finditer(text)]


def examples(page):
    with open(os.path.join(REPO, page)) as handle:
        return dict(EXAMPLE.findall(handle.read()))


def clean_env(**extra):
    """This session's environment without what the sandbox's env.sh must provide."""
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(('ANSIBLE_', 'MODELOPS_', 'PYTEST_')) and k not in ('VIRTUAL_ENV', 'PYTHONPATH'))
    env['PATH'] = SYSTEM_PATH
    env.update(extra)
    return env


def make(*args, timeout=300):
    proc = subprocess.run(['make', '-C', REPO, '--no-print-directory'] + list(args), env=clean_env(),
                          capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, 'make %s: %s\n%s' % (' '.join(args), proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def processes_naming(text):
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % pid, 'rb') as handle:
                cmdline = handle.read().replace(b'\0', b' ').decode('utf-8', 'replace')
            with open('/proc/%s/stat' % pid) as handle:
                zombie = handle.read().rsplit(')', 1)[1].split()[0] == 'Z'
        except (OSError, IndexError):
            continue
        if text in cmdline and not zombie:
            found.append('%s %s' % (pid, cmdline))
    return found


class Sandbox:
    def __init__(self, directory):
        self.dir = str(directory)
        self.env_sh = os.path.join(self.dir, 'env.sh')
        self.started = []

    def start(self):
        out = make('try', 'TRY_DIR=%s' % self.dir, 'TRY_ARGS=--lifetime 3600')
        self.started.append(out)
        return out

    def fresh(self):
        """A sandbox as a new reader has it: stopped, then nothing left of an earlier page (try-stop keeps what a
        reader wrote there), then started."""
        make('try-stop', 'TRY_DIR=%s' % self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.start()

    def stop(self):
        return make('try-stop', 'TRY_DIR=%s' % self.dir)

    @property
    def info(self):
        with open(os.path.join(self.dir, 'sandbox.json')) as handle:
            return json.load(handle)

    @property
    def sim(self):
        return SimulatorClient(self.info['control_url'], timeout=10)

    def run(self, body, timeout=900, env=None):
        script = 'source %s >/dev/null\n%s\n' % (shlex.quote(self.env_sh), body)
        return subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', script], cwd=REPO, env=env or clean_env(),
                              capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)

    def standin_calls(self):
        with open(os.path.join(self.dir, 'standins.log')) as handle:
            return [json.loads(line)['argv'] for line in handle if line.strip()]

    def restarts(self):
        """The services restarted: a restart, or the start after a stop (the watchdog stops, waits for the memory,
        then starts); a stop alone is no restart."""
        return [argv[-1] for argv in self.standin_calls()
                if argv[:2] in (['systemctl', 'restart'], ['systemctl', 'start'])]

    def path(self, *parts):
        return os.path.join(self.dir, *parts)


@pytest.fixture(scope='module')
def sandbox(tmp_path_factory):
    taken = [port for port in range(PORTS[0], PORTS[0] + 11) if not bindable(port)]
    assert not taken, ('127.0.0.1 ports %s are in use: is a sandbox running (`make try-stop`)? This test needs '
                       '127.0.0.1:%d-%d' % (taken, PORTS[0], PORTS[1]))
    box = Sandbox(tmp_path_factory.mktemp('try'))
    try:
        yield box
    finally:
        if os.path.isdir(box.dir):
            box.stop()


def run_page(sandbox, page, before=None):
    """A fresh sandbox, then every block of the page in order; returns [(arg, body, proc)]."""
    sandbox.fresh()
    if before:
        before()
    found = blocks(page)
    assert found, '%s has no <!-- try --> blocks' % page
    results = []
    for arg, lang, body in found:
        if arg.startswith('write '):
            target = sandbox.path(arg.split(None, 1)[1])
            with open(target, 'w') as handle:
                handle.write(body + '\n')
            results.append((arg, body, None))
            continue
        assert lang in ('sh', 'bash', 'shell'), '%s: a <!-- try --> block must be sh: %r' % (page, body[:200])
        expected = int(arg.split()[1]) if arg.startswith('exit ') else 0
        assert arg == '' or arg.startswith('exit '), '%s: unknown marker argument %r' % (page, arg)
        proc = sandbox.run(body)
        assert proc.returncode == expected, '%s: exit %s (expected %s) for:\n%s\n--- stdout\n%s\n--- stderr\n%s' % (
            page, proc.returncode, expected, body, proc.stdout[-6000:], proc.stderr[-4000:])
        results.append((arg, body, proc))
    return results


def output_of(results, contains):
    """The stdout of the one block whose text contains ``contains``."""
    return proc_of(results, contains).stdout


def proc_of(results, contains):
    """The finished process of the one block whose text contains ``contains``."""
    found = [proc for arg, body, proc in results if proc is not None and contains in body]
    assert len(found) == 1, 'expected one block with %r, found %d' % (contains, len(found))
    return found[0]


def summary_lines(out):
    """The lines of a run with modelops.vllm.oneline (the sandbox's callback): no banner, no task line."""
    lines = out.strip().splitlines()
    assert not [line for line in lines if line.startswith(('PLAY ', 'TASK ', 'ok: [', 'skipping: [', 'changed: ['))], out
    return lines


def assert_untouched(sandbox, *names):
    sim = sandbox.sim
    for name in names:
        assert sim.get(name)['restarts'] == 0, name
        assert name not in ' '.join(sandbox.restarts()), sandbox.restarts()


def assert_nothing_sent(sandbox, *names):
    """No inference request reached these servers (the simulator counts every request it received)."""
    sim = sandbox.sim
    for name in names:
        counts = sim.request_counts(name)
        assert counts.get('GET /metrics'), (name, counts)  # they were checked ...
        assert not [key for key in counts if key.startswith('POST ')], (name, counts)  # ... and sent no inference


def test_pages_are_marked():
    """The pages run below are exactly the pages with <!-- try --> blocks: a page that gains some is
    added to PAGES (and gets a test of its own), one that loses them fails here."""
    marked = [os.path.relpath(path, REPO) for path in [os.path.join(REPO, 'README.md')]
              + sorted(glob.glob(os.path.join(REPO, 'docs', '*.md'))) if blocks(os.path.relpath(path, REPO))]
    assert marked == PAGES


def test_readme(sandbox):
    results = run_page(sandbox, 'README.md')
    out = output_of(results, 'modelops.vllm.check')
    for line in ('gb10-idle: idle - ', 'gb10-busy: busy - ', 'gb10-stuck: stuck - ', 'gb10-down: down - '):
        assert line in out, out[-3000:]
    # One line per server (6), the check's count and the hosts' total: nothing else (the sandbox's callback).
    lines = summary_lines(out)
    assert len(lines) == 8 and lines[-2].startswith('vLLM fleet check (host): 6 server(s): '), out
    assert lines[-1] == '6 host(s): 6 ok, 0 changed, 0 failed, 0 unreachable', out
    out = output_of(results, 'modelops.vllm.watchdog')
    assert 'gb10-stuck/vllm: stuck - watchdog: restarted' in out, out[-4000:]
    lines = summary_lines(out)
    # 5 + count + total + grep's two lines (the restart is a stop, the wait for the memory, a start)
    assert len(lines) == 9 and lines[5].startswith('vLLM watchdog: 5 instance(s): '), out
    assert lines[6] == '5 host(s): 4 ok, 1 changed, 0 failed, 0 unreachable', out
    assert '"argv": ["systemctl", "stop", "vllm-gb10-stuck"]' in lines[7], out[-2000:]  # grep
    assert '"argv": ["systemctl", "start", "vllm-gb10-stuck"]' in lines[8], out[-2000:]
    assert [line for line in lines if 'gb10-stuck/vllm: stuck - watchdog: restarted' in line][0].endswith(
        'no nvidia-smi]'), out  # what the evidence holds, taken before the restart
    assert sandbox.restarts() == ['vllm-gb10-stuck']
    assert_untouched(sandbox, 'gb10-busy', 'gb10-prefill', 'gb10-idle')
    assert_nothing_sent(sandbox, 'gb10-busy', 'gb10-prefill')


def test_adhoc(sandbox):
    results = run_page(sandbox, 'docs/adhoc.md')
    # The callback: the verdict's line, and nothing else; -v: the whole result.
    found = [proc.stdout for arg, body, proc in results
             if proc is not None and body.startswith('ansible gb10-busy ') and body.endswith("interval=2'")]
    assert len(found) == 1 and found[0].count('\n') == 1 and found[0].startswith('gb10-busy: busy - '), found
    out = output_of(results, "interval=2' -v")
    assert '\n    "line": "gb10-busy: busy - ' in out and '\n    "state": "busy",' in out, out[-3000:]
    lines = output_of(results, "-o | sed").splitlines()
    assert sorted(line.split(':')[0] for line in lines) == \
        ['gb10-busy', 'gb10-down', 'gb10-idle', 'gb10-prefill', 'gb10-stuck'], lines
    states = dict(line.split(' - ')[0].split(': ') for line in lines)
    # One short check without a memory cannot prove a hang: frozen, with how long (the default freeze limit, 300 s).
    assert states == {'gb10-busy': 'busy', 'gb10-down': 'down', 'gb10-idle': 'idle', 'gb10-prefill': 'busy',
                      'gb10-stuck': 'frozen'}, lines
    assert 'not yet proof of a hang, which takes 5m00s' in [line for line in lines if line.startswith('gb10-stuck:')][0]
    # Watching it to a limit of 10 s proves it.
    watched = output_of(results, 'freeze_limit=10 freeze_wait=10')
    assert watched.startswith('gb10-stuck: stuck - ') and 'past freeze_limit (10s)' in watched, watched
    assert [line for line in lines if line.startswith('gb10-prefill:')][0].endswith(
        '(kv_cache_usage_perc); no probe sent'), lines  # only the KV cache moved: a chunked prefill
    lines = summary_lines(output_of(results, 'check-line.yml'))
    assert len(lines) == 6 and [line for line in lines if line.startswith('gb10-busy: busy - ')], lines
    assert lines[-1] == '5 host(s): 5 ok, 0 changed, 0 failed, 0 unreachable', lines
    out = output_of(results, 'modelops.vllm.check')
    assert 'gb10-stuck: stuck - ' in out and 'llm-proxy: up - ' in out, out[-3000:]
    assert_nothing_sent(sandbox, 'gb10-busy', 'gb10-stuck', 'gb10-prefill')
    assert sandbox.sim.request_counts('gb10-idle').get('POST /v1/completions')  # the idle one got its probes
    assert sandbox.restarts() == []  # a check never restarts


def test_awx_without_awx(sandbox):
    results = run_page(sandbox, 'docs/awx.md')
    out = output_of(results, 'ansible-runner run')
    assert out.strip().endswith('successful'), out[-3000:]
    # ansible-runner prints through the callback of ANSIBLE_STDOUT_CALLBACK (as the execution environment sets
    # it): one line per instance, the count, the total, then cat's `successful`.
    lines = summary_lines(out)
    assert len(lines) == 8 and lines[-3].startswith('vLLM watchdog: 5 instance(s): '), out[-3000:]
    assert 'gb10-busy/vllm: busy - watchdog: no action (busy: nothing to do)' in out, out[-5000:]
    assert 'gb10-stuck/vllm: stuck - watchdog: restarted (restart: stuck' in out, out[-5000:]
    artifacts = json.loads(output_of(results, 'playbook_on_stats'))
    reasons = artifacts.pop('vllm_watchdog_reasons')
    assert artifacts == {'vllm_watchdog_counts': {'busy': 2, 'down': 1, 'idle': 1, 'stuck': 1},
                         'vllm_watchdog_needs_human': [], 'vllm_watchdog_rebooted': [],
                         'vllm_watchdog_restarted': ['gb10-stuck/vllm'],
                         'vllm_watchdog_unreachable': []}
    # Why, for the one it restarted: the verdict's reason, the decision, what came of it, the evidence.
    assert list(reasons) == ['gb10-stuck/vllm'], reasons
    assert re.match(r'^stuck: 2 request\(s\) in flight and no counter or KV-cache gauge moved .* - watchdog: restarted '
                    r'\(restart: stuck; .* \(restart 1 of at most 3 in 24h00m, a failed one counted too\)\) -> now idle '
                    r'\[evidence \S+/state/gb10-stuck/'
                    r'evidence/vllm-\d{8}T\d{6}Z\.json\]$', reasons['gb10-stuck/vllm']), reasons
    assert sandbox.restarts() == ['vllm-gb10-stuck']  # once, by the stand-in systemctl
    assert sandbox.sim.get('gb10-stuck')['restarts'] == 1
    assert_untouched(sandbox, 'gb10-busy', 'gb10-prefill', 'gb10-idle')
    assert_nothing_sent(sandbox, 'gb10-busy', 'gb10-prefill')


def test_fleet(sandbox):
    results = run_page(sandbox, 'docs/fleet.md')
    controller = [proc.stdout for arg, body, proc in results if body.endswith('modelops.vllm.fleet_check')]
    assert len(controller) == 1
    for out in (controller[0], output_of(results, 'vllm_check_from=host')):
        for line in ('gb10-busy: busy - ', 'gb10-stuck: stuck - ', 'gb10-down: down - ', 'llm-proxy: up - '):
            assert line in out, out[-3000:]
    assert 'llm-proxy: up - ' in output_of(results, 'kind=proxy')
    with open(sandbox.path('nginx', 'access.log')) as handle:
        through_proxy = set('%s %s' % (e['method'], e['uri']) for e in map(json.loads, handle) if e)
    assert through_proxy == {'GET /v1/models'}  # a proxy is asked for its models, nothing else
    assert_nothing_sent(sandbox, 'gb10-busy', 'gb10-stuck', 'gb10-prefill')
    assert sandbox.restarts() == []

    # Misspelled variables are named, once each, with the closest known name; the check still reports.
    said = proc_of(results, 'vllm_check_intervl=1').stderr
    for typo, meant in (('vllm_check_intervl', 'vllm_check_interval'), ('vllm_ulr', 'vllm_url')):
        assert said.count('[WARNING]: %s (set on gb10-idle, ' % typo) == 1, said
        assert '%s is not a variable of modelops.vllm' % typo not in said  # the hosts are named, in one line
        assert 'so nothing reads it: did you mean %s?' % meant in said, said
    # A bad value: one line, the host failed, nothing else run for it.
    lines = summary_lines(output_of(results, 'restart_method=dokcer'))
    assert lines == ['gb10-busy: FAILED: value of vllm_watchdog_restart_method must be one of: systemd, docker, '
                     'compose, command, got: dokcer',
                     '1 host(s): 0 ok, 0 changed, 1 failed, 0 unreachable; failed: gb10-busy'], lines
    # No host matched: red, naming the pattern and the inventory (ours), or Ansible's own error (unparsed_is_failed).
    lines = summary_lines(output_of(results, 'vllm_watchdog_hosts=gb10'))
    assert lines[0] == ('localhost: FAILED: No host to watch: the host pattern "gb10" (vllm_watchdog_hosts) matches '
                        'no host of the inventory %s, whose groups are vllm, vllm_proxies (6 host(s))'
                        % sandbox.path('inventory')), lines
    assert 'No inventory was parsed' in proc_of(results, 'cd /tmp &&').stderr


def test_prometheus_page(sandbox):
    """docs/prometheus.md in the sandbox: the rules rendered and checked, their unit tests, the Alertmanager
    routes checked by amtool, the watchdog's textfile read by promtool, and a missing directory said."""
    results = run_page(sandbox, 'docs/prometheus.md')
    rules = sandbox.path('rules', 'vllm.rules.yml')
    with open(rules) as handle:
        text = handle.read()
    assert '[30s]' in text and 'no progress for 10m' in text, text[:2000]  # the -e settings were used
    assert 'SUCCESS' in output_of(results, 'promtool check rules'), results
    assert 'SUCCESS' in output_of(results, 'promtool test rules'), results
    out = output_of(results, 'amtool check-config')
    assert 'SUCCESS' in out and out.count('vllm-watchdog') >= 2, out
    stuck = open(sandbox.path('textfile', 'gb10-stuck.prom')).read()
    assert 'vllm_watchdog_action{vllm_instance="vllm",action="restart"} 1' in stuck, stuck
    busy = open(sandbox.path('textfile', 'gb10-busy.prom')).read()
    assert 'state="busy"} 1' in busy and 'action="none"} 1' in busy, busy
    out = output_of(results, '/nonexistent/')
    # One mistake, one line: the hosts that share it, in one failure naming the directory.
    said = [line for line in out.splitlines() if '/nonexistent' in line]
    assert len(said) == 1 and ': FAILED: the textfile /nonexistent/vllm_watchdog.prom could not be written (its ' \
        'directory /nonexistent does not exist)' in said[0], out[-3000:]
    assert 'textfile not written: gb10-idle, ' in out, out[-3000:]
    assert sandbox.restarts() == ['vllm-gb10-stuck']  # the first watchdog run's, once


def test_try_reset_starts_the_sandbox_afresh_and_keeps_what_the_user_wrote(sandbox):
    """try_reset (env.sh) puts every server back in its first state, removes the watchdog's state and the
    stand-ins' log, and leaves the shell in the sandbox; a page can then be followed from its start. What the
    user wrote there (the pages have them write playbooks, ansible-runner's runner/ and its artifacts, rules/,
    textfile/) stays, and still runs; make try-stop keeps it too, and says so."""
    sandbox.fresh()
    adhoc = dict((arg, body) for arg, lang, body in blocks('docs/adhoc.md'))
    awx = [body for arg, lang, body in blocks('docs/awx.md') if 'ansible-runner run' in body]
    assert len(awx) == 1
    with open(sandbox.path('check-line.yml'), 'w') as handle:  # the adhoc page's playbook, as its reader wrote it
        handle.write(adhoc['write check-line.yml'] + '\n')
    proc = sandbox.run(awx[0] + '\n'  # an ansible-runner job: its project, its artifacts
                       'echo\n'  # the runner's status file has no line break
                       'ls state/gb10-stuck/vllm.json\n'
                       'try_reset\n'
                       'pwd\n'
                       'ls state\n'
                       'wc -c < standins.log\n'
                       'cat runner/artifacts/watchdog-1/status; echo\n'
                       'ansible-playbook -i inventory check-line.yml --limit gb10-stuck\n'
                       'ansible-playbook -i inventory modelops.vllm.check')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    at = lines.index('state/gb10-stuck/vllm.json')
    assert lines[at + 1:at + 4] == [sandbox.dir, '0', 'successful'], lines  # pwd, no state (ls: nothing), an empty log
    assert [line for line in lines if line.startswith('gb10-stuck: stuck - ')], lines  # the user's playbook, afresh
    assert 'gb10-stuck: stuck - ' in proc.stdout, proc.stdout  # hung again: the reset's, not the restarted one
    assert sandbox.restarts() == []
    assert sandbox.sim.get('gb10-stuck')['restarts'] == 0
    mine = sorted(name for name in os.listdir(sandbox.dir) if not name.startswith(('standins.', 'sandbox.')))
    assert {'check-line.yml', 'runner'} <= set(mine), mine
    assert os.path.isdir(sandbox.path('runner', 'artifacts', 'watchdog-1', 'job_events'))
    out = sandbox.stop()
    assert out.strip().endswith('kept yours: check-line.yml, runner'), out
    assert sorted(os.listdir(sandbox.dir)) == ['check-line.yml', 'runner']  # the sandbox's own files are gone
    out = sandbox.start()  # a sandbox again, beside them
    assert out.strip().splitlines()[-1] == 'source %s' % sandbox.env_sh and os.path.isfile(sandbox.path('check-line.yml'))


def test_local_timer_page(sandbox):
    """docs/local.md in the sandbox: the timer installed under .cache/try/local/, its service started as systemd
    would (it restarts gb10-stuck, through the stand-ins), its state with the restart and why, an unknown unit
    refused, then removed."""
    results = run_page(sandbox, 'docs/local.md')
    out = output_of(results, 'modelops.vllm.local_install -e vllm_url=')
    lines = summary_lines(out)
    assert lines[0].startswith('spark-01: the watchdog runs *:0/5 (OnCalendar) as ') and 'restarting vllm-gb10-stuck.service' \
        in lines[0], lines
    assert '[Timer]\nOnCalendar=*:0/5\n' in out, out
    journal = output_of(results, 'journalctl -u vllm-watchdog')
    assert re.search(r'spark-01/vllm: stuck - watchdog: restarted \(restart: stuck; the systemd unit vllm-gb10-stuck: '
                     r'.* \(restart 1 of at most 3 in 24h00m, a failed one counted too\)\) -> now idle', journal), journal
    lines = summary_lines(output_of(results, 'modelops.vllm.local_status'))
    assert re.match(r'^vllm-watchdog\.timer: enabled and active; the last run \S+Z \(success\); the next \S+Z$', lines[0]), lines
    restart = [line for line in lines if 'watchdog: restart (' in line]
    assert len(restart) == 1 and restart[0].startswith('spark-01/vllm: ') and \
        ' stuck - 2 request(s) in flight and no counter or KV-cache gauge moved' in restart[0], lines
    refused = proc_of(results, 'vllm_watchdog_service=vllm-qwen').stdout
    assert summary_lines(refused)[0].startswith('localhost: FAILED: vllm-qwen.service is not a unit of this host '
                                                '(systemctl show vllm-qwen.service: LoadState=not-found)'), refused
    removed = summary_lines(output_of(results, 'modelops.vllm.local_remove'))
    assert removed[0].startswith('spark-01: removed %s/etc/systemd/system/vllm-watchdog.timer, ' % sandbox.path('local'))
    assert not os.path.exists(sandbox.path('local', 'etc', 'systemd', 'system', 'vllm-watchdog.timer'))
    assert os.path.isfile(sandbox.path('local', 'var', 'lib', 'vllm-watchdog', 'vllm.verdicts.jsonl'))  # kept
    # gb10-stuck restarted once, by the timer's run; the timer itself enabled, started, then stopped, disabled
    assert [name for name in sandbox.restarts() if name.startswith('vllm-gb10')] == ['vllm-gb10-stuck']
    assert sandbox.sim.get('gb10-stuck')['restarts'] == 1
    assert_untouched(sandbox, 'gb10-busy', 'gb10-prefill', 'gb10-idle')


def test_rollout(sandbox):
    results = run_page(sandbox, 'docs/rollout.md')
    restarts = sandbox.restarts()
    # the rolling restart and the upgrade of gb10-idle; --check restarts nothing; gb10-busy is never cut off
    assert restarts == ['vllm-gb10-idle', 'vllm-gb10-idle'], restarts
    reloads = [argv for argv in sandbox.standin_calls() if argv[:2] == ['systemctl', 'daemon-reload']]
    assert len(reloads) == 1, reloads  # the upgrade's, before its restart
    with open(sandbox.path('systemd', 'vllm-gb10-idle.service.d', 'rollout.conf')) as handle:
        assert 'VLLM_IMAGE=vllm/vllm-openai:v0.11.0' in handle.read()
    out = output_of(results, 'vllm_rollout_idle_timeout=10')
    assert 'gb10-busy' in out and 'idle' in out, out[-3000:]
    assert_untouched(sandbox, 'gb10-busy')
    assert not os.path.exists(sandbox.path('state', 'gb10-busy', 'paused'))  # untouched: its watchdog resumed
    assert not os.path.exists(sandbox.path('state', 'gb10-idle', 'paused'))
    assert_nothing_sent(sandbox, 'gb10-busy')


# ------------------------------------------------------------------------------- docs/schedule.md

COMMAND_PATHS = ('/opt/vllm-watchdog', '/var/log/vllm-watchdog')


def cron_parts():
    """(user, command) of docs/schedule.md's /etc/cron.d line."""
    found = examples('docs/schedule.md')
    lines = [line for line in found['cron'].splitlines() if line.strip() and not line.startswith('#')
             and not re.match(r'^\w+=', line)]
    assert len(lines) == 1, lines
    fields = lines[0].split(None, 6)
    assert fields[:5] == ['*/5', '*', '*', '*', '*'], fields
    return fields[5], fields[6]


def unit(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(examples('docs/schedule.md')[name])
    return parser


def controller_layout(tmp_path, sandbox):
    """docs/schedule.md's /opt/vllm-watchdog, in a temporary directory: its ansible.cfg as written,
    the sandbox's inventory, the collection (this checkout) and a venv with ansible-core."""
    home = tmp_path / 'opt' / 'vllm-watchdog'
    home.mkdir(parents=True)
    (tmp_path / 'log').mkdir()
    (home / 'ansible.cfg').write_text(examples('docs/schedule.md')['ansible-cfg'] + '\n')
    os.symlink(sandbox.path('inventory'), str(home / 'inventory'))
    os.symlink(os.path.join(REPO, '.cache', 'collections'), str(home / 'collections'))
    os.symlink(sys.prefix, str(home / 'venv'))  # the venv the tests run in (make's VENV)
    return {'/opt/vllm-watchdog': str(home), '/var/log/vllm-watchdog': str(tmp_path / 'log')}


def replace_paths(text, mapping):
    for old, new in mapping.items():
        assert old in text, (old, text)
        text = text.replace(old, new)
    return text


def test_schedule(sandbox, tmp_path):
    mapping = {}

    def cron_run():
        """The cron line's command as cron runs it: sh -c, cron's environment (PATH=/usr/bin:/bin,
        plus the stand-ins, which take the place of systemctl), docs/schedule.md's paths moved into a
        temporary directory."""
        mapping.update(controller_layout(tmp_path, sandbox))
        user, command = cron_parts()
        assert user == 'vllm-watchdog'
        env = {'HOME': os.environ.get('HOME', '/root'), 'LOGNAME': 'root', 'SHELL': '/bin/sh',
               'PATH': os.path.join(REPO, 'tests', 'standins') + ':/usr/bin:/bin',
               'MODELOPS_STANDIN_CONFIG': sandbox.path('standins.json'),
               'MODELOPS_STANDIN_LOG': sandbox.path('standins.log')}
        proc = subprocess.run(['/bin/sh', '-c', replace_paths(command, mapping)], env=env, capture_output=True,
                              text=True, timeout=600, check=False, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0 and proc.stdout == '' and proc.stderr == '', proc
        log = os.path.join(mapping['/var/log/vllm-watchdog'], 'watchdog.log')
        with open(log) as handle:
            text = handle.read()
        assert re.search(r'vLLM watchdog: 5 instance\(s\): 2 busy, 1 down, 1 idle, 1 stuck; restarted: '
                         r'gb10-stuck/vllm', text), text[-4000:]
        assert 'gb10-busy/vllm: busy - watchdog: no action' in text
        assert sandbox.restarts() == ['vllm-gb10-stuck']
        assert_untouched(sandbox, 'gb10-busy')

    results = run_page(sandbox, 'docs/schedule.md', before=cron_run)

    # The watchdog's runs on gb10-busy: the cron run (busy), the page's first run (busy), then the
    # page hangs it and the second run finds it stuck and restarts it.
    assert sandbox.restarts() == ['vllm-gb10-stuck', 'vllm-gb10-busy']
    history_path = sandbox.path('state', 'gb10-busy', 'vllm.verdicts.jsonl')
    with open(history_path) as handle:
        history = [json.loads(line) for line in handle]
    # Three runs, then the line of the restart's outcome (the check after it).
    assert [(v['state'], v['action']) for v in history[:3]] == [('busy', 'none'), ('busy', 'none'), ('stuck', 'restart')]
    assert len(history) == 4 and history[3]['step'] and history[3]['action'] == 'restarted', history
    assert history[3]['outcome'] == 'now %s (%s)' % (history[3]['state'], history[3]['reason']), history
    restart = history[2]
    last10 = output_of(results, 'tail -n 10').splitlines()
    assert len(last10) == 4 and last10[2].startswith(restart['time'] + ' stuck restart: '), last10
    assert last10[3].startswith(history[3]['time'] + ' %s restarted: ' % history[3]['state']), last10
    assert output_of(results, '"busy" and').strip() == restart['time']
    assert output_of(results, 'select(.action == "restart")').strip() == '%s %s' % (restart['time'], restart['decision'])
    assert output_of(results, 'group_by').split() == ['busy', '2', 'stuck', '1']
    assert len(output_of(results, 'ls -r').splitlines()) == 4  # the three runs and the restart's outcome
    out = output_of(results, 'ansible vllm -i inventory -b')
    for host in ('gb10-idle', 'gb10-busy', 'gb10-prefill', 'gb10-stuck', 'gb10-down'):
        assert '%s | CHANGED | rc=0 >>' % host in out, out[-3000:]
    # gb10-busy's restart, before the line of its outcome; gb10-stuck's restart (the cron run) is three lines back
    assert out.count('"state": "stuck"') == 1 and out.count('"action": "restarted"') == 2, out
    # The history playbook says the same in words: the two busy runs as one line, the restart with its reason, its
    # decision and its evidence, the counts, the fleet.
    said = summary_lines(output_of(results, 'modelops.vllm.history --limit gb10-busy'))
    assert len(said) == 5 and said[-1] == '1 host(s): 1 ok, 0 changed, 0 failed, 0 unreachable', said
    assert said[0].startswith('gb10-busy/vllm: %s busy - %s' % (history[0]['time'], history[1]['reason'][:200]))
    assert said[0].endswith(' [2 runs, the last %s]' % history[1]['time']), said
    assert said[1].startswith('gb10-busy/vllm: %s stuck - %s' % (history[2]['time'], history[2]['reason'][:200])), said
    assert '; watchdog: restart (%s' % history[2]['decision'][:200] in said[1], said
    # What came of the restart: the outcome the role recorded when it checked again.
    assert re.search(r' -> now \w+ \(.*\) \[evidence %s/vllm-\d{8}T\d{6}Z\.json\]$'
                     % re.escape(sandbox.path('state', 'gb10-busy', 'evidence')), said[1]), said
    assert said[2].startswith('gb10-busy/vllm: 3 run(s) since ') and ': 2 busy, 1 stuck; 1 restart(s)' in said[2], said
    assert said[3].endswith('1 instance(s) on 1 host(s), 3 run(s); restarts: gb10-busy/vllm (1); host reboots: none; '
                            'asked a human: none; not read: none'), said
    lead_up = output_of(results, 'recent_verdicts').splitlines()
    assert [line.split()[1:] for line in lead_up] == [['busy', 'none'], ['busy', 'none'], ['stuck', 'restart']]

    # The systemd pair runs the very command of the cron line, as the same user, into the same log.
    user, command = cron_parts()
    argv = shlex.split(command)
    assert argv[:2] == ['cd', '/opt/vllm-watchdog'] and argv[2] == '&&', argv
    assert argv[3:6] == ['flock', '-n', '.watchdog.lock'], argv
    redirect = argv.index('>>')
    assert argv[redirect + 2:] == ['2>&1'], argv
    service = unit('systemd-service')['Service']
    assert service['Type'] == 'oneshot'
    assert service['User'] == user
    assert service['WorkingDirectory'] == argv[1]
    exec_start = shlex.split(service['ExecStart'])
    assert exec_start == [os.path.join(argv[1], argv[6])] + argv[7:redirect], (exec_start, argv)
    assert service['StandardOutput'] == 'append:' + argv[redirect + 1]
    assert service['StandardError'] == 'inherit'
    timer = unit('systemd-timer')
    assert timer['Timer']['OnCalendar'] == '*:0/5'  # cron's */5 * * * *
    assert timer['Install']['WantedBy'] == 'timers.target'
    # systemd's own check of the pair, with the paths moved to the temporary layout (verify wants
    # ExecStart to exist).
    units = tmp_path / 'units'
    units.mkdir()
    for name, filename in (('systemd-service', 'vllm-watchdog.service'), ('systemd-timer', 'vllm-watchdog.timer')):
        (units / filename).write_text(replace_paths(examples('docs/schedule.md')[name], {
            k: v for k, v in mapping.items() if k in examples('docs/schedule.md')[name]}) + '\n')
    analyze = shutil.which('systemd-analyze', path=SYSTEM_PATH)
    assert analyze, 'systemd-analyze is missing: scripts/ensure-tools.sh installs it (Debian package systemd)'
    proc = subprocess.run([analyze, 'verify', str(units / 'vllm-watchdog.service'), str(units / 'vllm-watchdog.timer')],
                          capture_output=True, text=True, timeout=120, check=False)
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if 'vllm-watchdog' in line]  # unknown keys
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr
    calendar = subprocess.run([analyze, 'calendar', timer['Timer']['OnCalendar']], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    assert 'Normalized form: *-*-* *:00/5:00' in calendar, calendar


def test_schedule_history_commands_survive_a_cut_line(tmp_path):
    """docs/schedule.md's commands that read a verdict history, as written, on a history whose line was cut
    (a crash, a full disk) and the line the next run appended after it (append_line starts it on a line of
    its own): each still exits 0, skips the cut line and reads every whole record after it, the restart's
    own among them; the page's command for damaged lines names it. No sandbox: the commands read files."""
    state = tmp_path / 'state' / 'gb10-busy'
    (state / 'evidence').mkdir(parents=True)
    records = [{'time': '2026-12-01T11:40:00Z', 'state': 'busy', 'action': 'none', 'reason': 'r1', 'decision': 'd1',
                'running': 3, 'steps_per_second': 4.0},
               {'time': '2026-12-01T11:42:15Z', 'state': 'busy', 'action': 'none', 'reason': 'r2', 'decision': 'd2',
                'running': 3, 'steps_per_second': 4.0},
               {'time': '2026-12-01T11:42:31Z', 'state': 'stuck', 'action': 'restart', 'reason': 'r3',
                'decision': 'stuck: restart', 'running': 3, 'steps_per_second': 0.0}]
    cut = json.dumps(dict(records[1], time='2026-12-01T11:41:00Z'))[:40]
    (state / 'vllm.verdicts.jsonl.1').write_text(json.dumps(records[0]) + '\n')
    (state / 'vllm.verdicts.jsonl').write_text(cut + '\n' + json.dumps(records[1]) + '\n' + json.dumps(records[2]) + '\n')
    (state / 'evidence' / 'vllm-20261201T114231Z.json').write_text(json.dumps({'recent_verdicts': records[1:]}))
    found = [body for arg, lang, body in blocks('docs/schedule.md')
             if 'verdicts' in body and not body.lstrip().startswith(('ansible', 'curl'))]
    assert len(found) == 7, found
    outputs = {}
    for body in found:
        proc = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', body], cwd=str(tmp_path), env=clean_env(),
                              capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0 and not proc.stderr, (body, proc.stdout, proc.stderr)
        outputs[body] = proc.stdout

    def out(contains):
        return [text for body, text in outputs.items() if contains in body][0]

    assert out('tail -n 10').splitlines() == ['2026-12-01T11:42:15Z busy none: r2', '2026-12-01T11:42:31Z stuck restart: r3']
    assert out('"busy" and').strip() == '2026-12-01T11:42:31Z'
    assert out('select(.action == "restart")').strip() == '2026-12-01T11:42:31Z stuck: restart'
    assert out('group_by').split() == ['busy', '1', 'stuck', '1']
    assert [json.loads(line)['time'] for line in out('ls -r').splitlines()] == [r['time'] for r in records]
    assert out('input_line_number').strip() == 'line 1: %s' % cut
    assert out('recent_verdicts').split() == ['2026-12-01T11:42:15Z', 'busy', 'none', '2026-12-01T11:42:31Z', 'stuck',
                                              'restart']


# --------------------------------------------------------------------------------- make try itself

def test_try_twice_then_stop(sandbox):
    first = sandbox.fresh()
    assert first.strip().splitlines()[-1] == 'source %s' % sandbox.env_sh, first
    pid = sandbox.info['simulator_pid']
    with open(sandbox.env_sh) as handle:
        env_before = handle.read()
    second = sandbox.start()
    assert 'runs already' in second and second.strip().splitlines()[-1] == 'source %s' % sandbox.env_sh
    assert sandbox.info['simulator_pid'] == pid
    with open(sandbox.env_sh) as handle:
        assert handle.read() == env_before
    assert len(sandbox.sim.list()) == 4
    # the state dir the watchdog uses may not be group or world writable
    assert os.stat(sandbox.path('state')).st_mode & 0o022 == 0
    # the line is all a shell needs: the collection, the interpreter, the stand-ins
    proc = sandbox.run('pwd; ansible-doc -t module modelops.vllm.health | head -n 1; command -v systemctl; '
                       'echo "$ANSIBLE_PYTHON_INTERPRETER"; "$ANSIBLE_PYTHON_INTERPRETER" -c "import requests"')
    assert proc.returncode == 0, proc.stderr
    lines = re.sub(r'\x1b\[[0-9;]*m', '', proc.stdout).splitlines()  # ansible-doc's bold
    assert lines[0] == sandbox.dir
    assert lines[1].startswith('> MODULE modelops.vllm.health'), lines
    assert lines[2] == os.path.join(REPO, 'tests', 'standins', 'systemctl')
    assert processes_naming(sandbox.dir)
    out = sandbox.stop()
    assert 'stopped' in out, out
    assert not os.path.exists(sandbox.dir)
    deadline = time.monotonic() + 10
    while processes_naming(sandbox.dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_naming(sandbox.dir) == []
    assert all(bindable(port) for port in range(PORTS[0], PORTS[0] + 11))
    assert 'no sandbox' in sandbox.stop()  # stopping twice is fine
    assert glob.glob(os.path.join(sandbox.dir, '*')) == []
