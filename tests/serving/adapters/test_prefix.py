"""The prefix-cache adapters on SGLang's own scheduler pieces, on the CPU: ``PrefillAdder``, ``Req``, ``RadixCache``,
its token allocator and request pool, driven round by round as SGLang's scheduler drives them (admission, chunked
prefill, chunk stashing, decode allocation, release).

No model runs, so each KV slot records what computed it: the digest of the tokens up to its position and the
prefill chunk it was computed in (or ``decode``). A chunk's KV is a function of exactly that (the property the
grid experiment showed on GPUs, docs/results/prefix_grid.md), so a request gets the cold run's bits iff every
KV slot it reads has the provenance the cold run gives that position, and it computes the cold run's remaining
chunks. That is what these tests check, with the negative control of the same harness serving SGLang's own
hits (the prefix cache's rules switched off): they break it.
"""

import random
from array import array

import pytest
import torch
from sglang.srt.runtime_context import publish

from corun_sglang.core import prefix_cache as pc
from corun_sglang.serving.adapters import prefix

G = pc.GRID
POOL = 40_000


def _digests(tokens):
    out, h = [], 0
    for t in tokens:
        h = hash((h, t))
        out.append(h)
    return out


def _as_the_gpu_writer_reads(prefix):
    """A request's prefix as SGLang's GPU writer of the request pool reads it (``write_req_to_token_pool_triton``
    in sglang/kernels/ops/memory/common.py): its memory through an int64 pointer, whatever its dtype. (On the CPU
    SGLang copies it with a dtype cast instead, which would hide a prefix of another dtype.)"""
    raw = prefix.contiguous().view(torch.uint8)
    need = 8 * len(prefix)
    assert raw.numel() >= need, (f"SGLang's GPU writer would read {need} bytes of this {prefix.dtype} prefix of "
                                 f"{raw.numel()} bytes: past its end, and slot numbers made of two int32s")
    return raw[:need].view(torch.int64)


class Sim:
    """SGLang's prefill and decode loop over its own cache classes, with provenance for every KV slot."""

    def __init__(self, pool=POOL, n=8, rules=True):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.mem_cache.radix_cache import RadixCache

        self.alloc = TokenToKVPoolAllocator(pool, torch.bfloat16, "cpu", None, False)
        self.r2t = ReqToTokenPool(size=64, max_context_len=16384, device="cpu", enable_memory_saver=False)
        self.tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=self.r2t,
                                               token_to_kv_pool_allocator=self.alloc, page_size=1))
        self.running = ScheduleBatch(reqs=[], device="cpu")
        self.waiting, self.chunked, self.n, self.done = [], None, n, []
        self.provenance = {}  # slot -> (digest of tokens through its position, chunk start, chunk end)
        self.chunks = {}  # rid -> [(start, end)] computed
        self.read = {}  # rid -> the provenance of the prompt KV it reads, from its last prefill step on
        self.max_committed = 0

    def submit(self, rid, tokens, max_new=4, logprob_start=-1):
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        sp = SamplingParams(max_new_tokens=max_new, ignore_eos=True)
        sp.normalize(None)
        req = Req(str(rid), "", array("q", tokens), sp, vocab_size=1 << 20, return_logprob=logprob_start >= 0)
        req.logprob_start_len = logprob_start
        self.waiting.append(req)
        self.chunks[req.rid] = []
        return req

    def _alloc(self, n):
        from sglang.srt.mem_cache.common import evict_from_tree_cache

        evict_from_tree_cache(self.tree, n)
        slots = self.alloc.alloc(n)
        assert slots is not None, f"the pool ran out of KV for {n} tokens: admission over-committed"
        return slots

    def _compute(self, req):
        """What the model does for a prefill batch of ``req``: KV for its extend range, in one chunk."""
        from sglang.srt.managers.schedule_batch import ReqKvInfo

        start, end = req.extend_range.start, req.extend_range.end
        if req.req_pool_idx is None:
            self.r2t.alloc([req])
        self.r2t.req_to_token[req.req_pool_idx, :start] = _as_the_gpu_writer_reads(req.prefix_indices)[:start]
        slots = self._alloc(end - start)
        self.r2t.req_to_token[req.req_pool_idx, start:end] = slots
        digests = _digests(req.origin_input_ids[:end])
        for p, slot in zip(range(start, end), slots.tolist()):
            self.provenance[slot] = (digests[p], start, end)
        self.chunks[req.rid].append((start, end))
        req.kv = ReqKvInfo(kv_allocated_len=end, swa_evicted_seqlen=0)
        req.kv_committed_len = end
        if end == len(req.origin_input_ids):  # the step that gives its first token: what it reads from now on
            self.read[req.rid] = self._prompt_kv(req)

    def _prompt_kv(self, req):
        return [self.provenance.get(slot) for slot in
                self.r2t.req_to_token[req.req_pool_idx, :len(req.origin_input_ids) - 1].tolist()]

    def step(self):
        """One scheduling round: a prefill batch if one forms, else a decode step."""
        from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

        adder = PrefillAdder(1, self.tree, self.alloc, self.running, 1.0, 16384, G,
                             max_running_requests=self.n, prefill_max_requests=1)
        if self.chunked is not None:
            self.chunked.init_next_round_input()
            self.chunked = adder.add_chunked_req(self.chunked)
        for req in self.waiting:
            req.init_next_round_input(self.tree)
            if adder.add_one_req(req, has_chunked_req=self.chunked is not None,
                                 truncation_align_size=None) != AddReqResult.CONTINUE:
                break
        if adder.new_chunked_req is not None:
            self.chunked = adder.new_chunked_req
        batch = adder.can_run_list
        if not batch:
            return self._decode()
        self.waiting = [r for r in self.waiting if r not in batch]
        for req in batch:
            self._compute(req)
            if req is self.chunked:
                self.chunked.inflight_middle_chunks += 1
                self.tree.cache_unfinished_req(req, chunked=True)  # the scheduler's stash
            else:
                req.output_ids.append(1)
                req.prefix_indices = self.r2t.req_to_token[req.req_pool_idx, :len(req.origin_input_ids)].clone()
                self.running.reqs.append(req)
        self._check_admission()
        return True

    def _decode(self):
        from sglang.srt.mem_cache.common import release_kv_cache

        if not self.running.reqs:
            return False
        for req in list(self.running.reqs):
            assert self._prompt_kv(req) == self.read[req.rid], f"{req.rid}: its prompt KV changed while it ran"
            if len(req.output_ids) >= req.sampling_params.max_new_tokens:
                release_kv_cache(req, self.tree)
                self.running.reqs.remove(req)
                self.done.append(req)
                continue
            seq = len(req.origin_input_ids) + len(req.output_ids)
            slot = self._alloc(1)
            self.r2t.req_to_token[req.req_pool_idx, seq - 1:seq] = slot
            self.provenance[slot.item()] = ("decode", req.rid, seq - 1)
            req.output_ids.append(1)
            req.kv.kv_allocated_len = req.kv_committed_len = seq
        self._check_admission()
        return True

    def _check_admission(self):
        """What running requests may still write fits the pool beside what they share."""
        from corun_sglang.serving.adapters import state

        own = sum(state.reserved(r, 1) for r in self.running.reqs + ([self.chunked] if self.chunked else []))
        assert own + self.tree.protected_size() <= self.alloc.size

    def run(self):
        rounds = 0
        while self.waiting or self.running.reqs or self.chunked is not None:
            if not self.step():
                break
            rounds += 1
            assert rounds < 100_000
        assert not self.waiting and self.chunked is None

    def check_bits(self, req):
        """Every KV slot ``req`` read has the provenance the cold run gives its position."""
        read, prompt = self.read[req.rid], len(req.origin_input_ids)
        digests = _digests(req.origin_input_ids)
        for p in range(prompt - 1):
            start = max((b for b in [0, *pc.boundaries(prompt)] if b <= p), default=0)
            end = min(b for b in pc.boundaries(prompt) if b > p)
            assert read[p] == (digests[p], start, end), (req.rid, p)

    def flush(self):
        """SGLang's ``/flush_cache`` at idle: the tree reset, then the request and KV pools emptied."""
        assert not self.waiting and not self.running.reqs and self.chunked is None
        self.tree.reset()
        self.r2t.clear()
        self.alloc.clear()

    def pool_whole(self):
        """SGLang's own invariant at idle: free + evictable + protected is the pool."""
        return self.alloc.available_size() + self.tree.evictable_size() + self.tree.protected_size() == self.alloc.size


@pytest.fixture
def prefix_args(make_args):
    def publish_args(on: bool = True):
        args = make_args(corun=True, corun_prefix_cache=on)
        publish(args, role="scheduler")
        return args

    return publish_args


def _prompt(rng, n, base=()):
    return list(base) + [rng.randrange(3, 1 << 19) for _ in range(n - len(base))]


def test_the_config_turns_the_radix_cache_on_with_its_grid(prefix_args):
    args = prefix_args()
    assert args.disable_radix_cache is False and args.chunked_prefill_size == G
    cfg = args.corun_config
    assert cfg.prefix_grid == G and cfg.prefill_pack is None and "prefix_cache=on" in cfg.summary()
    assert prefix_args(False).corun_config.prefix_grid is None


def test_cold_requests_prefill_on_the_grid_then_the_tail_then_the_last_token(prefix_args):
    prefix_args()
    sim = Sim()
    rng = random.Random(0)
    for i, n in enumerate([1, 2, 700, G, G + 1, G + 2, 2 * G + 300, 3 * G + 1]):
        sim.submit(i, _prompt(rng, n))
    sim.run()
    for req in sim.done:
        assert sim.chunks[req.rid] == [(a, b) for a, b in zip([0, *pc.boundaries(len(req.origin_input_ids))],
                                                              pc.boundaries(len(req.origin_input_ids)))]
        sim.check_bits(req)
    assert sim.pool_whole() and sim.tree.protected_size() == 0


def test_warm_and_partial_hits_compute_the_cold_runs_remaining_chunks_and_read_its_kv(prefix_args):
    prefix_args()
    sim, rng = Sim(), random.Random(1)
    system = _prompt(rng, 2 * G + 100)
    sim.submit("cold", system + _prompt(rng, 500))
    sim.run()
    sim.submit("same", list(sim.done[0].origin_input_ids))  # a whole-prompt hit: the stored tail
    sim.submit("other-question", system + _prompt(rng, 300))  # shares 2 grid chunks of the system prompt
    sim.submit("short", system[:G + 10])  # shares the first chunk only
    sim.submit("edited-early", system[:5] + [7] + system[6:])  # shares nothing
    sim.run()
    by = {r.rid: r for r in sim.done}
    assert sim.chunks["same"] == [(len(system) + 499, len(system) + 500)]  # the last token alone
    assert sim.chunks["other-question"][0][0] == 2 * G
    assert sim.chunks["short"][0][0] == G
    assert sim.chunks["edited-early"][0][0] == 0
    for rid in by:
        sim.check_bits(by[rid])
    assert sim.pool_whole()


def test_a_group_of_identical_prompts_prefills_once(prefix_args):
    prefix_args()
    sim, rng = Sim(n=8), random.Random(2)
    prompt = _prompt(rng, G + 600)
    for i in range(8):
        sim.submit(f"sample{i}", prompt, max_new=16)
    sim.run()
    computed = sum(b - a for chunks in sim.chunks.values() for a, b in chunks)
    assert computed == len(prompt) + 7  # the prompt once, then each other sample's last token
    for req in sim.done:
        sim.check_bits(req)
    assert sim.pool_whole() and len(prefix.store(sim.tree)) == 1


def test_a_multi_turn_conversation_reuses_the_grid_chunks_of_earlier_turns(prefix_args):
    prefix_args()
    sim, rng = Sim(), random.Random(3)
    history, lengths = _prompt(rng, 900), []
    for turn in range(4):
        history = history + _prompt(rng, 700)  # the answer and the next question
        lengths.append(len(history))
        sim.submit(f"turn{turn}", history)
        sim.run()
    for req in sim.done:
        sim.check_bits(req)
    # each turn starts where the grid chunks of the turn before ended
    assert [sim.chunks[f"turn{t}"][0][0] for t in range(4)] == [0, *(pc.frontier(n) for n in lengths[:-1])]
    assert lengths == [1600, 2300, 3000, 3700] and pc.frontier(3000) == 2 * G
    assert sim.pool_whole()


def test_prompt_logprobs_cap_the_hit_where_they_start(prefix_args):
    prefix_args()
    sim, rng = Sim(), random.Random(4)
    prompt = _prompt(rng, 2 * G + 50)
    sim.submit("cold", prompt)
    sim.run()
    sim.submit("logprobs-from-1500", prompt, logprob_start=1500)
    sim.submit("logprobs-from-0", prompt, logprob_start=0)
    sim.run()
    assert sim.chunks["logprobs-from-1500"][0][0] == G and sim.chunks["logprobs-from-0"][0][0] == 0
    for req in sim.done:
        sim.check_bits(req)


def test_under_memory_pressure_cached_kv_is_evicted_never_what_a_running_request_holds(prefix_args):
    prefix_args()
    sim, rng = Sim(pool=9_000, n=4), random.Random(5)
    shared = _prompt(rng, G + 40)
    for i in range(40):  # far more distinct prompts than the pool caches, some sharing a prefix and a group
        base = shared if i % 3 == 0 else ()
        sim.submit(i, list(shared) if i % 5 == 0 else _prompt(rng, rng.randrange(200, 2 * G + 200), base),
                   max_new=rng.randrange(1, 40))
    sim.run()
    assert len(sim.done) == 40
    assert sum(b - a for chunks in sim.chunks.values() for a, b in chunks) > 2 * 9_000  # slots were reused
    for req in sim.done:
        sim.check_bits(req)
    assert sim.pool_whole() and sim.tree.protected_size() == 0


def test_negative_control_sglangs_own_hits_read_kv_the_cold_run_computes_otherwise(prefix_args,
                                                                                    monkeypatch):
    """The same harness with the rules off (SGLang's own matches, inserts and chunks) fails the bit check: a hit
    that ends off the grid, or whole-prompt hits, read KV computed in other chunks than the cold run's."""
    prefix_args()
    for name in ("match_prefix", "cache_unfinished_req", "cache_finished_req", "add_chunked_req"):
        monkeypatch.setattr(prefix, name, lambda original, self, *a, **k: original(self, *a, **k))
    monkeypatch.setattr(prefix, "first_chunk", lambda req: G)
    sim, rng = Sim(), random.Random(6)
    system = _prompt(rng, G + 300)
    sim.submit("cold", system + _prompt(rng, 200))
    sim.run()
    sim.submit("warm", system + _prompt(rng, 400))
    sim.run()
    warm = next(r for r in sim.done if r.rid == "warm")
    with pytest.raises(AssertionError):
        sim.check_bits(warm)


def _cold_then_flush(sim, prompt):
    """A prompt served cold (its tail stored), then SGLang's flush; whether the pool is whole after it."""
    sim.submit("cold", prompt)
    sim.run()
    sim.flush()
    return sim.pool_whole()


def _again(sim, prompt):
    """Other prompts that take the slots the emptied pool hands out again, then the prompt cold and warm."""
    rng = random.Random(8)
    for i in range(6):
        sim.submit(f"other{i}", _prompt(rng, G + 700))
    sim.run()
    sim.submit("cold-again", prompt)
    sim.run()
    sim.submit("warm-again", prompt)
    sim.run()
    return {r.rid: r for r in sim.done}


def test_a_flush_empties_the_tail_store_with_the_tree(prefix_args):
    prefix_args()
    sim = Sim(pool=6_000)
    prompt = _prompt(random.Random(7), G + 500)
    assert _cold_then_flush(sim, prompt) and len(prefix.store(sim.tree)) == 0
    by = _again(sim, prompt)
    assert sim.chunks["warm-again"] == [(len(prompt) - 1, len(prompt))]  # its own tail, stored after the flush
    for req in by.values():
        sim.check_bits(req)
    assert sim.pool_whole()


def test_negative_control_a_store_kept_through_the_flush_hands_out_slots_twice(prefix_args, monkeypatch):
    """The same run with the store kept: its tail counts as evictable KV that the emptied pool also counts as
    free, and evicting it frees slots that running requests were given again."""
    prefix_args()
    monkeypatch.setattr(pc.TailStore, "clear", lambda self: [])
    sim = Sim(pool=6_000)
    prompt = _prompt(random.Random(7), G + 500)
    assert not _cold_then_flush(sim, prompt)
    with pytest.raises(AssertionError, match="prompt KV changed while it ran"):
        _again(sim, prompt)
