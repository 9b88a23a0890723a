# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The evidence of a hang, taken on the host before the watchdog restarts vLLM: what a vLLM developer asks
for in a bug report, and what is gone once the processes are.

Private to this collection. Used by ``modelops.vllm.watchdog_gate``, which keeps it in the evidence file
with the verdict (and redacts all of it, ``_redact``). Four pieces, each optional, each saying why when it
is missing:

* ``stacks``: ``py-spy dump`` of each Python process of the service (its main process and every process
  below it: the API server, the EngineCore, the workers). A process that cannot be paused (a stopped or
  wedged one: py-spy's ptrace suspend fails) is read again with ``--nonblocking``, which reads its memory
  without stopping it;
* ``meminfo``: the host's ``/proc/meminfo`` (on a GB10 the only truth about the unified memory);
* ``kernel``: the lines of the kernel's log since vLLM started that name an NVIDIA Xid, ``NV_ERR_NO_MEMORY``
  or the out-of-memory killer;
* ``nvidia_smi``: utilisation, power, clocks (and memory, which a GB10 reports as "[N/A]" / "Not Supported")
  per GPU, and the memory per process.

All of it runs within one deadline; a tool that hangs is stopped (with what it started) at its share of it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import time

from ansible_collections.modelops.vllm.plugins.module_utils import _host

DUMP_BYTES = 64 * 1024
MAX_DUMPS = 16
PER_TOOL = 20.0
NVIDIA_GPU_QUERY = ('index,name,utilization.gpu,power.draw,clocks.sm,clocks.mem,temperature.gpu,memory.used,'
                    'memory.total,pstate')
NVIDIA_APP_QUERY = 'pid,process_name,used_memory'


def find_tool(name):
    """The path of a tool (an absolute path as given, else on PATH), or None."""
    if not name:
        return None
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) and os.path.isfile(name) else None
    return shutil.which(name)


def _first_line(text):
    for line in (text or '').splitlines():
        if line.strip():
            return line.strip()[:300]
    return ''


def _why(rc, out, err):
    if rc is None:
        return err or 'could not run'
    return 'exited %s%s' % (rc, ': %s' % _first_line(err or out) if (err or out) else '')


class Collector(object):
    """One instance's evidence, within ``timeout`` seconds. ``run(argv, timeout)`` runs a command and returns
    (rc, stdout, stderr), rc None when it could not run or did not finish. ``prefix``: what the words put before a
    setting's name (the watchdog role's vllm_watchdog_)."""

    def __init__(self, run, timeout=60.0, clock=time.monotonic, prefix=''):
        self.run = run
        self.prefix = prefix
        self.clock = clock
        self.deadline = clock() + max(0.0, float(timeout))
        self.timeout = timeout

    def left(self, most=PER_TOOL):
        return max(0.0, min(most, self.deadline - self.clock()))

    def out_of_time(self):
        return 'skipped: the evidence\'s %g s ran out' % self.timeout

    def stacks(self, py_spy, pids):
        """{'tool', 'processes': [{'pid', 'cmdline', 'mode', 'dump' or 'error'}], 'skipped'} or {'error'}."""
        if not py_spy:
            return {'error': 'off (%spy_spy is empty)' % self.prefix}
        tool = find_tool(py_spy)
        if tool is None:
            return {'error': '%s is not installed on this host (pip install py-spy): no stack dump' % py_spy}
        if not pids:
            return {'tool': tool, 'error': 'no process of the service was found to dump'}
        out = {'tool': tool, 'processes': [], 'skipped': []}
        for pid in pids:
            if len(out['processes']) >= MAX_DUMPS:
                out['skipped'].append('%d: more than %d processes' % (pid, MAX_DUMPS))
                continue
            if not _host.looks_like_python(pid):
                out['skipped'].append('%d (%s): not a Python process' % (pid, _host.exe_name(pid) or '?'))
                continue
            entry = {'pid': pid, 'cmdline': _host.cmdline(pid)}
            out['processes'].append(entry)
            if self.left() <= 0:
                entry['error'] = self.out_of_time()
                continue
            rc, dump, err = self.run([tool, 'dump', '--pid', str(pid)], self.left())
            if rc == 0:
                entry.update(mode='paused while read', dump=dump)
                continue
            first = _why(rc, dump, err)
            if self.left() <= 0:
                entry['error'] = first
                continue
            rc, dump, err = self.run([tool, 'dump', '--nonblocking', '--pid', str(pid)], self.left())
            if rc == 0:
                entry.update(mode='read without pausing it (--nonblocking; pausing failed: %s)' % first, dump=dump)
            else:
                entry['error'] = 'py-spy dump: %s; with --nonblocking: %s' % (first, _why(rc, dump, err))
        return out

    def meminfo(self, path):
        if not path:
            return {'error': 'off (%smeminfo is empty)' % self.prefix}
        info, why = _host.read_meminfo(path)
        if info is None:
            return {'source': path, 'error': why}
        return {'source': path, 'kb': info, 'available': _host.gib(info.get('MemAvailable')),
                'total': _host.gib(info.get('MemTotal'))}

    def kernel(self, path, since=None, read=None):
        """The kernel's lines that matter since ``since`` (vLLM's start; lines without a time are kept too)."""
        if not path:
            return {'error': 'off (%skernel_log is empty)' % self.prefix}
        log = read if read is not None else _host.read_kernel_log(path, timeout=self.left(10.0))
        if 'error' in log:
            return log
        out = dict(log)
        lines = [line for line in log.get('lines') or [] if isinstance(line, dict)]
        # A line whose time cannot be true (in the future, before the boot) is no line "since vLLM started": kept
        # apart, with why, for a human.
        ignored = [line for line in lines if line.get('ignored')]
        lines = [line for line in lines if not line.get('ignored')]
        if since is not None:
            out['since'] = since
            lines = [line for line in lines if line.get('time') is None or line['time'] >= since]
        out['lines'] = lines
        if ignored:
            out['ignored'] = ignored[-20:]
        return out

    def nvidia_smi(self, binary):
        if not binary:
            return {'error': 'off (%snvidia_smi is empty)' % self.prefix}
        tool = find_tool(binary)
        if tool is None:
            return {'error': '%s is not installed on this host (no NVIDIA driver tools)' % binary}
        out = {'tool': tool}
        for key, argv in (('gpus', [tool, '--query-gpu=%s' % NVIDIA_GPU_QUERY, '--format=csv']),
                          ('processes', [tool, '--query-compute-apps=%s' % NVIDIA_APP_QUERY, '--format=csv'])):
            if self.left(10.0) <= 0:
                out[key] = self.out_of_time()
                continue
            rc, text, err = self.run(argv, self.left(10.0))
            out[key] = text.splitlines()[:64] if rc == 0 else 'nvidia-smi %s' % _why(rc, text, err)
        return out


def collect(run, pids, settings, since=None, kernel=None):
    """Every piece of evidence of one instance. ``settings``: py_spy, meminfo, kernel_log, nvidia_smi,
    evidence_timeout, and setting_prefix (what the words call a setting: this and its name, the watchdog role's
    variable). ``kernel``: the kernel log already read by the caller (it is read once per gate run)."""
    collector = Collector(run, settings.get('evidence_timeout', 60.0), prefix=settings.get('setting_prefix') or '')
    out = {'meminfo': collector.meminfo(settings.get('meminfo')),
           'kernel': collector.kernel(settings.get('kernel_log'), since, kernel),
           'stacks': collector.stacks(settings.get('py_spy'), pids),
           'nvidia_smi': collector.nvidia_smi(settings.get('nvidia_smi'))}
    return out


def summary(evidence):
    """A few words on what the evidence holds (for the one-line report)."""
    if not isinstance(evidence, dict):
        return ''
    words = []
    stacks = evidence.get('stacks') or {}
    dumped = [p for p in stacks.get('processes') or [] if p.get('dump')]
    words.append('py-spy %d stack(s)' % len(dumped) if dumped
                 else 'no stacks (%s)' % _short(stacks.get('error') or 'py-spy failed'))
    meminfo = evidence.get('meminfo') or {}
    words.append('MemAvailable %s' % meminfo['available'] if 'available' in meminfo else 'no meminfo')
    kernel = evidence.get('kernel') or {}
    if 'error' in kernel:
        words.append('no kernel log (%s)' % _short(kernel['error']))
    else:
        ignored = ' (%d ignored: a time that cannot be true)' % len(kernel['ignored']) if kernel.get('ignored') else ''
        words.append('%d kernel line(s)%s' % (len(kernel.get('lines') or []), ignored))
    smi = evidence.get('nvidia_smi') or {}
    words.append('nvidia-smi' if 'gpus' in smi and isinstance(smi['gpus'], list) else 'no nvidia-smi')
    return ', '.join(words)


def _short(text):
    text = str(text)
    return text if len(text) <= 60 else text[:57] + '...'
