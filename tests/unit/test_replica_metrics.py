"""Reading a vLLM replica's load from its /metrics page (the keep-warm pressure bound)."""

from __future__ import annotations

from agentic_api.upstream.replica_metrics import ReplicaLoad, parse_load

# As vLLM 0.32 writes them (v1 engine), trimmed; two data-parallel engines.
PAGE = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 1.0
vllm:num_requests_waiting{engine="1",model_name="tiny-llama"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny-llama"} 0.75
vllm:num_requests_waiting_by_reason{reason="capacity"} 9.0
"""


def test_waiting_requests_add_up_and_the_fullest_cache_decides() -> None:
    assert parse_load(PAGE) == ReplicaLoad(waiting=3.0, kv_usage=0.75)


def test_the_older_gauge_name_is_read_too() -> None:
    page = 'vllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
    assert parse_load(page) == ReplicaLoad(waiting=0.0, kv_usage=0.5)


def test_a_page_without_either_gauge_is_not_a_load() -> None:
    assert parse_load("# nothing here\nother_metric 1\n") is None
