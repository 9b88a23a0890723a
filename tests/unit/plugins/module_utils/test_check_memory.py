"""The window rule's memory on disk (``_check.Memory`` through ``check_one``): kept between checks,
never written in check mode, refused where it cannot be trusted, and every fault only turns the rule
off for that check."""

import json
import os

from ansible_collections.modelops.vllm.plugins.module_utils import _check, _statedir

from fakes import FakeServer, engine, expo

URL = 'http://127.0.0.1:8000'
# The checks' clock: after the expositions' process started (fakes.expo: 1796004614.13).
T = 1796010000.0


def deadlock(i):
    return expo({'0': engine(running=4, steps=100 + 40 * i, step_tokens=100, prompt=5000 + 9000 * i, gen=300,
                             success=12, kv=0.2)})


class Clock(object):
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def spec(state_dir, window=600.0, check_mode=False, url=URL, name='vllm'):
    return {'url': url, 'name': name, 'interval': 5.0, 'probe_timeout': 30.0, 'metrics_timeout': 10.0,
            'metrics_max_bytes': 1 << 24, 'validate_certs': True, 'state_dir': state_dir,
            'stall_window': window, '_check_mode': check_mode}


def check(options, texts, at):
    """One check_one with a scripted server whose reads are ``texts``, the clocks at ``at``."""
    clock = Clock(at)

    def client(url, **kwargs):
        return FakeServer(texts)

    return _check.check_one(options, sleep=clock.sleep, clock=clock, monotonic=clock, client_class=client)


def series(options, checks=4, every=300.0):
    return [check(options, [deadlock(2 * n), deadlock(2 * n + 1)], T + every * n) for n in range(checks)]


def test_the_memory_is_kept_between_checks_and_catches_the_livelock(tmp_path):
    state = str(tmp_path / 'state')
    results = series(spec(state))
    assert [r['state'] for r in results] == ['busy', 'busy', 'stuck', 'stuck']
    path = _check.progress_file(state, 'vllm')
    assert path == os.path.join(state, 'vllm.progress.json')
    kept = json.loads(open(path).read())
    assert kept['url'] == URL and kept['engines']['0']['since'] == T
    assert oct(os.stat(state).st_mode & 0o777) == '0o750'
    assert oct(os.stat(path).st_mode & 0o777) == '0o640'


def test_check_mode_writes_nothing_and_creates_nothing(tmp_path):
    state = str(tmp_path / 'state')
    results = series(spec(state, check_mode=True))
    assert [r['state'] for r in results] == ['busy'] * 4
    assert not os.path.exists(state)
    assert 'does not exist' in results[0]['evidence']['progress']['off']


def test_check_mode_reads_what_the_real_runs_kept(tmp_path):
    state = str(tmp_path / 'state')
    series(spec(state), checks=2)
    before = open(_check.progress_file(state, 'vllm')).read()
    result = check(spec(state, check_mode=True), [deadlock(4), deadlock(5)], T + 600.0)
    assert result['state'] == 'stuck'  # --check says what a real run would do
    assert open(_check.progress_file(state, 'vllm')).read() == before


def test_another_url_starts_afresh(tmp_path):
    state = str(tmp_path / 'state')
    series(spec(state), checks=2)
    result = check(spec(state, url='http://127.0.0.1:8001'), [deadlock(4), deadlock(5)], T + 600.0)
    assert result['state'] == 'busy' and 'another url' in result['evidence']['progress']['note']


def test_a_memory_that_is_not_json_starts_afresh_and_is_rewritten(tmp_path):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    path = _check.progress_file(str(state), 'vllm')
    open(path, 'w').write('{"version": 1, "engines": {"0": ')
    result = check(spec(str(state)), [deadlock(0), deadlock(1)], T)
    assert result['state'] == 'busy' and 'not JSON' in result['evidence']['progress']['note']
    assert json.loads(open(path).read())['version'] == 1


def test_a_state_dir_others_can_write_turns_the_rule_off(tmp_path):
    state = tmp_path / 'state'
    state.mkdir()
    os.chmod(str(state), 0o777)
    result = check(spec(str(state)), [deadlock(0), deadlock(1)], T)
    assert result['state'] == 'busy' and 'writable by others' in result['evidence']['progress']['off']
    assert os.listdir(str(state)) == []


def test_a_memory_planted_as_a_link_is_never_followed(tmp_path):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    target = tmp_path / 'elsewhere.json'
    target.write_text('precious')
    os.symlink(str(target), _check.progress_file(str(state), 'vllm'))
    result = check(spec(str(state)), [deadlock(0), deadlock(1)], T)
    assert 'symbolic link' in result['evidence']['progress']['off']
    assert target.read_text() == 'precious'


def test_a_second_check_of_the_same_server_goes_without_the_rule(tmp_path, monkeypatch):
    state = str(tmp_path / 'state')
    _statedir.check_dir(state)
    fd = _statedir.open_lock(_check.progress_file(state, 'vllm')[:-len('.json')] + '.lock')
    _statedir.lock(fd, 1)
    monkeypatch.setattr(_check, 'MEMORY_LOCK_TIMEOUT', 0.2)
    try:
        result = check(spec(state), [deadlock(0), deadlock(1)], T)
    finally:
        os.close(fd)
    assert 'another check' in result['evidence']['progress']['off']


def test_names_that_are_not_file_names_get_a_safe_distinct_file(tmp_path):
    state = str(tmp_path)
    one = _check.progress_file(state, 'gb10-01/vllm')
    two = _check.progress_file(state, 'gb10-01_vllm')
    three = _check.progress_file(state, '../../etc/passwd')
    assert len({one, two, three}) == 3
    for path in (one, two, three):
        assert os.path.dirname(path) == state and not os.path.basename(path).startswith('.')


def test_without_state_dir_or_window_the_rule_is_off_and_says_why(tmp_path):
    assert 'no state_dir' in check(spec(None), [deadlock(0), deadlock(1)], T)['evidence']['progress']['off']
    off = check(spec(str(tmp_path), window=0), [deadlock(0), deadlock(1)], T)['evidence']['progress']
    assert off == {'window': 0, 'off': 'stall_window is 0'}


def test_a_memory_nested_deeper_than_the_stack_starts_afresh(tmp_path):
    state = tmp_path / 'state'
    state.mkdir(mode=0o750)
    open(_check.progress_file(str(state), 'vllm'), 'w').write('[' * 200000 + ']' * 200000)
    result = check(spec(str(state)), [deadlock(0), deadlock(1)], T)
    assert result['state'] == 'busy' and 'not JSON' in result['evidence']['progress']['note']
