"""The field-failure corpus, part 2: every reported signature that real vLLM cannot play on cue, on
the simulator, watched by the role through ``ansible-playbook`` run after run as a schedule runs it
(``tests/support/field.py`` has one entry per signature, with its source).

The invariants, for a stall window of WINDOW seconds:

- a hang is restarted exactly once, within the window plus two runs of its start (the frozen ones
  within the freeze limit plus two runs, and never before the freeze limit: they need no window);
- a healthy look-alike (decode starvation shorter than the window, a long prefill, one long engine step after
  another, a pause, a weight transfer) is never restarted, however many runs watch it, and gets only the verdicts it may get;
- a server with work in flight is never probed;
- a pause that lasts past ``vllm_watchdog_paused_limit`` asks a human, still without a restart.
"""

import pytest

from tests.support import field
from tests.support.ports import span

pytestmark = [pytest.mark.integration]

PORT_RANGE = span("field")
WINDOW = 20.0
SETTINGS = dict(field.SCALED, vllm_watchdog_paused_limit=2 * WINDOW)
# Work in flight at the start: the check must never probe these.
IN_FLIGHT = ("deadlock", "reprefill", "reprefill-uncounted", "starved", "prefill", "long-step", "dead-engine",
             "stranded", "paused", "weights")


@pytest.fixture(scope="module")
def corpus(sim, tmp_path_factory):
    corpus = field.Corpus(sim, tmp_path_factory.mktemp("field"), WINDOW, SETTINGS)
    corpus.start()
    try:
        while True:
            corpus.run()
            first = min(corpus.started.values())
            # ... and one run that started past the pause limit counted from the end of the first run (the latest the
            # first run's gate can have seen the pause).
            past_pause = corpus.runs[-1][0] - corpus.runs[0][1] > SETTINGS["vllm_watchdog_paused_limit"] + 1
            if corpus.runs[-1][0] - first > 2.5 * WINDOW and len(corpus.runs) >= 5 and past_pause:
                break
        yield corpus
    finally:
        corpus.stop()
        sim.delete_all()


def timeline(corpus, host):
    """[(run start, run end, result)] of one host."""
    return [(started, ended, results[host]) for started, ended, results, run in corpus.runs]


def spacing(corpus):
    starts = [started for started, dummy, dummy2, dummy3 in corpus.runs]
    ends = [ended for dummy, ended, dummy2, dummy3 in corpus.runs]
    return max(b - a for a, b in zip(starts, starts[1:])), max(e - s for s, e in zip(starts, ends))


@pytest.mark.parametrize("sig", [s for s in field.SIGNATURES if s.restart], ids=lambda s: s.host)
def test_a_hang_is_restarted_once_within_the_window_plus_two_runs(corpus, sig):
    restarts = corpus.restarts(sig.host)
    assert len(restarts) == 1, (sig.source, [r["argv"] for r in restarts], timeline(corpus, sig.host))
    started = corpus.started[sig.host]
    every, longest = spacing(corpus)
    caught = restarts[0]["time"] - started
    frozen = sig.verdicts == ()
    needs = field.FREEZE if frozen else WINDOW
    assert caught <= needs + 2 * every + longest, (sig.source, caught, every, timeline(corpus, sig.host))
    if frozen:
        # Never before the freeze has lasted the limit: nothing earlier is proof.
        assert caught >= field.FREEZE, (sig.source, caught, timeline(corpus, sig.host))
    line = None
    for dummy, dummy2, result in timeline(corpus, sig.host):
        assert result is not None, sig.host
        if result["action"] == "restarted":
            line = result
            break
        assert result["state"] in sig.verdicts, (sig.source, result["line"])
    assert line is not None and line["state"] == "stuck", line
    print("%s (%s): caught %.1f s after it began, window %.0f s, runs every %.1f s: %s"
          % (sig.host, sig.source, caught, WINDOW, every, line["line"]))


@pytest.mark.parametrize("sig", [s for s in field.SIGNATURES if not s.restart], ids=lambda s: s.host)
def test_a_healthy_look_alike_is_never_restarted(corpus, sig):
    assert corpus.restarts(sig.host) == []
    seen = timeline(corpus, sig.host)
    assert seen[-1][0] - corpus.started[sig.host] > 2 * WINDOW
    for dummy, dummy2, result in seen:
        assert result["state"] in sig.verdicts, (sig.source, result["line"])
        assert result["action"] in ("none", "fail"), result["line"]


@pytest.mark.parametrize("host", ["paused", "weights"])
def test_a_pause_past_the_limit_asks_a_human_and_is_still_not_restarted(corpus, host):
    """The pause is counted from the first run that saw it, by its gate: somewhere between that run's start and its
    end. A run is surely past the limit when it started more than the limit after the first one ended, surely within
    it when it ended less than the limit after the first one started (a run's start alone was a flake: under load the
    first run took seconds longer than a later one, and its gate saw the pause that much later)."""
    seen = timeline(corpus, host)
    limit = SETTINGS["vllm_watchdog_paused_limit"]
    first = next(index for index, (begun, ended, result) in enumerate(seen) if result["state"] == "paused")
    first_begun, first_ended = seen[first][:2]
    late = [result for begun, dummy, result in seen if begun - first_ended > limit + 1]
    # The first run that saw it starts the count (0 s paused); later ones that ended within the limit of its start.
    early = [result for index, (begun, ended, result) in enumerate(seen)
             if index <= first or ended - first_begun < limit - 1]
    assert late and all(r["action"] == "fail" and r["failed"] for r in late), [r["line"] for r in late]
    assert early and all(r["action"] == "none" for r in early), [r["line"] for r in early]
    assert "trainer that held the pause may have died" in late[-1]["decision"]
    assert corpus.restarts(host) == []


@pytest.mark.parametrize("host", IN_FLIGHT)
def test_a_server_with_work_in_flight_is_never_probed(corpus, host):
    restarts = corpus.restarts(host)
    until = restarts[0]["time"] if restarts else float("inf")
    probes = [p for p in corpus.probes(host) if p["time"] < until]
    assert probes == [], probes


def test_the_livelock_verdict_names_its_signature(corpus):
    lines = [r["reason"] for dummy, dummy2, r in timeline(corpus, "deadlock") if r["state"] == "stuck"]
    assert lines and "no token generated and no request completed" in lines[0] and "prompt tokens +" in lines[0]
    lines = [r["reason"] for dummy, dummy2, r in timeline(corpus, "reprefill-uncounted") if r["state"] == "stuck"]
    assert lines and "KV-cache drops +" in lines[0] and "preemptions" not in lines[0]
    lines = [r["reason"] for dummy, dummy2, r in timeline(corpus, "stranded") if r["state"] == "stuck"]
    assert lines and "stranded" in lines[0]
