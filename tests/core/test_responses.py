"""``responses``: what a response carries besides its output, stamped without changing anything else."""

import json

from corun_sglang.core import responses


def test_a_stream_chunk_gets_the_fingerprint_and_each_choice_its_seed():
    chunk = {"id": "r1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "é"},
             "logprobs": {"content": [{"logprob": -0.123456789012345678}]}}], "model": "m"}
    event = "data: " + json.dumps(chunk) + "\n\n"
    out = responses.stamp_event(event, "fp_0123456789ab", {"r1": 5, "r2": 6})
    assert out.startswith("data: ") and out.endswith("\n\n")
    got = json.loads(out[len("data: "):])
    assert got == {**chunk, "system_fingerprint": "fp_0123456789ab",
                   "choices": [{**chunk["choices"][0], "sampling_seed": 5}]}  # every value as it was


def test_a_usage_chunk_gets_the_fingerprint():
    event = 'data: {"id":"r1","object":"text_completion","choices":[],"usage":{"total_tokens":3}}\n\n'
    got = json.loads(responses.stamp_event(event, "fp_x", {})[6:])
    assert got["system_fingerprint"] == "fp_x" and got["choices"] == []


def test_other_events_pass_unchanged():
    for event in ["data: [DONE]\n\n", 'data: {"object":"error","message":"m","code":400}\n\n', "data: {bad\n\n", ": ping\n\n"]:
        assert responses.stamp_event(event, "fp_x", {"r": 1}) == event


def test_meta_info_and_choice_seeds():
    meta = {"id": "r", "finish_reason": None}
    assert responses.stamp_meta(meta, "fp_x", 9) == {"id": "r", "finish_reason": None, "system_fingerprint": "fp_x",
                                                     "sampling_seed": 9}
    assert responses.choice_seeds([{"meta_info": {"sampling_seed": 1}}, {"meta_info": {}}]) == [1, None]


def test_prompt_logprobs_without_top_logprobs_get_an_empty_top_logprobs_key():
    meta = {"input_token_logprobs": [[None, 1, None]], "output_token_logprobs": []}
    assert responses.complete_logprobs(meta)["input_top_logprobs"] is None
    kept = {"input_token_logprobs": [], "input_top_logprobs": [[1.0]]}
    assert responses.complete_logprobs(kept)["input_top_logprobs"] == [[1.0]]
    assert "input_top_logprobs" not in responses.complete_logprobs({"output_token_logprobs": []})
