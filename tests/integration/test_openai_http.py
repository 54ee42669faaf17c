"""The OpenAI-compatible HTTP front door, driven by the official ``openai`` client, against a
real cluster on the real default model (SmolLM2-135M-Instruct), checked against transformers."""

from __future__ import annotations

import http.client
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import openai
import pytest
import torch

from common.model.location import ensure_model
from pdserve.cluster import LocalCluster
from tests.integration.conftest import SMOLLM2_WORKER_ARGS, assert_pools_whole, start_cluster
from wire.v1 import gateway_pb2, gateway_pb2_grpc

MODEL = "smollm2-135m"
KEY = "pk-openai-test"
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one short sentence."},
     {"role": "user", "content": "Name a colour of the sky."}],
]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_model(MODEL)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[LocalCluster]:
    tmp = tmp_path_factory.mktemp("openai")
    keys = tmp / "api-keys.json"
    keys.write_text(json.dumps({"tenants": {"team": {"api_keys": [KEY]}}}))
    # the first start measures the workers' cost models on the real model (then cached)
    # each token message as it comes: on cores shared with the workers the launcher otherwise holds
    # messages 25 ms apart (``gateway.stream_interval``), and a step faster than that merges two
    # tokens into one message, which the load tester's one-arrival-per-token check would read as text held back
    cluster = start_cluster(tmp, timeout_s=400, preset=MODEL, http_port=0, api_key=KEY,
                            gateway_args=("--api-keys", str(keys), "--stream-interval-ms", "0"),
                            worker_args=SMOLLM2_WORKER_ARGS)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def client(served: LocalCluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{served.http_address}/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> dict[int, tuple[str, int, int]]:
    """transformers' greedy reply to each chat: (text, prompt tokens, completion tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    replies = {}
    for i, chat in enumerate(CHATS):
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)[0, ids["input_ids"].shape[1]:]
        replies[i] = (tokenizer.decode(out, skip_special_tokens=True), ids["input_ids"].shape[1], len(out))
    return replies


@pytest.mark.parametrize("which", range(len(CHATS)))
def test_a_greedy_chat_completion_is_transformers_reply(client, reference, which):
    text, prompt_tokens, completion_tokens = reference[which]
    reply = client.chat.completions.create(model=MODEL, messages=CHATS[which], temperature=0, max_tokens=24)
    assert reply.choices[0].message.content == text
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason == ("length" if completion_tokens == 24 else "stop")
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt_tokens, completion_tokens)
    assert reply.usage.total_tokens == prompt_tokens + completion_tokens
    assert reply.model == MODEL and reply.object == "chat.completion"


def test_streamed_chunks_join_to_the_same_reply_and_end_with_usage(client, reference):
    text, prompt_tokens, completion_tokens = reference[0]
    chunks = list(client.chat.completions.create(model=MODEL, messages=CHATS[0], temperature=0, max_tokens=24,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == completion_tokens
    assert chunks[-1].usage.prompt_tokens == prompt_tokens
    assert len({c.id for c in chunks}) == 1


def test_grpc_messages_give_the_same_tokens_as_http(served, client, reference):
    text, _, completion_tokens = reference[1]
    request = gateway_pb2.GenerateRequest(sampling=gateway_pb2.SamplingParams(max_tokens=24))
    for m in CHATS[1]:
        request.messages.messages.add(role=m["role"], content=m["content"])
    with grpc.insecure_channel(served.address) as channel:
        responses = list(gateway_pb2_grpc.GatewayStub(channel).Generate(
            request, metadata=(("authorization", f"Bearer {KEY}"),)))
    assert "".join(r.text for r in responses) == text
    assert responses[-1].usage.completion_tokens == completion_tokens


def test_completions_of_text_and_of_token_ids(client, model_dir):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(model_dir)).encode("The capital of France is")
    by_text = client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0, max_tokens=6)
    by_ids = client.completions.create(model=MODEL, prompt=ids, temperature=0, max_tokens=6)
    assert by_text.choices[0].text == by_ids.choices[0].text and by_text.choices[0].text.startswith(" Paris")
    assert by_text.usage.prompt_tokens == len(ids) and by_text.object == "text_completion"
    streamed = client.completions.create(model=MODEL, prompt=ids, temperature=0, max_tokens=6, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == by_ids.choices[0].text


def test_models_health_and_metrics(served, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert urllib.request.urlopen(f"http://{served.http_address}/health", timeout=5).status == 200
    metrics = urllib.request.urlopen(f"http://{served.http_address}/metrics", timeout=5).read().decode()
    assert "pdserve:requests_total" in metrics or "pdserve:" in metrics


def _error(call) -> tuple[int, dict[str, object]]:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value.status_code, caught.value.body  # type: ignore[return-value]


def test_each_error_has_its_status_and_an_openai_error_body(served, client):
    chat = CHATS[0]
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat, top_p=1.5))
    assert status == 400 and body["param"] == "top_p" and body["type"] == "invalid_request_error"
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat, n=0))
    assert status == 400 and body["param"] == "n"
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat, n=65))
    assert status == 400 and body["param"] == "n"
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=[]))
    assert status == 400 and "messages" in body["message"]
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat, max_tokens=10**6))
    assert status == 400 and "limit" in body["message"]
    status, body = _error(lambda: client.chat.completions.create(model="gpt-4o", messages=chat))
    assert status == 404 and body["code"] == "model_not_found"
    wrong_key = openai.OpenAI(base_url=f"http://{served.http_address}/v1", api_key="pk-wrong", max_retries=0)
    status, body = _error(lambda: wrong_key.chat.completions.create(model=MODEL, messages=chat))
    assert status == 401 and body["type"] == "authentication_error"
    # a TTFT no worker can meet (1 µs: over before the request reaches the guard) is refused at once
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat,
                                                                 extra_body={"slo": {"ttft_ms": 0.001, "tpot_ms": 1000}}))
    assert status == 429 and body["type"] == "rate_limit_error", body
    status, _ = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat,
                                                              extra_headers={"x-slo-ttft-ms": "0.001"}))
    assert status == 429
    # a TPOT below every decode worker's step alone can never be met: the client must loosen it
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat,
                                                                 extra_body={"slo": {"tpot_ms": 0.001}}))
    assert status == 400 and body["code"] == "slo_unattainable", body


def test_n_choices_share_the_request_and_each_samples_on_its_own(served, client, reference):
    chat = CHATS[0]
    text, prompt_tokens, completion_tokens = reference[0]
    greedy = client.chat.completions.create(model=MODEL, messages=chat, n=2, temperature=0, max_tokens=completion_tokens)
    assert [c.index for c in greedy.choices] == [0, 1]
    assert [c.message.content for c in greedy.choices] == [text, text]  # transformers' reply, twice
    assert greedy.usage.prompt_tokens == prompt_tokens  # the prompt once
    assert greedy.usage.completion_tokens == 2 * completion_tokens

    def sampled() -> list[str]:
        answer = client.chat.completions.create(model=MODEL, messages=chat, n=3, temperature=1.0, seed=11, max_tokens=12)
        return [c.message.content for c in answer.choices]

    first = sampled()
    assert len(set(first)) > 1, "the choices of one seeded request are different samples"
    assert sampled() == first, "and the same seed gives the same choices"

    chunks = list(client.chat.completions.create(model=MODEL, messages=chat, n=2, temperature=0, stream=True,
                                                 max_tokens=completion_tokens, stream_options={"include_usage": True}))
    joined = {i: "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
              for i in (0, 1)}
    assert joined == {0: text, 1: text}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2 * completion_tokens
    with client.chat.completions.create(model=MODEL, messages=chat, n=3, max_tokens=200, stream=True) as left:
        next(iter(left))  # a client that leaves a stream of several choices mid-way: every one ends
    assert_pools_whole(served)


def test_completions_of_a_list_of_prompts_answer_each_in_order(client):
    prompts = ["The capital of France is", "One, two, three,"]
    alone = [client.completions.create(model=MODEL, prompt=p, max_tokens=6, temperature=0) for p in prompts]
    both = client.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in both.choices] == [0, 1]
    assert [c.text for c in both.choices] == [a.choices[0].text for a in alone]
    assert both.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    two_each = client.completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=6, temperature=0)
    assert [c.text for c in two_each.choices] == [alone[0].choices[0].text] * 2 + [alone[1].choices[0].text] * 2


def _post(served: LocalCluster, path: str, body: dict, key: str = KEY) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{served.http_address}{path}", json.dumps(body).encode(),
                                     {"content-type": "application/json", "authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_tokenize_and_detokenize_use_the_served_tokenizer_and_template(served, model_dir):
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(model_dir)
    text = "The capital of France is Paris. Ünïcödé too."
    status, body = _post(served, "/tokenize", {"model": MODEL, "prompt": text})
    assert status == 200 and body["tokens"] == reference.encode(text) and body["count"] == len(body["tokens"])
    assert body["max_model_len"] > 0
    status, chat = _post(served, "/tokenize", {"model": MODEL, "messages": CHATS[1]})
    rendered = reference.apply_chat_template(CHATS[1], add_generation_prompt=True, tokenize=False)
    assert status == 200 and chat["tokens"] == reference.encode(rendered, add_special_tokens=False)
    status, back = _post(served, "/detokenize", {"model": MODEL, "tokens": body["tokens"]})
    assert status == 200 and back["prompt"] == reference.decode(body["tokens"])
    status, error = _post(served, "/detokenize", {"model": MODEL, "tokens": [10**9]})
    assert status == 400 and error["error"]["param"] == "tokens"
    status, error = _post(served, "/tokenize", {"model": MODEL})
    assert status == 400 and error["error"]["type"] == "invalid_request_error"
    status, error = _post(served, "/tokenize", {"model": "gpt-4o", "prompt": "x"})
    assert status == 404
    status, error = _post(served, "/tokenize", {"model": MODEL, "prompt": "x"}, key="pk-wrong")
    assert status == 401


@pytest.mark.parametrize("field, value", [("response_format", {"type": "xml"}),
                                          ("response_format", {"type": "json_schema", "json_schema": {"name": "x"}}),
                                          ("guided_json", "{not json"), ("guided_choice", []),
                                          ("guided_regex", "[a-"), ("logit_bias", {"42": 5})])
def test_an_output_constraint_pdserve_cannot_enforce_is_refused_not_ignored(client, field, value):
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=CHATS[0], max_tokens=4,
                                                                 extra_body={field: value}))
    assert status == 400 and (body["param"] == field or field == "guided_regex"), body  # the worker's compile refuses it
    plain = client.chat.completions.create(model=MODEL, messages=CHATS[0], max_tokens=2,
                                           extra_body={"response_format": {"type": "text"}})
    assert plain.choices[0].finish_reason == "length"


def test_a_client_that_disconnects_mid_stream_frees_its_blocks(served):
    body = {"model": MODEL, "messages": CHATS[0], "max_tokens": 400, "ignore_eos": True, "stream": True}
    host, port = served.http_address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.request("POST", "/v1/chat/completions", json.dumps(body),
                       {"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    events = [response.fp.readline() for _ in range(6)]
    assert any(e.startswith(b"data: ") for e in events)
    connection.close()  # 400 tokens before the stream's end
    assert_pools_whole(served, timeout_s=10)


def test_the_load_tester_measures_http_and_grpc_by_one_definition(served, tmp_path):
    from client.bench.cli import main as bench

    host, port = served.address.rsplit(":", 1)
    shared = ["--num-prompts", "6", "--random-input-len", "24", "--random-output-len", "6", "--ignore-eos",
              "--max-concurrency", "3", "--save-result", "--save-detailed", "--result-dir", str(tmp_path)]
    by_backend = {"pdserve": ["--host", host, "--port", port],
                  "openai": ["--base-url", f"http://{served.http_address}"],
                  "openai-chat": ["--base-url", f"http://{served.http_address}", "--model", MODEL]}
    results = {}
    for backend, where in by_backend.items():
        assert bench(["--backend", backend, *where, *shared, "--api-key", KEY, "--result-filename", f"{backend}.json"]) == 0
        results[backend] = json.loads((tmp_path / f"{backend}.json").read_text())
    for backend, result in results.items():
        assert (result["completed"], result["failed"], result["rejected"]) == (6, 0, 0), backend
        assert result["total_output_tokens"] == 36, backend
        assert result["median_ttft_ms"] > 0 and result["median_tpot_ms"] > 0, backend
        arrivals = sum(len(itls) + 1 for itls in result["itls"])
        assert arrivals == 36, f"{backend}: each token arrives when it is made, text held back or not"
    assert results["openai"]["total_input_tokens"] == results["pdserve"]["total_input_tokens"] == 6 * 24
    assert results["openai-chat"]["total_input_tokens"] > 6 * 24, "the chat template's tokens count, as the server saw"
    bad_key = by_backend["openai-chat"] + shared[:-1] + [str(tmp_path / "denied")]
    assert bench(["--backend", "openai-chat", *bad_key, "--api-key", "pk-wrong", "--result-filename", "denied.json"]) == 0
    denied = json.loads((tmp_path / "denied" / "denied.json").read_text())
    assert denied["errors_by_code"] == {"UNAUTHENTICATED": 6} and denied["completed"] == 0


@pytest.fixture(scope="module")
def hf(model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir)), AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)


def _reference_logprobs(hf, prompt_ids: list[int], generated: list[int]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """transformers' logits for each generated token's position, log-softmaxed in float64."""
    _, model = hf
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + generated])).logits[0, len(prompt_ids) - 1:-1]
    return torch.log_softmax(logits.double(), dim=-1)


def _chat_ids(hf, chat) -> list[int]:  # type: ignore[no-untyped-def]
    return list(hf[0].apply_chat_template(chat, add_generation_prompt=True, return_dict=True)["input_ids"])


def test_chat_logprobs_are_transformers_log_softmax_of_the_same_tokens(client, hf):
    tokenizer, model = hf
    prompt = _chat_ids(hf, CHATS[0])
    reply = client.chat.completions.create(model=MODEL, messages=CHATS[0], temperature=0, max_tokens=12,
                                           logprobs=True, top_logprobs=3)
    with torch.no_grad():
        greedy = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):].tolist()
    content = reply.choices[0].logprobs.content
    assert [c.token for c in content] == [tokenizer.decode([t]) for t in greedy]
    expected = _reference_logprobs(hf, prompt, greedy)
    for row, (entry, token) in enumerate(zip(content, greedy)):
        assert abs(entry.logprob - expected[row, token].item()) < 1e-4
        top = expected[row].topk(3)
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(top.values.tolist(), abs=1e-4)
        assert [t.token for t in entry.top_logprobs] == [tokenizer.decode([i]) for i in top.indices.tolist()]
        assert entry.bytes == list(entry.token.encode())
    plain = client.chat.completions.create(model=MODEL, messages=CHATS[0], temperature=0, max_tokens=12)
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == reply.choices[0].message.content
    chunks = list(client.chat.completions.create(model=MODEL, messages=CHATS[0], temperature=0, max_tokens=12,
                                                 logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]


def test_sampled_tokens_logprobs_over_grpc_are_the_raw_logits(served, hf):
    """At temperature 1.3 with top-k 5 the tokens are drawn from the tempered and cut distribution;
    their logprobs are still those of the model's raw logits (pdserve's definition)."""
    prompt = _chat_ids(hf, CHATS[1])
    request = gateway_pb2.GenerateRequest(token_ids=gateway_pb2.TokenIds(ids=prompt), sampling=gateway_pb2.SamplingParams(
        max_tokens=16, temperature=1.3, top_k=5, seed=7, logprobs=2, ignore_eos=True))
    with grpc.insecure_channel(served.address) as channel:
        responses = list(gateway_pb2_grpc.GatewayStub(channel).Generate(
            request, metadata=(("authorization", f"Bearer {KEY}"),)))
    ids = [t for r in responses for t in r.token_ids]
    logprobs = [lp for r in responses for lp in r.logprobs]
    assert len(ids) == len(logprobs) == 16
    expected = _reference_logprobs(hf, prompt, ids)
    for row, (token, lp) in enumerate(zip(ids, logprobs)):
        assert abs(lp.logprob - expected[row, token].item()) < 1e-4
        assert list(lp.top_token_ids) == expected[row].topk(2).indices.tolist()
        assert list(lp.top_logprobs) == pytest.approx(expected[row].topk(2).values.tolist(), abs=1e-4)
    assert any(lp.logprob < lp.top_logprobs[0] - 1e-6 for lp in logprobs), "every token the likeliest: not sampled"


def test_completion_logprobs_are_parallel_lists_over_the_text(client, hf):
    tokenizer, _ = hf
    prompt = tokenizer.encode("The capital of France is")
    reply = client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=6, logprobs=2)
    lp = reply.choices[0].logprobs
    assert "".join(lp.tokens) == reply.choices[0].text and len(lp.tokens) == reply.usage.completion_tokens
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    generated = [tokenizer.encode(t, add_special_tokens=False)[0] for t in lp.tokens]
    expected = _reference_logprobs(hf, prompt, generated)
    assert lp.token_logprobs == pytest.approx([expected[i, t].item() for i, t in enumerate(generated)], abs=1e-4)
    assert all(len(top) == 2 and max(top.values()) == pytest.approx(v, abs=1e-6)
               for top, v in zip(lp.top_logprobs, lp.token_logprobs))  # greedy: each token the likeliest
    streamed = client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=6, logprobs=2, stream=True)
    parts = [c.choices[0].logprobs for c in streamed if c.choices[0].logprobs]
    assert [t for p in parts for t in p.tokens] == lp.tokens
    assert [o for p in parts for o in p.text_offset] == lp.text_offset


def test_logprobs_fields_are_checked(client):
    chat = CHATS[0]
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat, logprobs=True, top_logprobs=21))
    assert status == 400 and body["param"] == "top_logprobs"
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=chat, top_logprobs=2))
    assert status == 400 and body["param"] == "top_logprobs"
    status, body = _error(lambda: client.completions.create(model=MODEL, prompt="Hi", logprobs=21))
    assert status == 400 and body["param"] == "logprobs"


def test_echo_with_logprobs_scores_the_prompt_as_transformers_does(client, hf):
    """How evaluation harnesses score a text: echo + logprobs, the prompt tokens' logprobs from the prefill."""
    tokenizer, model = hf
    text = "The quick brown fox jumps over the lazy dog because it"
    prompt = tokenizer.encode(text)
    with torch.no_grad():
        expected = torch.log_softmax(model(torch.tensor([prompt])).logits[0].double(), dim=-1)
    for attempt in range(2):  # the second time its prefix is cached: scored whole all the same
        reply = client.completions.create(model=MODEL, prompt=text, max_tokens=1, temperature=0, echo=True, logprobs=1)
        lp = reply.choices[0].logprobs
        assert reply.choices[0].text.startswith(text) and len(lp.tokens) == len(prompt) + 1, attempt
        assert lp.tokens[:len(prompt)] == [tokenizer.decode([t]) for t in prompt]
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert lp.token_logprobs[1:len(prompt)] == pytest.approx(
            [expected[i - 1, prompt[i]].item() for i in range(1, len(prompt))], abs=1e-4)
        assert lp.token_logprobs[-1] == pytest.approx(expected[-1].max().item(), abs=1e-4)  # the greedy completion
        assert reply.usage.prompt_tokens == len(prompt) and reply.usage.completion_tokens == 1
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0, echo=True)
    assert plain.choices[0].text.startswith(tokenizer.decode(prompt)) and plain.choices[0].logprobs is None
    streamed = list(client.completions.create(model=MODEL, prompt=text, max_tokens=2, temperature=0, echo=True,
                                              stream=True))
    assert streamed[0].choices[0].text.startswith(text)


PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city"],
          "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0,
                                                                              "maximum": 150},
                         "city": {"type": "string", "maxLength": 40}}}


def test_json_schema_output_validates_in_fifty_of_fifty_sampled_requests(client):
    import jsonschema
    from concurrent.futures import ThreadPoolExecutor

    chat = [{"role": "user", "content": "Describe a person as JSON with a name, an age and a city."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}

    def ask(seed: int) -> tuple[str, str]:
        reply = client.chat.completions.create(model=MODEL, messages=chat, temperature=1.0, seed=seed, max_tokens=80,
                                               response_format=fmt)  # type: ignore[arg-type]
        return reply.choices[0].message.content or "", reply.choices[0].finish_reason

    with ThreadPoolExecutor(10) as pool:
        replies = list(pool.map(ask, range(50)))
    for text, reason in replies:
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), PERSON)
    assert len({text for text, _ in replies}) > 10, "sampled at temperature 1.0, yet the same few answers"


def test_json_object_guided_choice_and_regex_are_enforced(client):
    chat = [{"role": "user", "content": "Is the sky blue? Answer."}]
    reply = client.chat.completions.create(model=MODEL, messages=chat, temperature=1.0, seed=1, max_tokens=60,
                                           response_format={"type": "json_object"})
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)
    else:
        assert reply.choices[0].message.content.startswith("{")
    for seed in range(5):
        picked = client.chat.completions.create(model=MODEL, messages=chat, temperature=1.0, seed=seed, max_tokens=8,
                                                extra_body={"guided_choice": ["yes", "no"]})
        assert picked.choices[0].message.content in ("yes", "no") and picked.choices[0].finish_reason == "stop"
    dated = client.completions.create(model=MODEL, prompt="Today's date is", temperature=1.0, seed=3, max_tokens=16,
                                      extra_body={"guided_regex": r" [0-9]{4}-[0-9]{2}-[0-9]{2}"})
    assert re.fullmatch(r" [0-9]{4}-[0-9]{2}-[0-9]{2}", dated.choices[0].text)
    status, body = _error(lambda: client.chat.completions.create(
        model=MODEL, messages=chat, response_format={"type": "json_object"}, extra_body={"guided_regex": "a"}))
    assert status == 400 and body["param"] == "guided_regex"


def test_tools_on_a_model_whose_template_defines_no_call_format_are_refused(client):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    status, body = _error(lambda: client.chat.completions.create(model=MODEL, messages=CHATS[0], tools=[tool]))
    assert status == 400 and "tool-call format" in body["message"]
    plain = client.chat.completions.create(model=MODEL, messages=CHATS[0], tools=[tool], tool_choice="none", max_tokens=2)
    assert plain.choices[0].finish_reason == "length"  # not shown to the model: served as a plain chat


def test_grpc_n_choices_are_each_the_request_with_its_own_seed(served):
    def generate(n: int | None, seed: int) -> list[gateway_pb2.GenerateResponse]:
        sampling = gateway_pb2.SamplingParams(max_tokens=10, temperature=1.0, seed=seed, ignore_eos=True)
        if n is not None:
            sampling.n = n
        request = gateway_pb2.GenerateRequest(text="Once upon a time", sampling=sampling)
        with grpc.insecure_channel(served.address) as channel:
            return list(gateway_pb2_grpc.GatewayStub(channel).Generate(
                request, metadata=(("authorization", f"Bearer {KEY}"),)))

    messages = generate(3, seed=5)
    by_choice: dict[int, list[int]] = {}
    for m in messages:
        by_choice.setdefault(m.choice_index, []).extend(m.token_ids)
    assert sorted(by_choice) == [0, 1, 2] and sum(1 for m in messages if m.finish_reason) == 3
    for i, ids in by_choice.items():
        assert ids == [t for m in generate(None, seed=5 + i) for t in m.token_ids], i
    assert len({tuple(ids) for ids in by_choice.values()}) == 3
    for bad in (0, 65):
        with pytest.raises(grpc.RpcError) as caught:
            generate(bad, seed=1)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert_pools_whole(served)
