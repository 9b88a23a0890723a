"""The simulated engine core of one data-parallel rank (vLLM V1 scheduling, simplified).

Time-driven: while it has work, the engine makes one step every ``1 / step_rate``
seconds.  A step admits waiting requests FIFO up to ``max_num_seqs``, gives every
decoding request one token, and spends the rest of the per-step token budget
(``chunk_tokens``, vLLM's ``max_num_batched_tokens``) on prefill chunks, as V1's
chunked prefill does.  As in V1:

* ``vllm:iteration_tokens_total`` is observed only for steps that emitted at least one
  token (prefill-only steps are not counted); the value is the generated tokens plus
  the whole prompt of the requests that got their first token in that step;
* ``vllm:prompt_tokens_total`` grows when a request's first token comes out;
* the gauges (running, waiting, KV-cache usage) are published after each step, so
  while the engine is hung nothing moves, and requests arriving during a hang stay in
  the engine's input queue (``inbox``), not in ``waiting``.

Pauses (``POST /pause``, vLLM 0.32's ``EngineCoreProc.pause_scheduler``): ``pause`` is
``"new"`` (modes abort and wait, ``PauseState.PAUSED_NEW``: running requests drain, waiting
ones stay, new ones queue; no step once drained) or ``"all"`` (mode keep,
``PAUSED_ALL``: nothing is scheduled, so no step).  An RL weight transfer in flight freezes
the engine the same way.  A frozen engine still processes aborts: a client that went
away costs one step that schedules nothing and publishes the gauges (vLLM steps
whenever ``scheduler.has_finished_requests()``).

Field failures played on cue: ``decode_stall`` (vllm#45094, vllm#54919) and
``reprefill`` (vllm#52520); see :meth:`Engine.set_decode_stall` and
:meth:`Engine.set_reprefill_loop`.
"""

import asyncio
import collections
import itertools
import math
import time

_ids = itertools.count(1)


class RequestFailed(Exception):
    """The request failed inside the server (engine dead, restart)."""

    def __init__(self, status=500, message="", close=False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


class SimRequest:
    """One request in the engine."""

    __slots__ = ("id", "prompt_tokens", "max_tokens", "finish_reason_on_limit", "arrival", "scheduled_at",
                 "first_token_at", "last_token_at", "finished_at", "prefilled", "prefill_target", "generated",
                 "future", "on_token", "kind", "endpoint", "finish_reason", "deferred_until", "aborted",
                 "preemptions", "engine", "n", "max_tokens_param", "prompt_credited", "prefill_done_at",
                 "requeue_until")

    def __init__(self, prompt_tokens, max_tokens, *, finish_reason_on_limit="length", kind="http",
                 endpoint="/v1/completions", on_token=None, deferred_seconds=0.0, max_tokens_param=None):
        loop = asyncio.get_running_loop()
        self.id = next(_ids)
        self.prompt_tokens = max(1, int(prompt_tokens))
        self.max_tokens = max(1, int(max_tokens))
        self.max_tokens_param = max_tokens_param
        self.finish_reason_on_limit = finish_reason_on_limit
        self.arrival = time.time()
        self.deferred_until = self.arrival + deferred_seconds if deferred_seconds else 0.0
        self.scheduled_at = None
        self.first_token_at = None
        self.last_token_at = None
        self.finished_at = None
        self.prefilled = 0
        self.prefill_target = self.prompt_tokens
        self.generated = 0
        self.future = loop.create_future()
        self.on_token = on_token
        self.kind = kind
        self.endpoint = endpoint
        self.finish_reason = None
        self.aborted = False
        self.preemptions = 0
        self.engine = None
        self.n = 1
        self.prompt_credited = False   # prompt_tokens_total counted (once per request, as vLLM)
        self.prefill_done_at = None    # when its (last) prefill completed
        self.requeue_until = 0.0       # reprefill loop: not re-admitted before this

    def tokens_in_kv(self):
        return self.prefilled + max(self.generated - 1, 0) if self.prefilled >= self.prefill_target else self.prefilled

    def fail(self, exc):
        if not self.future.done():
            self.future.set_exception(exc)
            # nobody may wait for it (load generator stopped): keep asyncio quiet
            self.future.exception()


class Engine:
    """One engine core (``engine="i"``)."""

    def __init__(self, server, index):
        self.server = server
        self.index = index
        self.running = []
        self.waiting = collections.deque()
        self.inbox = []          # arrived while hung/asleep: not yet seen by the scheduler
        self.to_abort = set()    # aborts the scheduler has not processed yet
        self.hung = False
        self.steps = 0           # all steps, prefill-only ones included
        self.output_steps = 0    # steps observed in the iteration histogram
        self.last_step_at = None
        self.wake = asyncio.Event()
        self.task = None
        self.stopped = False
        self.pause = None        # None | "new" (pause modes abort, wait) | "all" (keep)
        self.cleanup_pending = False  # finished requests not yet cleared by a step
        self.decode_stall = None  # {"until": t (inf: for ever), "abort_after": s, "since": t}
        self.reprefill = None     # {"count_preemptions": bool, "requeue_seconds": s, "since": t}
        self.reprefill_victim = None
        self.reprefill_cycles = 0
        self.reprefill_steps_at = 0  # the step count when the last re-prefill cycle ended (tests measure cycles by it)
        self.stall_aborts = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self):
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"engine-{self.server.id}-{self.index}")

    def stop(self):
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    def fail_all(self, exc):
        for req in list(self.running) + list(self.waiting) + list(self.inbox):
            req.fail(exc)
        self.running.clear()
        self.waiting.clear()
        self.inbox.clear()

    def blocked(self):
        srv = self.server
        return self.hung or srv.dead or srv.sleep_level > 0 or srv.status != "listening"

    def load(self):
        return len(self.running) + len(self.waiting) + len(self.inbox)

    def mode(self):
        """How the next step runs: ``run``, ``drain`` (PAUSED_NEW) or ``frozen`` (PAUSED_ALL, weight transfer)."""
        if self.pause == "all" or self.server.weight_operations_in_flight():
            return "frozen"
        if self.pause == "new":
            return "drain"
        return "run"

    def has_work(self):
        """``EngineCore.has_work()``: whether the engine steps at all."""
        if self.to_abort or self.cleanup_pending:
            return True
        mode = self.mode()
        if mode == "frozen":
            return False
        if mode == "drain":
            return bool(self.running)
        return bool(self.running or self.waiting)

    def drained(self):
        """A pause (``wait``, ``abort``) is complete: nothing left that makes the engine step."""
        return not self.hung and not self.has_work()

    def in_flight(self):
        return list(self.running) + list(self.waiting) + list(self.inbox)

    # -- input ------------------------------------------------------------------------------
    def submit(self, req):
        req.engine = self.index
        if self.blocked():
            self.inbox.append(req)
        else:
            self.waiting.append(req)
        self.wake.set()

    def abort(self, req):
        """Client went away.  Processed by the scheduler at its next step, like vLLM.

        Returns True when the request was dropped at once (the engine had not seen it yet).
        """
        req.aborted = True
        if req in self.inbox:
            self.inbox.remove(req)
            return True
        self.to_abort.add(req.id)
        self.wake.set()
        return False

    def hang(self):
        self.hung = True

    def resume(self):
        self.hung = False
        self.kick()

    def set_pause(self, pause):
        self.pause = pause
        self.kick()

    def abort_all_for_pause(self):
        """``pause_scheduler(mode="abort")``: every request finishes with ``abort`` at once.

        The abort outputs reach the API server in one batch with outputs (so the step
        histogram observes a 0, as ``IterationStats`` exists for it) but without
        scheduler stats; the gauges are refreshed by the step that clears them.
        """
        now = time.time()
        victims = list(self.running) + list(self.waiting)
        self.running.clear()
        self.waiting.clear()
        self.to_abort.clear()
        if not victims:
            return 0
        self.server.reg.observe("vllm:iteration_tokens_total", self.index, 0.0)
        for req in victims:
            req.aborted = True
            self._finish(req, "abort", now)
        self.cleanup_pending = True
        self.wake.set()
        return len(victims)

    def set_decode_stall(self, seconds=0.0, abort_after=5.0):
        """vllm#45094 (``seconds`` 0: for ever) / vllm#54919 (ends after ``seconds``).

        Steps go on, admit requests and run prefill chunks; a prefill that completes is
        credited (``prompt_tokens_total``, one observation in the step histogram) but no
        token is generated for anyone.  A load-generator request that waited
        ``abort_after`` seconds for a token is given up by its client (aborted at the
        next step); with ``repeat`` the load generator sends a new one, which prefills.
        """
        seconds = float(seconds)
        abort_after = float(abort_after)
        if seconds < 0 or abort_after < 0:
            raise ValueError("seconds and abort_after must be >= 0")
        now = time.time()
        self.decode_stall = {"until": now + seconds if seconds > 0 else math.inf, "abort_after": abort_after,
                             "since": now, "seconds": seconds}
        self.wake.set()

    def set_reprefill_loop(self, count_preemptions=True, requeue_seconds=0.0):
        """vllm#52520: the head request prefills to 99 %, is preempted for lack of KV blocks, again and again.

        Nothing is emitted, so neither prompt tokens nor the step histogram move; each
        preemption is counted in ``num_preemptions_total`` only with ``count_preemptions``.
        One cycle takes ``ceil(0.99 * prompt / chunk_tokens) + 1`` steps (the prefill
        chunks, then the step whose scheduling preempts it), plus ``requeue_seconds``
        spent back in the waiting queue before it is admitted again.
        """
        requeue_seconds = float(requeue_seconds)
        if requeue_seconds < 0:
            raise ValueError("requeue_seconds must be >= 0")
        self.reprefill = {"count_preemptions": bool(count_preemptions), "requeue_seconds": requeue_seconds,
                          "since": time.time()}
        self.wake.set()

    def clear_faults(self):
        self.decode_stall = None
        self.reprefill = None
        self.reprefill_victim = None
        self.wake.set()

    def kick(self):
        if not self.blocked() and self.inbox:
            self.waiting.extend(self.inbox)
            self.inbox.clear()
        self.wake.set()

    # -- the loop ---------------------------------------------------------------------------
    async def _run(self):
        cfg = self.server.config
        idle_since = time.monotonic()
        while not self.stopped:
            self.wake.clear()
            if self.blocked():
                await self.wake.wait()
                idle_since = time.monotonic()
                continue
            if self.inbox:
                self.kick()
            if not self.has_work():
                ticks = float(cfg.v0_idle_ticks or 0)
                if ticks > 0 and self.mode() == "run":
                    remaining = ticks - (time.monotonic() - idle_since)
                    if remaining <= 0:
                        self._idle_tick()
                        idle_since = time.monotonic()
                        continue
                    try:
                        await asyncio.wait_for(self.wake.wait(), timeout=remaining)
                    except asyncio.TimeoutError:
                        pass
                    continue
                await self.wake.wait()
                continue
            now_wait = time.time()
            if self.mode() == "run" and self.waiting and not self.running and not self.to_abort and all(
                    r.deferred_until > now_wait for r in self.waiting):
                # deferred-only work: no engine step until the constraint clears
                self._publish()
                soonest = min(r.deferred_until for r in self.waiting) - now_wait
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=max(soonest, 0.001))
                except asyncio.TimeoutError:
                    pass
                continue
            await asyncio.sleep(1.0 / max(float(cfg.step_rate), 1e-6))
            if self.blocked() or self.stopped or not self.has_work():
                continue
            self._step()
            idle_since = time.monotonic()

    def _idle_tick(self):
        """V0 / V1 0.7.x: the stats logger observes a 0 into the step histogram while idle."""
        reg = self.server.reg
        reg.observe("vllm:iteration_tokens_total", self.index, 0.0)
        self._publish()

    def _step(self):
        srv = self.server
        cfg = srv.config
        reg = srv.reg
        eng = self.index
        now = time.time()
        mode = self.mode()
        self.steps += 1
        self.last_step_at = now
        self.cleanup_pending = False
        aborted = []
        if self.to_abort:
            for lst in (self.running, self.waiting):
                for req in list(lst):
                    if req.id in self.to_abort:
                        lst.remove(req)
                        aborted.append(req)
            self.to_abort.clear()
        if mode == "frozen":
            # nothing is scheduled (PAUSED_ALL, token budget 0): the step only clears aborts
            for req in aborted:
                self._finish(req, "abort", now)
            self._publish()
            return
        stall = self._stall_now(now)
        victim, preempted = self._reprefill_schedule(now) if self.reprefill else (None, None)
        # admission, FIFO, up to max_num_seqs (none while a pause drains)
        skipped = []
        while mode == "run" and self.waiting and len(self.running) < int(cfg.max_num_seqs):
            if victim is not None and (self.waiting[0] is not victim or victim is preempted
                                       or victim.requeue_until > now):
                break  # the looping request heads the queue: nothing passes it
            req = self.waiting.popleft()
            if req.deferred_until and req.deferred_until > now:
                skipped.append(req)
                continue
            if req.scheduled_at is None:
                req.scheduled_at = now
                reg.inc("vllm:prefix_cache_queries_total", eng, req.prompt_tokens)
                reg.observe("vllm:request_queue_time_seconds", eng, now - req.arrival)
            self.running.append(req)
        for req in reversed(skipped):
            self.waiting.appendleft(req)
        budget = int(cfg.chunk_tokens)
        iteration_tokens = 0
        emitted = False
        finished = []
        scheduled_tokens = 0
        # decodes first (one token each)
        for req in self.running:
            if req is victim or req.prefilled < req.prefill_target:
                continue
            if stall is not None:
                self._maybe_give_up(req, stall, now)
                continue
            budget -= 1
            scheduled_tokens += 1
            iteration_tokens += 1
            emitted = True
            if req.generated == 0:
                # prefilled during a decode stall (prompt counted then): its first token now
                self._first_token(req, now)
            else:
                req.generated += 1
                reg.inc("vllm:generation_tokens_total", eng)
                if req.last_token_at is not None:
                    reg.observe("vllm:inter_token_latency_seconds", eng, now - req.last_token_at)
                req.last_token_at = now
                if req.on_token is not None:
                    req.on_token(req, 1)
            if req.generated >= req.max_tokens:
                finished.append(req)
        # then prefill chunks with what is left of the budget
        for req in self.running:
            if req.prefilled < req.prefill_target:
                limit = self._reprefill_stop(req) if req is victim else req.prefill_target
                take = min(limit - req.prefilled, max(budget, 0))
                if take <= 0:
                    continue
                req.prefilled += take
                budget -= take
                scheduled_tokens += take
                if req is victim or req.prefilled < req.prefill_target:
                    continue
                req.prefill_done_at = now
                if stall is not None:
                    # the prefill completes and is credited; no token comes out of it
                    if not req.prompt_credited:
                        emitted = True
                        iteration_tokens += req.prompt_tokens
                        self._credit_prompt(req)
                    continue
                emitted = True
                if req.generated == 0:
                    # first token: the prompt is counted now (once per request)
                    iteration_tokens += (0 if req.prompt_credited else req.prompt_tokens) + 1
                    self._first_token(req, now)
                else:
                    # resumed after a preemption (recomputed): one more token
                    req.generated += 1
                    iteration_tokens += 1
                    reg.inc("vllm:generation_tokens_total", eng)
                    reg.observe("vllm:inter_token_latency_seconds", eng, now - req.last_token_at)
                    req.last_token_at = now
                    if req.on_token is not None:
                        req.on_token(req, 1)
                if req.generated >= req.max_tokens:
                    finished.append(req)
        if emitted:
            self.output_steps += 1
            reg.observe("vllm:iteration_tokens_total", eng, float(iteration_tokens))
        if cfg.mfu_metrics and scheduled_tokens:
            reg.inc("vllm:estimated_flops_per_gpu_total", eng, scheduled_tokens * float(cfg.flops_per_token))
            reg.inc("vllm:estimated_read_bytes_per_gpu_total", eng, 2.0e6 + scheduled_tokens * 4096.0)
            reg.inc("vllm:estimated_write_bytes_per_gpu_total", eng, scheduled_tokens * 1024.0)
        for req in finished:
            self.running.remove(req)
            self._finish(req, req.finish_reason_on_limit, now)
        for req in aborted:
            self._finish(req, "abort", now)
        self._preempt_if_full()
        self._publish()

    def _credit_prompt(self, req):
        reg = self.server.reg
        req.prompt_credited = True
        reg.inc("vllm:prompt_tokens_total", self.index, req.prompt_tokens)
        reg.inc("vllm:prompt_tokens_by_source_total", self.index, req.prompt_tokens, (("source", "local_compute"),))

    def _first_token(self, req, now):
        reg = self.server.reg
        if not req.prompt_credited:
            self._credit_prompt(req)
        req.generated = 1
        req.first_token_at = now
        req.last_token_at = now
        reg.inc("vllm:generation_tokens_total", self.index)
        reg.observe("vllm:time_to_first_token_seconds", self.index, now - req.arrival)
        if req.on_token is not None:
            req.on_token(req, 1)

    # -- field failures ---------------------------------------------------------------------
    def _stall_now(self, now):
        stall = self.decode_stall
        if stall is not None and now >= stall["until"]:
            self.decode_stall = stall = None
        return stall

    def _maybe_give_up(self, req, stall, now):
        """A load-generator client waiting ``abort_after`` s for a token aborts its request."""
        limit = stall["abort_after"]
        if limit <= 0 or req.kind != "load" or req.aborted:
            return
        since = req.last_token_at if req.generated > 0 else req.prefill_done_at
        if since is not None and now - since >= limit:
            self.stall_aborts += 1
            self.abort(req)

    @staticmethod
    def _reprefill_stop(req):
        """Where the looping request's prefill stops: about 99 % of what it must compute."""
        return max(1, int(req.prefill_target * 0.99))

    def _reprefill_schedule(self, now):
        """Pick the looping request (the head) and preempt it when its prefill reached 99 %.

        Returns ``(victim, preempted_now)``.
        """
        victim = self.reprefill_victim
        if victim is None or not (victim in self.running or victim in self.waiting):
            victim = next(iter(self.running), None)
            if victim is None:
                victim = next((r for r in self.waiting if not (r.deferred_until and r.deferred_until > now)), None)
                if victim is not None:
                    # it heads the queue from now on
                    self.waiting.remove(victim)
                    self.waiting.appendleft(victim)
            self.reprefill_victim = victim
        if victim is None or victim not in self.running:
            return victim, None
        if victim.prefilled < self._reprefill_stop(victim):
            return victim, None
        # scheduling its next chunk finds no free KV block: it preempts itself (recompute)
        self.running.remove(victim)
        victim.preemptions += 1
        victim.prefill_target = victim.prompt_tokens + max(victim.generated - 1, 0)
        victim.prefilled = 0
        victim.requeue_until = now + self.reprefill["requeue_seconds"]
        self.waiting.appendleft(victim)
        self.reprefill_cycles += 1
        self.reprefill_steps_at = self.steps
        if self.reprefill["count_preemptions"]:
            self.server.reg.inc("vllm:num_preemptions_total", self.index)
        return victim, victim

    def _finish(self, req, reason, now):
        reg = self.server.reg
        eng = self.index
        req.finish_reason = reason
        req.finished_at = now
        reg.inc("vllm:request_success_total", eng, 1.0, (("finished_reason", reason),))
        if reason != "abort" or req.first_token_at is not None:
            reg.observe("vllm:e2e_request_latency_seconds", eng, now - req.arrival)
            reg.observe("vllm:request_prompt_tokens", eng, float(req.prompt_tokens))
            reg.observe("vllm:request_generation_tokens", eng, float(req.generated))
            reg.observe("vllm:request_max_num_generation_tokens", eng, float(req.max_tokens))
            reg.observe("vllm:request_params_n", eng, float(req.n))
            if req.max_tokens_param is not None:
                reg.observe("vllm:request_params_max_tokens", eng, float(req.max_tokens_param))
            reg.observe("vllm:request_num_preemptions", eng, float(req.preemptions))
            reg.observe("vllm:request_prefill_kv_computed_tokens", eng, float(req.prompt_tokens))
            if req.scheduled_at is not None:
                reg.observe("vllm:request_inference_time_seconds", eng, now - req.scheduled_at)
                if req.first_token_at is not None:
                    reg.observe("vllm:request_prefill_time_seconds", eng, req.first_token_at - req.scheduled_at)
                    reg.observe("vllm:request_decode_time_seconds", eng, now - req.first_token_at)
                    if req.generated > 1:
                        reg.observe("vllm:request_time_per_output_token_seconds", eng,
                                    (now - req.first_token_at) / (req.generated - 1))
        if not req.future.done():
            req.future.set_result(req)
        self.server.on_request_done(req)

    def _used_blocks(self):
        bs = max(int(self.server.config.kv_block_size), 1)
        return sum(math.ceil(r.tokens_in_kv() / bs) for r in self.running)

    def _preempt_if_full(self):
        """KV cache full: preempt the newest running request (recompute), as V1 does."""
        total = int(self.server.config.kv_num_blocks)
        while len(self.running) > 1 and self._used_blocks() > total:
            victim = self.running.pop()
            victim.preemptions += 1
            victim.prefill_target = victim.prompt_tokens + max(victim.generated - 1, 0)
            victim.prefilled = 0
            self.waiting.appendleft(victim)
            self.server.reg.inc("vllm:num_preemptions_total", self.index)

    def kv_usage(self):
        total = max(int(self.server.config.kv_num_blocks), 1)
        return min(self._used_blocks() / total, 1.0)

    def _publish(self):
        """SchedulerStats after a step: the gauges the API server exposes."""
        reg = self.server.reg
        eng = self.index
        now = time.time()
        deferred = sum(1 for r in self.waiting if r.deferred_until and r.deferred_until > now)
        reg.set("vllm:num_requests_running", eng, len(self.running))
        reg.set("vllm:num_requests_waiting", eng, len(self.waiting))
        reg.set("vllm:num_requests_waiting_by_reason", eng, len(self.waiting) - deferred, (("reason", "capacity"),))
        reg.set("vllm:num_requests_waiting_by_reason", eng, deferred, (("reason", "deferred"),))
        reg.set("vllm:kv_cache_usage_perc", eng, self.kv_usage())
        reg.reported.add(eng)

    def snapshot(self):
        reg = self.server.reg
        eng = self.index
        hist = reg.get("vllm:iteration_tokens_total", eng)
        return {
            "index": eng,
            "hung": self.hung,
            "running": len(self.running),
            "waiting": len(self.waiting),
            "inbox": len(self.inbox),
            "steps": self.steps,
            "output_steps": self.output_steps,
            "reported_running": reg.get("vllm:num_requests_running", eng),
            "reported_waiting": reg.get("vllm:num_requests_waiting", eng),
            "kv_cache_usage_perc": reg.get("vllm:kv_cache_usage_perc", eng),
            "iteration_tokens_count": hist.count if hist else None,
            "iteration_tokens_sum": hist.sum if hist else None,
            "generation_tokens": reg.get("vllm:generation_tokens_total", eng),
            "prompt_tokens": reg.get("vllm:prompt_tokens_total", eng),
            "preemptions": reg.get("vllm:num_preemptions_total", eng),
            "request_success": {
                reason: reg.get("vllm:request_success_total", eng, (("finished_reason", reason),))
                for reason in ("stop", "length", "abort", "error", "repetition")
            },
            "prefilling": sum(1 for r in self.running if r.prefilled < r.prefill_target),
            "last_step_at": self.last_step_at,
            "pause": self.pause,
            "mode": self.mode(),
            "decode_stall": None if self.decode_stall is None else {
                "seconds": self.decode_stall["seconds"], "abort_after": self.decode_stall["abort_after"],
                "since": self.decode_stall["since"]},
            "stall_aborts": self.stall_aborts,
            "reprefill": self.reprefill,
            "reprefill_cycles": self.reprefill_cycles,
            "reprefill_steps_at": self.reprefill_steps_at,
            "reprefill_victim_prefilled": None if self.reprefill_victim is None else self.reprefill_victim.prefilled,
        }
