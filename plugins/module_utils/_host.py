# -*- coding: utf-8 -*-
# Copyright (c) modelops.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the watchdog reads from the host itself: vLLM's processes and the sockets they listen on, the
memory the host has, the kernel's log, the boot id.

Private to this collection. The gate and the restart module run as root on the host and read what
the host gives, so every reader here is bounded and never raises on what a host may hold:

* files are read up to a size (a huge file is cut, its end kept where the end is what matters), opened
  without blocking (a FIFO answers at once), and decoded with replacement (binary is text that matches
  nothing);
* the process tree and the sockets are walked up to a number of processes and descriptors;
* each reader returns its value and, when it has none, why (``(None, 'why')``).

The parsers (``parse_meminfo``, ``parse_kernel_line``, ``gpu_lines``, ``parse_net_tcp``, ...) are pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import ipaddress
import math
import os
import re
import socket
import stat
import time

from urllib.parse import urlsplit

from ansible_collections.modelops.vllm.plugins.module_utils import _statedir as statedir
from ansible_collections.modelops.vllm.plugins.module_utils._types import json_object, parse_started_at

MEMINFO = '/proc/meminfo'
KMSG = '/dev/kmsg'
BOOT_ID = '/proc/sys/kernel/random/boot_id'
MAX_MEMINFO = 64 * 1024
MAX_MEMINFO_KEYS = 200
# The kernel log: the last this many bytes of a file, or this many bytes of /dev/kmsg records.
MAX_KERNEL_BYTES = 16 * 1024 * 1024
MAX_KERNEL_LINES = 200
MAX_LINE = 500
MAX_PROCESSES = 256
MAX_FDS = 4096
MAX_LISTENERS = 50

_NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)
_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)


# --------------------------------------------------------------------------- bounded reads

def read_file(path, limit, tail=False):
    """(text, None) or (None, why). At most ``limit`` bytes: the first ones, or with ``tail`` the last ones
    (a file that is larger says so in ``why`` of the pair (text, 'cut ...')). Never blocks on a FIFO, never
    reads a directory, decodes with replacement."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    except OSError as exc:
        return None, '%s cannot be read: %s' % (path, exc.strerror or exc)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            return None, '%s is not a regular file' % path
        cut = None
        if tail and stat.S_ISREG(st.st_mode) and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
            cut = 'only its last %d bytes were read (it has %d)' % (limit, st.st_size)
        chunks, size = [], 0
        while size <= limit:
            try:
                data = os.read(fd, min(65536, limit + 1 - size))
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break
                return None, '%s cannot be read: %s' % (path, exc.strerror or exc)
            if not data:
                break
            chunks.append(data)
            size += len(data)
        raw = b''.join(chunks)
        if len(raw) > limit:
            raw = raw[:limit]
            cut = 'only its first %d bytes were read' % limit
        return raw.decode('utf-8', 'replace'), cut
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- memory

def parse_meminfo(text):
    """``/proc/meminfo`` as {key: kB}: lines ``Key:  123 kB`` (or without a unit); anything else is skipped."""
    out = {}
    for line in (text or '').splitlines():
        if len(out) >= MAX_MEMINFO_KEYS:
            break
        match = re.match(r'^([A-Za-z0-9_()]{1,40}):\s+(\d{1,19})(?:\s+kB)?\s*$', line)
        if match:
            out[match.group(1)] = int(match.group(2))
    return out


def read_meminfo(path=MEMINFO):
    """({key: kB}, None), or (None, why) when there is no meminfo or no MemAvailable in it."""
    text, cut = read_file(path, MAX_MEMINFO)
    if text is None:
        return None, cut
    info = parse_meminfo(text)
    if 'MemAvailable' not in info:
        return None, '%s has no MemAvailable line%s' % (path, ' (%s)' % cut if cut else '')
    return info, None


def mem_available_kb(path=MEMINFO):
    """(MemAvailable in kB, None) or (None, why)."""
    info, why = read_meminfo(path)
    if info is None:
        return None, why
    return info['MemAvailable'], None


def gib(kb):
    return '%.1f GiB' % (kb / 1048576.0) if isinstance(kb, (int, float)) else '?'


# --------------------------------------------------------------------------- the kernel log

# What in the kernel's log says the GPU or the memory is in trouble. NV_ERR_NO_MEMORY alone also appears
# on healthy starts of vLLM on a DGX Spark (vllm#56824): the decision counts only the lines after vLLM was
# last seen healthy (_decide.gpu_errors).
KERNEL_PATTERNS = (
    ('xid', re.compile(r'NVRM: Xid\b|\bXid \(PCI:', re.I)),
    ('nv_err_no_memory', re.compile(r'NV_ERR_NO_MEMORY')),
    ('oom', re.compile(r'Out of memory: Killed process|\boom-kill:|invoked oom-killer|\boom_reaper\b', re.I)),
)
GPU_KINDS = ('xid', 'nv_err_no_memory')

_KMSG = re.compile(r'^(\d+),(\d+),(\d+),[^;]*;(.*)$')
_DMESG = re.compile(r'^\[\s*(\d+(?:\.\d+)?)\]\s?(.*)$')
_ISO = re.compile(r'^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+(.*)$')
_EPOCH = re.compile(r'^(\d{9,11}(?:\.\d+)?)\s+(.*)$')


def _iso_epoch(text):
    return parse_started_at(text.replace(',', '.').replace(' ', 'T', 1))


def parse_kernel_line(line, boot_epoch=None):
    """(epoch or None, text) of one line of a kernel log, in any of the forms it is read in: a ``/dev/kmsg``
    record (``6,1234,5678901,-;text``, microseconds since boot), ``dmesg`` (``[ 5678.901234] text``, seconds
    since boot), ``dmesg --time-format iso`` / ``journalctl -k -o short-iso`` (an ISO 8601 time first) and
    ``journalctl -k -o short-unix`` (seconds since the epoch first). Times since boot need ``boot_epoch``."""
    line = line.rstrip('\r\n')
    match = _KMSG.match(line)
    if match:
        since_boot = int(match.group(3)) / 1e6
        return (boot_epoch + since_boot if boot_epoch is not None else None), match.group(4)
    match = _DMESG.match(line)
    if match:
        return (boot_epoch + float(match.group(1)) if boot_epoch is not None else None), match.group(2)
    match = _ISO.match(line)
    if match:
        return _iso_epoch(match.group(1)), match.group(2)
    match = _EPOCH.match(line)
    if match:
        return float(match.group(1)), match.group(2)
    return None, line


def boot_epoch(now=None):
    """When this host booted, in epoch seconds (from the monotonic clock the kernel log stamps with)."""
    now = time.time() if now is None else now
    try:
        since_boot = time.clock_gettime(time.CLOCK_MONOTONIC)
    except (AttributeError, OSError):
        return None
    return now - since_boot


# Seconds a kernel line's time may lie ahead of this host's clock, or before its boot, and still be believed.
KERNEL_SKEW = 60.0


def impossible_time(when, now, boot):
    """Why a kernel line's time cannot be true (in the future, before this host booted), or None (a time that can be,
    or none)."""
    if when is None:
        return None
    if not math.isfinite(when):
        return 'its time is not a number'
    if now is not None and when > now + KERNEL_SKEW:
        return 'its time %s is in the future' % _utc(when)
    if boot is not None and when < boot - KERNEL_SKEW:
        return 'its time %s is before this host booted (%s)' % (_utc(when), _utc(boot))
    return None


def _utc(epoch):
    try:
        return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(epoch))
    except (OverflowError, OSError, ValueError):
        return '%.0f' % epoch


def kernel_matches(lines, boot=None, now=None):
    """The lines that match KERNEL_PATTERNS, newest last, each {'time', 'kind', 'line'} (bounded count and length).
    A line whose time cannot be true (``impossible_time`` against ``now`` and ``boot``) carries ``ignored``, the
    reason: it is kept for a human, and never counted by a decision."""
    out = []
    for line in lines:
        if not line or line.startswith(' '):  # a /dev/kmsg record's KEY=value continuation
            continue
        when, text = parse_kernel_line(line, boot)
        for kind, pattern in KERNEL_PATTERNS:
            if pattern.search(text):
                match = {'time': when, 'kind': kind, 'line': text[:MAX_LINE]}
                why = impossible_time(when, now, boot)
                if why:
                    match['ignored'] = why
                out.append(match)
                break
    return out[-MAX_KERNEL_LINES:]


def _read_kmsg(path, limit, deadline):
    """The records of /dev/kmsg (a character device: one record per read, EAGAIN at its end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    except OSError as exc:
        return None, '%s cannot be read: %s' % (path, exc.strerror or exc)
    lines, size, note = [], 0, None
    try:
        while size < limit:
            if time.monotonic() > deadline:
                note = 'stopped reading after its time ran out'
                break
            try:
                data = os.read(fd, 65536)  # one record per read; a record larger than the buffer is EINVAL
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while reading: go on
                    continue
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break
                if lines and exc.errno == errno.EINVAL:
                    note = 'stopped at a record it could not read'
                    break
                return None, '%s cannot be read: %s' % (path, exc.strerror or exc)
            if not data:
                break
            size += len(data)
            lines.extend(data.decode('utf-8', 'replace').splitlines())
        else:
            note = 'only its first %d bytes were read' % limit
    finally:
        os.close(fd)
    return lines, note


def read_kernel_log(path=KMSG, limit=MAX_KERNEL_BYTES, timeout=10.0, now=None):
    """The lines of the kernel log that matter, {'source', 'lines': [{'time', 'kind', 'line'}], 'note'}, or
    {'source', 'error'} when it cannot be read. ``path`` is /dev/kmsg, or a file with the kernel's lines in one
    of the forms ``parse_kernel_line`` reads (the end of a large file is read)."""
    now = time.time() if now is None else now
    out = {'source': path}
    try:
        st = os.stat(path)
    except OSError as exc:
        out['error'] = '%s cannot be read: %s' % (path, exc.strerror or exc)
        return out
    if stat.S_ISCHR(st.st_mode):
        lines, note = _read_kmsg(path, limit, time.monotonic() + timeout)
    else:
        text, note = read_file(path, limit, tail=True)
        lines = None if text is None else text.splitlines()
    if lines is None:
        out['error'] = note
        return out
    out['lines'] = kernel_matches(lines, boot_epoch(now), now)
    out['read_lines'] = len(lines)
    if note:
        out['note'] = note
    return out


def read_boot_id(path=BOOT_ID):
    text, why = read_file(path, 256)
    if text is None:
        return None
    return text.strip()[:64] or None


# --------------------------------------------------------------------------- processes

def proc_stat(pid, proc='/proc'):
    """(ppid, state) of a process, or None."""
    text, dummy = read_file('%s/%d/stat' % (proc, pid), 4096)
    if not text or ')' not in text:
        return None
    fields = text.rsplit(')', 1)[1].split()
    try:
        return int(fields[1]), fields[0]
    except (IndexError, ValueError):
        return None


def _pids(proc='/proc'):
    try:
        return sorted(int(name) for name in os.listdir(proc) if name.isdigit())
    except OSError:
        return []


def tree(root, limit=MAX_PROCESSES, proc='/proc'):
    """``root`` and its live descendants, parents before children, at most ``limit`` processes."""
    if not isinstance(root, int) or isinstance(root, bool) or root <= 1 or proc_stat(root, proc) is None:
        return []
    children = {}
    for pid in _pids(proc):
        st = proc_stat(pid, proc)
        if st and st[1] != 'Z':
            children.setdefault(st[0], []).append(pid)
    out, todo = [root], [root]
    while todo and len(out) < limit:
        for child in children.get(todo.pop(0), []):
            if child not in out and len(out) < limit:
                out.append(child)
                todo.append(child)
    return out


def cmdline(pid, proc='/proc', limit=2000):
    text, dummy = read_file('%s/%d/cmdline' % (proc, pid), limit)
    return ' '.join((text or '').split('\0')).strip()


def exe_name(pid, proc='/proc'):
    try:
        return os.path.basename(os.readlink('%s/%d/exe' % (proc, pid)))
    except OSError:
        return ''


def short_command(words):
    """A command line as a message shows it: its program, and the script an interpreter runs, by name, not by path
    (``/opt/venv/bin/python3 /opt/venv/bin/vllm serve /models/x`` is ``python3 vllm serve /models/x``), so that a
    deep install's paths do not fill the few words a message keeps. Every other word is kept as it is."""
    words = list(words)
    if words and '/' in words[0]:
        words[0] = os.path.basename(words[0]) or words[0]
    if len(words) > 1 and words[0].lower().startswith(('python', 'pypy')) and words[1].startswith('/'):
        words[1] = os.path.basename(words[1]) or words[1]
    return ' '.join(words)


def describe(pid, proc='/proc'):
    """A process in a few words, as a message names it: ``process 1234 (python3 vllm serve /models/x --port 8001)``."""
    text, dummy = read_file('%s/%d/cmdline' % (proc, pid), 400)
    line = short_command(w for w in (text or '').split('\0') if w).strip() or exe_name(pid, proc) or '?'
    return 'process %d (%s)' % (pid, line if len(line) <= 80 else line[:77] + '...')


def looks_like_python(pid, proc='/proc'):
    """Whether py-spy may find an interpreter in the process (a python executable, or vLLM's retitled ones)."""
    exe = exe_name(pid, proc).lower()
    line = cmdline(pid, proc, 400).lower()
    return exe.startswith(('python', 'pypy')) or 'python' in line.split(' ', maxsplit=1)[0] or line.startswith('vllm')


def socket_inodes(pid, proc='/proc', limit=MAX_FDS):
    """The inodes of the sockets a process holds (``/proc/<pid>/fd/* -> socket:[N]``)."""
    out = set()
    directory = '%s/%d/fd' % (proc, pid)
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names[:limit]:
        try:
            target = os.readlink(os.path.join(directory, name))
        except OSError:
            continue
        if target.startswith('socket:['):
            try:
                out.add(int(target[8:-1]))
            except ValueError:
                pass
    return out


def _hex_address(text):
    """The address of /proc/net/tcp{,6}: 8 or 32 hex digits, each 32-bit word in host byte order."""
    raw = bytes.fromhex(text)
    order = 'little' if socket.htonl(1) != 1 else 'big'
    words = [int.from_bytes(raw[i:i + 4], order).to_bytes(4, 'big') for i in range(0, len(raw), 4)]
    packed = b''.join(words)
    address = ipaddress.ip_address(packed)
    if address.version == 6 and address.ipv4_mapped:
        return str(address.ipv4_mapped)
    return str(address)


def parse_net_tcp(text):
    """The LISTEN sockets of a /proc/net/tcp{,6} table: [(address, port, inode)]."""
    out = []
    for line in (text or '').splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != '0A':
            continue
        try:
            hex_address, hex_port = fields[1].rsplit(':', 1)
            out.append((_hex_address(hex_address), int(hex_port, 16), int(fields[9])))
        except ValueError:
            continue
    return out


def _netns(pid, proc='/proc'):
    try:
        return os.readlink('%s/%s/ns/net' % (proc, pid))
    except OSError:
        return None


def listeners(pids, proc='/proc'):
    """The TCP sockets in LISTEN state held by ``pids``: ({'address', 'port', 'pid'} list, same network namespace
    as this process (bool, or None when unknown)). Read from each process's own view of the network."""
    by_inode = {}
    for pid in pids:
        for inode in socket_inodes(pid, proc):
            by_inode.setdefault(inode, pid)
    out, seen_ns = [], set()
    for pid in pids:
        ns = _netns(pid, proc)
        if ns in seen_ns:
            continue
        seen_ns.add(ns)
        for table in ('tcp', 'tcp6'):
            text, dummy = read_file('%s/%d/net/%s' % (proc, pid, table), 4 * 1024 * 1024)
            for address, port, inode in parse_net_tcp(text):
                if inode in by_inode and len(out) < MAX_LISTENERS:
                    out.append({'address': address, 'port': port, 'pid': by_inode[inode]})
    own = _netns('self', proc)
    same = None if own is None or not seen_ns or None in seen_ns else seen_ns == {own}
    return out, same


def listener_pids(port, addresses, proc='/proc', limit=4096):
    """The processes that hold a LISTEN socket on ``port`` at one of ``addresses`` (or a wildcard), in this
    network namespace: for a service whose main process the service manager cannot name."""
    wanted = set()
    for table in ('tcp', 'tcp6'):
        text, dummy = read_file('%s/net/%s' % (proc, table), 4 * 1024 * 1024)
        for address, lport, inode in parse_net_tcp(text):
            if lport == port and matches(address, addresses):
                wanted.add(inode)
    if not wanted:
        return []
    out = []
    for pid in _pids(proc)[:limit]:
        if socket_inodes(pid, proc) & wanted:
            out.append(pid)
    return out


# --------------------------------------------------------------------------- the URL

WILDCARDS = ('0.0.0.0', '::')


def url_endpoint(url):
    """(host, port) of a URL, or (None, None)."""
    try:
        parts = urlsplit(url or '')
        port = parts.port or {'http': 80, 'https': 443}.get(parts.scheme)
    except ValueError:
        return None, None
    return (parts.hostname or '').lower() or None, port


def addresses_of(host):
    """The IP addresses a URL's host names (a literal, localhost, or what the resolver says)."""
    if not host:
        return []
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    if host == 'localhost' or host.endswith('.localhost'):
        return ['127.0.0.1', '::1']
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except (socket.error, UnicodeError):
        return []
    return sorted(set(info[4][0] for info in infos))[:16]


def matches(address, addresses):
    """Whether a listening address takes connections to one of ``addresses`` (the same one, or a wildcard)."""
    return address in WILDCARDS or address in addresses


def endpoint(address, port):
    return '[%s]:%d' % (address, port) if ':' in address else '%s:%d' % (address, port)


# --------------------------------------------------------------------------- memory released after a stop

# A memory baseline file larger than this is not one the restart module wrote.
MAX_BASELINE = 4096
# MemTotal may differ this much between two boots of one host (firmware, kernel) and still be the same memory.
TOTAL_SLACK = 0.02
# Seconds a baseline's time may lie ahead of this host's clock.
BASELINE_SKEW = 60.0


def _kb(value):
    """A kB count as a baseline holds it (a positive finite number below 1 PiB), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value if 0 < value < 2 ** 40 else None


def parse_baseline(text):
    """The memory baseline file's text as a dict, or (None, why): garbage, deep nesting, a list, ... never raise."""
    if text is None:
        return None, None
    return json_object(text)


def baseline_problem(baseline, total_kb, boot_id, host, now):
    """Why a memory baseline ({'available_kb', 'total_kb', 'boot_id', 'host', 'at'}, as ``baseline_record`` writes
    it) cannot be trusted on this host now (its MemTotal ``total_kb``, its ``boot_id`` and name ``host``), or None.
    A baseline is what this host had available before a start of vLLM in this boot; one that is more than this host
    has, of another host, of another boot, from the future, or written without saying where, is not."""
    available = _kb(baseline.get('available_kb'))
    if available is None:
        return 'its available_kb is not a positive number of kB'
    if _kb(total_kb) is None:
        return 'this host\'s MemTotal cannot be read, so nothing shows that the baseline fits it'
    if available > total_kb:
        return 'it says %s were available, more than this host has (MemTotal %s)' % (gib(available), gib(total_kb))
    written_total = _kb(baseline.get('total_kb'))
    if written_total is None:
        return 'it does not say how much memory its host had (written by an older version, or by hand)'
    if abs(written_total - total_kb) > TOTAL_SLACK * total_kb:
        return 'it was written on a host with %s (MemTotal), this one has %s' % (gib(written_total), gib(total_kb))
    if host and baseline.get('host') != host:
        return 'it was written on another host (%s, this is %s)' % (str(baseline.get('host'))[:64], host)
    if not boot_id:
        return 'this host\'s boot id cannot be read, so nothing shows that the baseline is of this boot'
    if baseline.get('boot_id') != boot_id:
        return 'it was written in another boot of the host (boot id %s, now %s)' % (
            str(baseline.get('boot_id'))[:40], boot_id)
    at = baseline.get('at')
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at <= 0:
        return 'it has no time'
    if at > now + BASELINE_SKEW:
        return 'its time %s is in the future' % time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(min(at, 2 ** 35)))
    return None


def read_baseline(path, total_kb, boot_id, host, now):
    """(baseline or None, why not trusted or None). No file: (None, None). Never raises."""
    if not path:
        return None, None
    try:
        text = statedir.read_text(path, MAX_BASELINE)
    except (statedir.StateError, OSError) as exc:
        return None, str(exc)
    baseline, why = parse_baseline(text)
    if baseline is None:
        return None, why
    why = baseline_problem(baseline, total_kb, boot_id, host, now)
    return (None, why) if why else (baseline, None)


def baseline_record(available_kb, total_kb, boot_id, host, now):
    """What the restart module keeps after a start that came up ready (``read_baseline`` reads it back)."""
    return {'available_kb': available_kb, 'total_kb': total_kb, 'boot_id': boot_id, 'host': host, 'at': round(now, 3)}


def memory_threshold(explicit_mib, fraction, baseline, distrust=None, path=None, prefix=''):
    """(kB or None, words): what MemAvailable must be back to before vLLM starts again.

    ``explicit_mib`` (a setting, MiB) when above 0; else ``fraction`` of ``baseline`` (what the host had
    available just before the last start of vLLM that came up healthy, {'available_kb', ...}); else none.
    ``distrust``: why the baseline file ``path`` was not trusted (the words say so: no threshold, vLLM starts).
    ``prefix``: what the words put before the setting's name (the watchdog role's vllm_watchdog_)."""
    if isinstance(explicit_mib, (int, float)) and explicit_mib > 0:
        return int(explicit_mib * 1024), '%smemory_threshold, %s' % (prefix, gib(explicit_mib * 1024))
    kb = _kb(baseline.get('available_kb')) if isinstance(baseline, dict) else None
    if kb is not None:
        return int(kb * fraction), '%d%% of the %s available before the last start that came up healthy%s' % (
            round(fraction * 100), gib(kb), ' (%s)' % path if path else '')
    if distrust:
        return None, 'no threshold: the memory baseline %s is not trusted (%s), so vLLM is started without a ' \
                     'wait; the next start that comes up healthy writes a new one' % (path or '?', distrust)
    return None, 'no threshold: no restart by the watchdog has come up healthy yet to learn from, and ' \
                 '%smemory_threshold is not set' % prefix


def wait_memory(read, threshold_kb, timeout, delay, sleep=time.sleep, clock=time.monotonic):
    """Wait until MemAvailable (``read()`` -> (kB or None, why)) is at least ``threshold_kb``, for up to
    ``timeout`` seconds. Returns {'released', 'available_kb', 'seconds', 'polls', 'why'}; with no threshold,
    one read and released."""
    started = clock()
    polls = 0
    while True:
        available, why = read()
        polls += 1
        if threshold_kb is None:
            return {'released': True, 'available_kb': available, 'seconds': round(clock() - started, 1),
                    'polls': polls, 'why': None if available is not None else why}
        if available is not None and available >= threshold_kb:
            return {'released': True, 'available_kb': available, 'seconds': round(clock() - started, 1),
                    'polls': polls, 'why': None}
        if clock() - started + delay > timeout:
            reason = ('MemAvailable is %s, below the %s it must be back to' % (gib(available), gib(threshold_kb))
                      if available is not None else 'MemAvailable cannot be read (%s)' % why)
            return {'released': False, 'available_kb': available, 'seconds': round(clock() - started, 1),
                    'polls': polls, 'why': '%s after %.0f s' % (reason, clock() - started)}
        sleep(delay)
