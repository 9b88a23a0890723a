"""What the watchdog reads from the host (_host) and the evidence it keeps of a hang (_evidence), on real files and
real processes of this machine: bounded, never raising, saying why when something is missing."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.modelops.vllm.plugins.module_utils import _evidence, _host

MEMINFO = """MemTotal:       128413552 kB
MemFree:         9876543 kB
MemAvailable:   20123456 kB
Buffers:          123456 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""


def test_meminfo_is_parsed_as_kb():
    info = _host.parse_meminfo(MEMINFO)
    assert info['MemAvailable'] == 20123456 and info['MemTotal'] == 128413552 and info['HugePages_Total'] == 0


@pytest.mark.parametrize('content', [b'', b'\x00\xff\xfe' * 5000, b'MemAvailable: lots\n', b'x' * (1024 * 1024)])
def test_a_meminfo_that_is_not_one_gives_no_number_and_says_why(tmp_path, content):
    path = tmp_path / 'meminfo'
    path.write_bytes(content)
    info, why = _host.read_meminfo(str(path))
    assert info is None and 'MemAvailable' in why


def test_a_fifo_or_a_directory_is_never_waited_on(tmp_path):
    fifo = tmp_path / 'fifo'
    os.mkfifo(str(fifo))
    started = time.monotonic()
    assert _host.read_meminfo(str(fifo))[0] is None
    assert _host.read_meminfo(str(tmp_path))[0] is None
    assert 'not a regular file' in _host.read_kernel_log(str(fifo))['error']
    assert time.monotonic() - started < 5


def test_the_real_meminfo_of_this_machine_is_read():
    available, why = _host.mem_available_kb()
    assert isinstance(available, int) and available > 0, why


@pytest.mark.parametrize('line, when, text', [
    ('6,1234,5000000,-;NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.', 1000005.0,
     'NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.'),
    ('[ 5.000000] NVRM: Xid (PCI:0000:01:00): 31', 1000005.0, 'NVRM: Xid (PCI:0000:01:00): 31'),
    ('2026-11-30T02:10:52,250000+00:00 NVRM: nvCheckOkFailedNoLog: Out of memory [NV_ERR_NO_MEMORY]', 1796004652.25,
     'NVRM: nvCheckOkFailedNoLog: Out of memory [NV_ERR_NO_MEMORY]'),
    ('2026-11-30T03:10:52+0100 spark kernel: oom-kill:constraint=CONSTRAINT_NONE', 1796004652.0,
     'spark kernel: oom-kill:constraint=CONSTRAINT_NONE'),
    ('1796004652.500000 spark kernel: Out of memory: Killed process 4242 (python3)', 1796004652.5,
     'spark kernel: Out of memory: Killed process 4242 (python3)'),
    ('no time at all', None, 'no time at all'),
])
def test_kernel_lines_in_every_form_they_are_read_in(line, when, text):
    assert _host.parse_kernel_line(line, boot_epoch=1000000.0) == (when, text)


def test_only_the_lines_that_matter_are_kept_with_their_kind(tmp_path):
    log = tmp_path / 'kern.log'
    log.write_text('\n'.join([
        '1796004600.0 spark kernel: usb 1-1: new high-speed USB device',
        '1796004601.0 spark kernel: NVRM: Xid (PCI:000f:01:00): 31, pid=4242, name=python3, Ch 00000008, MMU Fault',
        '1796004602.0 spark kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]',
        '1796004603.0 spark kernel: Out of memory: Killed process 4242 (python3) total-vm:1234kB',
        ' SUBSYSTEM=pci',
    ]) + '\n')
    read = _host.read_kernel_log(str(log))
    assert [(line['kind'], line['time']) for line in read['lines']] == [
        ('xid', 1796004601.0), ('nv_err_no_memory', 1796004602.0), ('oom', 1796004603.0)]


def test_a_huge_binary_kernel_log_is_read_from_its_end_within_bounds(tmp_path):
    log = tmp_path / 'kern.log'
    with open(str(log), 'wb') as handle:
        handle.write(os.urandom(1024 * 1024) * 20)  # 20 MiB of binary
        handle.write(b'\n1796004601.0 kernel: NVRM: Xid (PCI:000f:01:00): 13, Graphics Exception\n')
    read = _host.read_kernel_log(str(log))
    assert 'only its last' in read['note']
    assert read['lines'][-1]['kind'] == 'xid'
    assert len(read['lines']) <= _host.MAX_KERNEL_LINES
    assert all(len(line['line']) <= _host.MAX_LINE for line in read['lines'])


def test_a_missing_kernel_log_says_why():
    read = _host.read_kernel_log('/nonexistent/kmsg')
    assert 'error' in read and 'cannot be read' in read['error']


@pytest.mark.skipif(not os.path.exists('/dev/kmsg') or os.geteuid() != 0, reason='needs /dev/kmsg and root')
def test_dev_kmsg_is_read_to_its_end_without_blocking():
    started = time.monotonic()
    read = _host.read_kernel_log('/dev/kmsg', timeout=10)
    assert 'lines' in read or 'error' in read
    assert time.monotonic() - started < 15


def test_net_tcp_tables_are_parsed_in_host_byte_order():
    text = ('  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n'
            '   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1\n'
            '   1: 0100007F:1F41 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4243 1\n')
    assert _host.parse_net_tcp(text) == [('127.0.0.1', 8000, 4242)]
    six = ('  sl  local_address                         remote_address                        st ...\n'
           '   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A 0 0 0 0 0 4244\n'
           '   1: 0000000000000000FFFF00000100007F:1F41 00000000000000000000000000000000:0000 0A 0 0 0 0 0 4245\n')
    assert _host.parse_net_tcp(six) == [('::1', 8000, 4244), ('127.0.0.1', 8001, 4245)]


def test_the_sockets_a_real_process_listens_on_are_found_from_its_pid():
    with socket.socket() as listening:
        listening.bind(('127.0.0.2', 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        found, same = _host.listeners(_host.tree(os.getpid()))
        assert same is True
        assert {'address': '127.0.0.2', 'port': port, 'pid': os.getpid()} in found
        assert os.getpid() in _host.listener_pids(port, ['127.0.0.2'])
        assert _host.listener_pids(port, ['127.0.0.1']) == []  # another address of the same port is another socket


def test_the_process_tree_is_found_from_the_main_pid():
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        assert _host.tree(os.getpid())[0] == os.getpid()
        assert child.pid in _host.tree(os.getpid())
        assert _host.tree(0) == [] and _host.tree(1) == [] and _host.tree(2 ** 22 + 5) == []
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize('argv, shown', [
    (['/opt/venv/bin/python3', '/opt/venv/bin/vllm', 'serve', '/models/x', '--port', '8001'],
     'python3 vllm serve /models/x --port 8001'),
    (['/usr/bin/python3', '-m', 'vllm.entrypoints.openai.api_server', '--model', '/models/x'],
     'python3 -m vllm.entrypoints.openai.api_server --model /models/x'),
    (['VLLM::EngineCore'], 'VLLM::EngineCore'),
    (['/usr/sbin/nginx', '-c', '/etc/nginx/nginx.conf'], 'nginx -c /etc/nginx/nginx.conf'),  # only a script is named
    (['/', 'x'], '/ x'),
    ([], ''),
])
def test_a_command_is_shown_by_its_program_s_and_script_s_names(argv, shown):
    assert _host.short_command(argv) == shown


def test_a_process_deep_in_a_long_path_is_still_named_by_what_it_runs(tmp_path):
    """A checkout or a venv under a long path: its paths would fill the 80 characters kept of a command line."""
    deep = tmp_path / ('d' * 60) / ('e' * 60)
    deep.mkdir(parents=True)
    script = deep / 'serve_it.py'
    script.write_text('import time\ntime.sleep(60)\n')
    child = subprocess.Popen([sys.executable, str(script), '--port', '8001'])
    try:
        for dummy in range(100):  # until the child's exec has replaced the fork's command line
            if 'serve_it.py' in _host.cmdline(child.pid):
                break
            time.sleep(0.05)
        shown = _host.describe(child.pid)
        assert shown == 'process %d (%s serve_it.py --port 8001)' % (child.pid, os.path.basename(sys.executable)), shown
    finally:
        child.kill()
        child.wait()
    assert _host.describe(2 ** 22 + 5) == 'process %d (?)' % (2 ** 22 + 5)  # gone: said, not raised


def test_url_endpoints_and_addresses():
    assert _host.url_endpoint('http://127.0.0.1:8000') == ('127.0.0.1', 8000)
    assert _host.url_endpoint('https://gb10-01.example') == ('gb10-01.example', 443)
    assert _host.url_endpoint('http://[::1]:8001/') == ('::1', 8001)
    assert _host.url_endpoint('not a url') == (None, None)
    assert _host.addresses_of('localhost') == ['127.0.0.1', '::1']
    assert _host.matches('0.0.0.0', ['127.0.0.1']) and not _host.matches('127.0.0.2', ['127.0.0.1'])


# -- the memory released after a stop ---------------------------------------------------------------------------

def test_the_threshold_comes_from_the_setting_then_the_baseline_then_none():
    assert _host.memory_threshold(100 * 1024, 0.9, {'available_kb': 1})[0] == 100 * 1024 * 1024
    kb, words = _host.memory_threshold(0, 0.9, {'available_kb': 100000000, 'at': 1})
    assert kb == 90000000 and '90% of the 95.4 GiB' in words
    for bad in (None, {}, {'available_kb': 'x'}, {'available_kb': -1}, {'available_kb': True}, []):
        assert _host.memory_threshold(0, 0.9, bad)[0] is None


class Clock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_wait_ends_when_the_memory_is_back():
    clock = Clock()
    readings = iter([(10, None), (50, None), (95, None)])
    out = _host.wait_memory(lambda: next(readings), 90, 60, 5, sleep=clock.sleep, clock=clock)
    assert out['released'] and out['available_kb'] == 95 and out['polls'] == 3 and out['seconds'] == 10


def test_memory_that_does_not_come_back_is_not_released_within_the_bound():
    clock = Clock()
    out = _host.wait_memory(lambda: (10, None), 90, 30, 5, sleep=clock.sleep, clock=clock)
    assert not out['released'] and 'below' in out['why'] and clock.now <= 30
    clock = Clock()
    out = _host.wait_memory(lambda: (None, 'no meminfo'), 90, 30, 5, sleep=clock.sleep, clock=clock)
    assert not out['released'] and 'cannot be read' in out['why']
    clock = Clock()
    assert _host.wait_memory(lambda: (10, None), None, 30, 5, sleep=clock.sleep, clock=clock)['released']


# -- the evidence ------------------------------------------------------------------------------------------------

def fake_run(answers):
    calls = []

    def run(argv, timeout):
        calls.append((argv, timeout))
        return answers(argv)
    return run, calls


def test_a_missing_tool_is_named_and_nothing_else_is_lost(tmp_path):
    meminfo = tmp_path / 'meminfo'
    meminfo.write_text(MEMINFO)
    run, calls = fake_run(lambda argv: (0, '', ''))
    out = _evidence.collect(run, [os.getpid()], {
        'py_spy': '/nonexistent/py-spy', 'meminfo': str(meminfo), 'kernel_log': '/nonexistent/kmsg',
        'nvidia_smi': 'no-such-nvidia-smi', 'evidence_timeout': 10})
    assert 'is not installed' in out['stacks']['error'] and 'pip install py-spy' in out['stacks']['error']
    assert out['meminfo']['kb']['MemAvailable'] == 20123456 and out['meminfo']['available'] == '19.2 GiB'
    assert 'cannot be read' in out['kernel']['error']
    assert 'is not installed' in out['nvidia_smi']['error']
    assert calls == []
    words = _evidence.summary(out)
    assert 'no stacks' in words and 'MemAvailable 19.2 GiB' in words and 'no nvidia-smi' in words


def test_a_process_that_cannot_be_paused_is_read_without_pausing(tmp_path):
    tool = tmp_path / 'py-spy'
    tool.write_text('#!/bin/sh\n')
    tool.chmod(0o755)

    def answers(argv):
        if '--nonblocking' in argv:
            return 0, 'Thread 1 (idle)\n    step (vllm/v1/engine/core.py:391)\n', ''
        return 1, '', 'Error: Failed to suspend process\n'
    run, calls = fake_run(answers)
    out = _evidence.Collector(run, timeout=30).stacks(str(tool), [os.getpid()])
    entry = out['processes'][0]
    assert 'core.py:391' in entry['dump'] and 'Failed to suspend process' in entry['mode']
    assert [c[0][1:3] for c in calls] == [['dump', '--pid'], ['dump', '--nonblocking']]


def test_the_evidence_keeps_within_its_time():
    clock = Clock()

    def run(argv, timeout):
        clock.now += timeout  # every call uses all the time it is given
        return None, '', 'still running after %s s (stopped)' % timeout
    collector = _evidence.Collector(run, timeout=30, clock=clock)
    out = collector.stacks(sys.executable, [os.getpid()] * 5)
    assert clock.now <= 30
    assert all('error' in p for p in out['processes'])
    assert any('ran out' in p['error'] for p in out['processes'])


def test_a_real_py_spy_dumps_a_real_stopped_python_process():
    py_spy = _evidence.find_tool(os.path.join(os.path.dirname(sys.executable), 'py-spy'))
    if py_spy is None:
        pytest.fail('py-spy is missing from the venv: requirements/test.txt pins it (make venv)')
    code = 'import time\ndef hung_in_here():\n    time.sleep(120)\nhung_in_here()\n'
    child = subprocess.Popen([sys.executable, '-c', code])
    try:
        time.sleep(0.5)
        os.kill(child.pid, signal.SIGSTOP)
        from ansible_collections.modelops.vllm.plugins.module_utils._service import run_argv
        out = _evidence.Collector(lambda argv, timeout: run_argv(argv, timeout=timeout)).stacks(py_spy, [child.pid])
        entry = out['processes'][0]
        assert 'hung_in_here' in entry.get('dump', ''), entry
        assert '--nonblocking' in entry['mode']  # a stopped process cannot be paused by ptrace
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait()
