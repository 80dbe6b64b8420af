"""``adapters.requests``: the tokenizer-side request check, on SGLang's own ``TokenizerManager`` and the
request corpus; pass-through without --corun."""

import types

import pytest

from adapters.helpers import _generate


def _request_of(case, tm):
    """A corpus case as the ``GenerateReqInput`` its endpoint hands the tokenizer manager (OpenAI bodies
    through SGLang's own protocol models and conversions)."""
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion
    from sglang.srt.managers.io_struct import GenerateReqInput

    from corun_sglang import request_corpus

    if case.path == request_corpus.GENERATE:
        return GenerateReqInput(**case.body)
    if case.path == request_corpus.COMPLETIONS:
        serving = OpenAIServingCompletion.__new__(OpenAIServingCompletion)
        serving.tokenizer_manager = tm
        serving.template_manager = types.SimpleNamespace(completion_template_name=None)
        serving.allowed_custom_labels = None
        return serving._convert_to_internal_request(CompletionRequest(**case.body))[0]
    request = ChatCompletionRequest(**case.body)  # as serving_chat builds it, the prompt already tokenized
    return GenerateReqInput(
        input_ids=list(request_corpus.PROMPT), stream=request.stream, rid=request.rid, return_text_in_logprobs=True,
        sampling_params=request.to_sampling_params(stop=[], model_generation_config={}),
        return_logprob=request.logprobs, logprob_start_len=-1, top_logprobs_num=request.top_logprobs or 0,
    )


def _corpus():
    from corun_sglang import request_corpus

    return [pytest.param(c, id=c.name) for c in request_corpus.CASES]


@pytest.mark.parametrize("case", _corpus())
def test_each_corpus_request_is_served_or_refused_by_name_before_the_scheduler(tokenizer_manager, case):
    tm = tokenizer_manager()
    if case.status == 200:
        _generate(tm, _request_of(case, tm))
        assert tm.sent
        return
    with pytest.raises(ValueError) as err:
        _generate(tm, _request_of(case, tm))
    assert all(name in str(err.value) for name in case.names), str(err.value)
    assert not tm.sent and not tm.rid_to_state  # nothing reached the scheduler, nothing left behind


def test_without_corun_the_check_passes_everything_through(tokenizer_manager):
    from sglang.srt.managers.io_struct import GenerateReqInput

    tm = tokenizer_manager(corun=False)
    _generate(tm, GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"frequency_penalty": 0.5, "sampling_seed": 2**70},
                                   top_logprobs_num=3, return_logprob=True))
    assert tm.sent[0].sampling_params.frequency_penalty == 0.5 and tm.sent[0].sampling_params.sampling_seed == 2**70
