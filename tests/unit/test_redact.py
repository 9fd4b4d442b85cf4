"""redact.redact: credentials masked out of a quoted log line, every other line left as it is."""

from __future__ import annotations

import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from phasewatch.stages.s4_judge.redact import MASK, WINDOW, redact

PROBE_LINE = ("OSError: 401 Client Error: Unauthorized for url: "
              "https://alice:hf_SECRETTOKEN9876@huggingface.co/api/models/org/private-model (password=hunter2)")


def test_the_probes_line_keeps_everything_but_its_two_secrets() -> None:
    assert redact(PROBE_LINE) == ("OSError: 401 Client Error: Unauthorized for url: "
                                  "https://alice:***@huggingface.co/api/models/org/private-model (password=***)")


@pytest.mark.parametrize(("line", "masked"), [
    ("fetch https://alice:pa55@host/x failed", "fetch https://alice:***@host/x failed"),
    ("postgres://u:p@ss@db:5432/x", "postgres://u:***@db:5432/x"),  # an unencoded @ in the password
    ("clone https://ghp_abcdef123456@github.com/o/r", "clone https://***@github.com/o/r"),
    ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
    ("GET /api?token=abc123&page=2", "GET /api?token=***&page=2"),
    ("GET /api?access_token=abc123&x-amz-signature=ff00", "GET /api?access_token=***&x-amz-signature=***"),
    ("password=hunter2", "password=***"),
    ("PASSWORD = hunter2", "PASSWORD = ***"),
    ("passwd: hunter2", "passwd: ***"),
    ("secret=abc, next", "secret=***, next"),
    ("api_key='sk-abc' max_tokens=5", "api_key='***' max_tokens=5"),
    ("server_args=ServerArgs(model_path='m', api_key='sk-1', port=30000)",
     "server_args=ServerArgs(model_path='m', api_key='***', port=30000)"),
    ("non-default args: {'api_key': 'sk-1', 'tp': 8}", "non-default args: {'api_key': '***', 'tp': 8}"),
    ('{"token": "abc", "n": 1}', '{"token": "***", "n": 1}'),
    ('{"key": "abc"}', '{"key": "***"}'),
    ("key=abc123", "key=***"),
    ("--api-key sk-123 --port 1", "--api-key *** --port 1"),
    ("--api-key=sk-123", "--api-key=***"),
    ("--hf-token hf_AbCdEfGhIjKl", "--hf-token ***"),
    ("HF_TOKEN=hf_0123456789 OPENAI_API_KEY=sk-1 AWS_SECRET_ACCESS_KEY=x", "HF_TOKEN=*** OPENAI_API_KEY=*** "
                                                                           "AWS_SECRET_ACCESS_KEY=***"),
    ("Authorization: Bearer eyJhbGciOi.eyJzdWIi.sig", "Authorization: Bearer ***"),
    ("authorization: Basic dXNlcjpwYXNz", "authorization: Basic ***"),
    ("headers={'Authorization': 'Bearer abcdefgh123'}", "headers={'Authorization': 'Bearer ***'}"),
    ("sent bearer abcdefgh12345678 upstream", "sent bearer *** upstream"),
    ("token hf_AbCdEfGhIjKlMnOp rejected", "token hf_*** rejected"),
    ("401: hf_abcdefghij0123456789ABCDEFGHIJ", "401: hf_***"),
])
def test_a_credential_is_masked(line: str, masked: str) -> None:
    assert redact(line) == masked


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB",
    "Decode batch. #running-req: 1, #token: 48213, token usage: 0.02, cuda graph: True, gen throughput (token/s): 30.5",
    "Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0",
    "server_args=ServerArgs(model_path='/models/kimi', tokenizer_path='/models/kimi', tokenizer_mode='auto', "
    "kv_cache_dtype='auto', max_total_tokens=None, max_prefill_tokens=16384)",
    "launch --model-path /m --tokenizer-path /m --max-total-tokens 4096 --kv-cache-dtype fp8_e5m2",
    "SamplingParams(max_tokens=16, num_tokens=3, skip_special_tokens=True)",
    "RuntimeError: Error(s) in loading state_dict: Missing key(s) in state_dict: \"lm_head.weight\"",
    "KeyError: 'model.layers.0.self_attn.k_proj.weight'",
    "Missing key: model.layers.0.key_states",
    "key_states = self.k_proj(hidden_states)",
    "    key = (st.st_ino, st.st_mtime_ns)",
    "Using pad_token, but it is not set yet. eos_token=</s> bos_token=<s>",
    "hf_hub_download failed; hf_overrides={} hf_quantization_config=None hf_transfer",
    "INFO:     127.0.0.1:52914 - \"POST /generate HTTP/1.1\" 200 OK",
    "Loading safetensors checkpoint shards:  50% Completed | 32/64 [01:02<01:02,  1.95s/it]",
    "Capturing batches (bs=256 avail_mem=20.54 GB):  10%|█         | 4/36 [00:02<00:18,  1.72it/s]",
    "http://127.0.0.1:30000/health_generate answered 503",
    "ssh user@host failed; contact admin@example.com",
    "Basic block 7 failed to compile",
    "function signature: (x, y) -> z; credentials: please run huggingface-cli login",
    "PWD=/root HOME=/root",
])
def test_a_line_without_a_credential_is_left_as_it_is(line: str) -> None:
    assert redact(line) == line


SECRET = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=12, max_size=40)
SHAPES = [
    "https://user:{s}@host.example/path", "https://{s}@host.example/", "x?token={s}&y=1", "password={s}",
    "password: {s}", '"api_key": "{s}"', "'secret': '{s}'", "--api-key {s}", "--token={s}",
    "Authorization: Bearer {s}", "Authorization: Basic {s}", "HF_TOKEN={s}", "client_secret={s}",
    "refresh_token={s};", "key={s}",
]
def encodable(chars: st.SearchStrategy[str], without: str = "") -> st.SearchStrategy[str]:
    """Characters UTF-8 can encode (no lone surrogate), but `without`: by filter, as Debian 12's
    hypothesis (6.67) has no `codec=` nor `exclude_characters=`."""
    return chars.filter(lambda c: not 0xD800 <= ord(c) <= 0xDFFF and c not in without)


NOISE = st.text(encodable(st.characters(), "\n"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(secret=SECRET, shape=st.sampled_from(SHAPES), before=NOISE, after=NOISE)
def test_a_secret_in_any_shape_between_any_text_is_not_shown(secret: str, shape: str, before: str, after: str) -> None:
    """Between text not ending in a word character (which would glue itself to the key)."""
    assume(secret not in before and secret not in after)
    before = before + " "
    after = " " + after
    assert secret not in redact(before + shape.format(s=secret) + after)


@settings(max_examples=300, deadline=None)
@given(secret=SECRET.map(lambda s: "hf_" + s + "Z9"), before=NOISE, after=NOISE)
def test_a_hugging_face_token_standing_alone_is_not_shown(secret: str, before: str, after: str) -> None:
    assume(secret[3:] not in before and secret[3:] not in after)
    assert secret[3:] not in redact(f"{before} {secret} {after}")


@settings(max_examples=500, deadline=None)
@given(st.text(encodable(st.characters()), max_size=300))
def test_masking_twice_masks_nothing_more(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@settings(max_examples=300, deadline=None)
@given(st.text(encodable(st.characters(), ":=@"), max_size=300))
def test_text_without_a_separator_or_a_token_is_left_as_it_is(text: str) -> None:
    if "hf_" not in text and "bearer" not in text.lower():
        assert redact(text) == text


@pytest.mark.parametrize("bait", ["a" * WINDOW, "a://" * (WINDOW // 4), "token" * (WINDOW // 5),
                                  "hf_" + "A" * WINDOW, "x:" * (WINDOW // 2), "--token " * (WINDOW // 8),
                                  "https://" + "a@" * (WINDOW // 2)])
def test_the_cost_stays_small_on_bait(bait: str) -> None:
    started = time.perf_counter()
    for _ in range(10):
        redact(bait * 50)  # cut to WINDOW characters first
    assert time.perf_counter() - started < 1.0


def test_a_line_is_cut_to_the_window() -> None:
    assert redact("x" * (WINDOW + 100)) == "x" * WINDOW
    assert MASK == "***"
