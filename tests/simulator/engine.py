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
                 "preemptions", "engine", "n", "max_tokens_param")

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
            if not self.running and not self.waiting and not self.to_abort:
                ticks = float(cfg.v0_idle_ticks or 0)
                if ticks > 0:
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
            if self.waiting and not self.running and not self.to_abort and all(
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
            if self.blocked() or self.stopped:
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
        self.steps += 1
        self.last_step_at = now
        aborted = []
        if self.to_abort:
            for lst in (self.running, self.waiting):
                for req in list(lst):
                    if req.id in self.to_abort:
                        lst.remove(req)
                        aborted.append(req)
            self.to_abort.clear()
        # admission, FIFO, up to max_num_seqs
        skipped = []
        while self.waiting and len(self.running) < int(cfg.max_num_seqs):
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
            if req.prefilled >= req.prefill_target and req.generated > 0:
                req.generated += 1
                budget -= 1
                scheduled_tokens += 1
                iteration_tokens += 1
                emitted = True
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
                take = min(req.prefill_target - req.prefilled, max(budget, 0))
                if take <= 0:
                    continue
                req.prefilled += take
                budget -= take
                scheduled_tokens += take
                if req.prefilled >= req.prefill_target:
                    emitted = True
                    if req.generated == 0:
                        # first token: the prompt is counted now
                        req.generated = 1
                        req.first_token_at = now
                        req.last_token_at = now
                        iteration_tokens += req.prompt_tokens + 1
                        reg.inc("vllm:prompt_tokens_total", eng, req.prompt_tokens)
                        reg.inc("vllm:prompt_tokens_by_source_total", eng, req.prompt_tokens,
                                (("source", "local_compute"),))
                        reg.inc("vllm:generation_tokens_total", eng)
                        reg.observe("vllm:time_to_first_token_seconds", eng, now - req.arrival)
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
        }
