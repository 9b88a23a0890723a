"""Issue 26, the restart side: what the watchdog remembers and collects cannot stop a server, reboot a host, or swell
past its bounds.

* a memory baseline that cannot be trusted (garbage, deep nesting, more than this host has, of another host, size or
  boot, from the future) is no threshold: never a reason to keep vLLM stopped, and never a traceback;
* a kernel line whose time cannot be true (in the future, before the boot) never counts as "since vLLM started";
* the output of a command is read with its tail kept while reading: constant memory whatever it prints;
* a stack dump only of processes proven to be the service's.

Each class is tried with several spellings; the assertions are the invariants, not today's words alone.
"""

import json
import os
import random
import resource
import subprocess
import sys
import time

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _decide, _evidence, _host
from ansible_collections.modelops.vllm.plugins.module_utils._service import TailBuffer, run_argv

from tests.support.paths import COLLECTIONS
from tests.unit.plugins.module_utils.test_gate import (  # noqa: F401  pylint: disable=unused-import
    SERVING, START, item, make, served, systemd)

GiB = 1024 * 1024  # kB
NOW = 1796004614.0
HOST = 'spark-01'
BOOT = '0b0e6c1a-8f0e-4a53-9f5e-2f0c8a1d2b3c'
TOTAL = 125 * GiB


def good(**over):
    return dict(_host.baseline_record(100 * GiB, TOTAL, BOOT, HOST, NOW - 3600), **over)


# --------------------------------------------------------------------------- the memory baseline

GARBAGE = [
    # Nested past Python's recursion limit within the 4 KB a baseline may have (the traceback of issue 26).
    ('deeply nested lists', '[' * 2040 + ']' * 2040),
    ('deeply nested lists and objects', '[{"":' * 575 + '1' + '}]' * 575),
    ('nesting cut short', '[' * 4000),
    ('empty', ''),
    ('blank', '   \n'),
    ('null', 'null'),
    ('a list', '[{"available_kb": 1000}]'),
    ('a string', '"available_kb"'),
    ('binary', '\x00\xff\xfe' * 100),
    ('NaN', '{"available_kb": NaN}'),
    ('Infinity', '{"available_kb": Infinity}'),
    ('a boolean', '{"available_kb": true}'),
    ('negative', '{"available_kb": -1}'),
    ('a string number', '{"available_kb": "100000000"}'),
    ('a nested number', '{"available_kb": {"kb": 1}}'),
    ('1e300', '{"available_kb": 1e300}'),
]


@pytest.mark.parametrize('name, text', GARBAGE, ids=[g[0] for g in GARBAGE])
def test_a_baseline_that_is_garbage_is_never_trusted_and_never_raises(tmp_path, name, text):
    path = tmp_path / 'vllm.memory.json'
    path.write_text(text, encoding='utf-8', errors='surrogateescape')
    baseline, why = _host.read_baseline(str(path), TOTAL, BOOT, HOST, NOW)
    assert baseline is None and why, (name, why)
    assert 'larger than' not in why  # each is read, and found wanting
    kb, words = _host.memory_threshold(0, 0.9, baseline, why, str(path))
    assert kb is None  # no threshold: vLLM is started, never held stopped by it
    assert str(path) in words and 'not trusted' in words, words


def test_a_baseline_file_that_is_not_a_plain_small_file_is_not_trusted(tmp_path):
    big = tmp_path / 'big.json'
    big.write_text(json.dumps(good(pad='x' * 10000)))
    link = tmp_path / 'link.json'
    link.symlink_to(tmp_path / 'elsewhere.json')
    (tmp_path / 'elsewhere.json').write_text(json.dumps(good()))
    fifo = tmp_path / 'fifo.json'
    os.mkfifo(str(fifo))
    directory = tmp_path / 'dir.json'
    directory.mkdir()
    for path in (big, link, fifo, directory):
        started = time.monotonic()
        baseline, why = _host.read_baseline(str(path), TOTAL, BOOT, HOST, NOW)
        assert baseline is None and why, (path, why)
        assert time.monotonic() - started < 5  # a FIFO never blocks the restart
    assert _host.read_baseline(str(tmp_path / 'missing.json'), TOTAL, BOOT, HOST, NOW) == (None, None)
    assert _host.read_baseline(None, TOTAL, BOOT, HOST, NOW) == (None, None)


UNTRUSTED = [
    # (name, the baseline, this host's MemTotal, words of the reason)
    ('480 GiB on a 125 GiB host', good(available_kb=480 * GiB, total_kb=512 * GiB), TOTAL, 'more than this host has'),
    ('more than MemTotal, with this host\'s total', good(available_kb=126 * GiB), TOTAL, 'more than this host has'),
    ('written on a bigger host', good(total_kb=512 * GiB), TOTAL, 'written on a host with 512.0 GiB'),
    ('written on a smaller host', good(available_kb=10 * GiB, total_kb=64 * GiB), TOTAL, 'a host with 64.0 GiB'),
    ('another host', good(host='spark-02'), TOTAL, 'another host'),
    ('another boot', good(boot_id='another-boot'), TOTAL, 'another boot'),
    ('no boot id', dict((k, v) for k, v in good().items() if k != 'boot_id'), TOTAL, 'another boot'),
    ('an older version\'s (available_kb and at only)', {'available_kb': 100 * GiB, 'at': NOW - 60}, TOTAL,
     'does not say how much memory'),
    ('from the future', good(at=4070908800.0), TOTAL, 'in the future'),
    ('no time', good(at=None), TOTAL, 'no time'),
    ('MemTotal unreadable here', good(), None, 'MemTotal cannot be read'),
]


@pytest.mark.parametrize('name, baseline, total, words', UNTRUSTED, ids=[u[0] for u in UNTRUSTED])
def test_a_baseline_that_does_not_fit_this_host_is_not_trusted(tmp_path, name, baseline, total, words):
    path = tmp_path / 'vllm.memory.json'
    path.write_text(json.dumps(baseline))
    trusted, why = _host.read_baseline(str(path), total, BOOT, HOST, NOW)
    assert trusted is None and words in why, (name, why)
    kb, said = _host.memory_threshold(0, 0.9, trusted, why, str(path))
    assert kb is None and why in said and str(path) in said


def test_a_baseline_of_this_host_and_boot_is_trusted_and_an_explicit_threshold_wins(tmp_path):
    path = tmp_path / 'vllm.memory.json'
    path.write_text(json.dumps(good()))
    baseline, why = _host.read_baseline(str(path), TOTAL + 1000, BOOT, HOST, NOW)  # MemTotal moves a little
    assert why is None and baseline['available_kb'] == 100 * GiB
    kb, words = _host.memory_threshold(0, 0.9, baseline, why, str(path))
    assert kb == int(90 * GiB) and str(path) in words
    assert _host.memory_threshold(1024, 0.9, None, 'garbage', str(path))[0] == 1024 * 1024


# --------------------------------------------------------------------------- kernel lines from the future

XID = 'NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=python3, Ch 00000008'


def future_spellings(now):
    return [
        ('ISO 2099', '2099-01-01T00:00:00+0000 spark kernel: %s' % XID),
        ('ISO 2099, Z', '2099-06-30T12:00:00.123456Z spark kernel: %s' % XID),
        ('epoch 2099', '4070908800.000000 spark kernel: %s' % XID),
        ('an hour ahead', '%.6f spark kernel: %s' % (now + 3600, XID)),
        ('kmsg far past the boot', '4,1234,%d,-;%s' % (10 ** 15, XID)),
        ('dmesg far past the boot', '[%d.000000] %s' % (10 ** 9, XID)),
        ('before the boot (1999)', '1999-01-01T00:00:00+0000 spark kernel: %s' % XID),
    ]


def test_kernel_lines_whose_time_cannot_be_true_are_kept_apart_and_never_counted():
    now = time.time()
    boot = _host.boot_epoch(now)
    spellings = future_spellings(now)
    matches = _host.kernel_matches([line for dummy, line in spellings], boot, now)
    assert len(matches) == len(spellings)
    for (name, dummy), match in zip(spellings, matches):
        assert match['kind'] == 'xid' and match.get('ignored'), (name, match)
    assert _decide.gpu_errors(matches, boot, now) == []
    # A true line beside them counts.
    true = _host.kernel_matches(['%.6f spark kernel: %s' % (now - 30, XID)], boot, now)
    assert not true[0].get('ignored') and len(_decide.gpu_errors(true, now - 60, now)) == 1


def test_a_line_stamped_2099_given_straight_to_the_decision_is_ignored_too():
    """Whoever read the kernel log (an older reader, a test): the decision itself never counts a time in the future."""
    line = {'time': 4070908800.0, 'kind': 'xid', 'line': XID}
    assert _decide.gpu_errors([line], NOW - 86400, NOW) == []
    assert _decide.impossible_gpu_lines([line], NOW)[0][1] == 'its time is in the future'


def _decide_stuck(kernel, reboot):
    history = {'restarts': [], 'unknown_streak': 0, 'healthy': {'at': NOW - 3000, 'start': NOW - 7200}}
    return _decide.decide('stuck', {'running': True, 'started_at': NOW - 7200}, history, NOW,
                          dict(_decide.DEFAULTS, reboot=reboot), process_start=NOW - 7200, url='http://x:1',
                          url_proof={'given': True}, kernel=kernel)


@pytest.mark.parametrize('reboot', [True, False])
def test_a_kernel_line_from_the_future_never_decides_a_reboot_and_the_reason_says_it_was_ignored(reboot):
    now = NOW
    for name, text in future_spellings(now):
        if 'boot' in name:
            continue  # relative to the boot: the reader's test above
        when, dummy = _host.parse_kernel_line(text, now - 7200)
        kernel = [{'time': when, 'kind': 'xid', 'line': XID}]
        out = _decide_stuck(kernel, reboot)
        assert out['action'] == _decide.RESTART, (name, out['reason'])
        assert 'ignored: their time cannot be true' in out['reason'], (name, out['reason'])
        assert out['gpu_errors'] == []
    # The look-alike: the same line stamped a minute ago is the GPU's trouble, not a vLLM restart.
    real = _decide_stuck([{'time': now - 60, 'kind': 'xid', 'line': XID}], reboot)
    assert real['action'] == (_decide.REBOOT if reboot else _decide.FAIL), real['reason']


def test_the_evidence_keeps_the_impossible_lines_apart_with_why(tmp_path):
    now = time.time()
    log = tmp_path / 'kern.log'
    texts = [text for dummy, text in future_spellings(now)] + ['%.6f spark kernel: %s' % (now - 30, XID)]
    log.write_text('\n'.join(texts) + '\n')
    read = _host.read_kernel_log(str(log), now=now)
    collector = _evidence.Collector(lambda argv, timeout: (None, '', 'not run'))
    kernel = collector.kernel(str(log), since=now - 600, read=read)
    assert [line['time'] for line in kernel['lines']] == [pytest.approx(now - 30)]
    assert len(kernel['ignored']) == len(future_spellings(now)) and all(line['ignored'] for line in kernel['ignored'])
    assert '(7 ignored: a time that cannot be true)' in _evidence.summary({'kernel': kernel})


# --------------------------------------------------------------------------- bounded output

@pytest.mark.parametrize('seed', range(20))
def test_a_tail_buffer_keeps_the_stream_s_tail_in_bounded_memory(seed):
    rnd = random.Random(seed)
    keep = rnd.choice([0, 1, 10, 4000, 65536, 100000])
    tail = TailBuffer(keep)
    stream, most = bytearray(), 0
    for dummy in range(rnd.randint(0, 200)):
        chunk = bytes(rnd.getrandbits(8) for dummy in range(rnd.choice([0, 1, 7, 1000, 65536])))
        stream += chunk
        tail.add(chunk)
        most = max(most, len(tail.data))
    assert tail.tail() == (bytes(stream[-keep:]) if keep else b'')
    assert tail.seen == len(stream)
    assert most <= 2 * keep + 2 * 65536


PRINTER = r'''
import sys
stream = sys.stdout.buffer if sys.argv[1] == 'out' else sys.stderr.buffer
line = b'x' * 1048575 + b'\n'
for i in range(int(sys.argv[2])):
    stream.write(line)
stream.write(b'THE END\n')
'''

READER = r'''
import json, sys
sys.path[:0] = [sys.argv[1]]
from ansible_collections.modelops.vllm.plugins.module_utils._service import run_argv
rc, out, err = run_argv([sys.executable, '-c', sys.argv[2], sys.argv[3], sys.argv[4]], timeout=120, keep=65536)
print(json.dumps({'rc': rc, 'out': out[-20:], 'err': err[-20:], 'lengths': [len(out), len(err)]}))
'''

# A small launcher starts the reader and reads its rusage: a child forked straight from the test process would count
# the test process's pages in its peak RSS (ru_maxrss survives exec; tests/support/hostile.py's launcher does the same).
MEASURE = r'''
import json, os, subprocess, sys
proc = subprocess.Popen([sys.executable, '-c'] + sys.argv[1:], stdout=subprocess.PIPE)
out = proc.stdout.read()
pid, status, usage = os.wait4(proc.pid, 0)
print(json.dumps(dict(json.loads(out.decode()), peak_kb=usage.ru_maxrss, status=status)))
'''


@pytest.mark.parametrize('stream', ['out', 'err'])
def test_a_tool_that_prints_300_mb_costs_its_reader_its_tail_only(stream):
    """The reader as a process of its own (its peak RSS from os.wait4): before issue 26 it held the whole output, then
    its tail (about 600 MB for 300 MB printed); now the tail is kept while reading."""
    done = subprocess.run([sys.executable, '-c', MEASURE, READER, COLLECTIONS, PRINTER, stream, '300'],
                          stdout=subprocess.PIPE, check=True, timeout=300)
    out = json.loads(done.stdout.decode())
    assert out['status'] == 0 and out['rc'] == 0, out
    assert out['out' if stream == 'out' else 'err'].endswith('THE END\n'), out
    assert max(out['lengths']) == 65536
    peak_mb = out['peak_kb'] / 1024.0
    assert peak_mb < 80, 'the reader (and its printer) peaked at %.0f MB for 300 MB printed' % peak_mb


def test_a_tool_that_prints_forever_is_stopped_at_its_time():
    started = time.monotonic()
    rc, out, err = run_argv([sys.executable, '-c', 'import sys\nwhile True: sys.stdout.write("x" * 65536)'],
                            timeout=1.0, keep=100)
    assert rc is None and 'still running after 1.0 s' in err
    assert time.monotonic() - started < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2 * 1024 * 1024  # kB: this process stayed small


# --------------------------------------------------------------------------- whose stacks are dumped

PY_SPY = '#!/bin/sh\necho "$@" >> %s\necho "Thread 1 (idle)"\n'


def _spy(tmp_path):
    marker = tmp_path / 'py-spy.calls'
    tool = tmp_path / 'py-spy'
    tool.write_text(PY_SPY % marker)
    tool.chmod(0o755)
    return str(tool), marker


@pytest.mark.parametrize('method, service, assumed', [
    ('systemd', {'running': True, 'main_pid': None, 'status': 'active/running'}, True),
    ('systemd', {'running': True, 'main_pid': None, 'status': 'active/running'}, False),
    ('systemd', {'running': False, 'main_pid': None, 'status': 'inactive/dead'}, True),
    ('docker', {'running': True, 'main_pid': None, 'status': 'running'}, True),
    ('compose', {'running': None, 'started_at': None, 'status': 'docker compose ps failed'}, True),
    ('command', {'running': True, 'started_at': None, 'status': 'status command exited 0'}, False),
])
def test_what_listens_on_the_url_s_port_is_never_dumped_without_proof(tmp_path, served, method, service, assumed):
    """This test's own process listens on the URL's port: without a main process named by the service manager (or,
    for the command method, the inventory's word), it is not the service's, and nothing pauses it."""
    gate, dummy, dummy, dummy = make(tmp_path)
    one = item(restart_method=method, url=served, assume_url_is_service=assumed, compose_project_dir='/srv')
    pid, pids, how = gate.processes(one, service)
    assert pid is None and pids == [] and how.startswith('none: '), how
    assert 'no proof' in how or 'names no process' in how or 'does not say' in how, how


def test_the_command_method_s_listener_is_read_only_on_the_inventory_s_word(tmp_path, served):
    gate, dummy, dummy, dummy = make(tmp_path)
    pid, pids, how = gate.processes(item(restart_method='command', url=served, assume_url_is_service=True),
                                    {'running': True})
    assert SERVING in pids and 'vllm_watchdog_assume_url_is_service' in how
    # With a main process, its tree, whatever listens on the port.
    pid, pids, how = gate.processes(item(url=served), {'running': True, 'main_pid': SERVING})
    assert pid == SERVING and pids[0] == SERVING and how == 'systemd MainPID'


def test_a_restart_without_a_main_pid_keeps_evidence_without_a_stack_dump_and_says_why(tmp_path, served):
    tool, marker = _spy(tmp_path)
    answers = {'systemctl': systemd(START - 7200, pid=0), 'journalctl': (0, 'a line\n', '')}
    gate, runner, clock, state = make(tmp_path, answers, py_spy=tool)
    one = item(verdict={'state': 'stuck', 'reason': 'frozen'}, url=served, assume_url_is_service=True)
    result = gate.run([one], {}, None)[0]
    assert result['action'] == 'restart', result['decision']
    evidence = json.loads(open(result['evidence_file']).read())
    stacks = evidence['hang']['stacks']
    assert not marker.exists(), marker.read_text()  # py-spy never ran
    assert stacks['error'].startswith('no stack dump: the service manager names no main process'), stacks
    assert 'no stacks (no stack dump' in result['evidence'], result['evidence']
