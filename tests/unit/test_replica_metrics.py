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
# vLLM 0.32 on CPU (SmolLM2, 1 GiB of KV cache), as it wrote it: 728 blocks of 32 tokens.
CACHE_CONFIG = (
    'vllm:cache_config_info{_block_size_resolved="True",block_size="32",cache_dtype="'
    'auto",cache_hit_alignment_tokens="None",effective_attention_block_size="32",enab'
    'le_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0'
    '",gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False"'
    ',kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",kv_cache_max_concurrency'
    '="11.375",kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="23296",kv_off'
    'loading_backend="native",kv_offloading_size="None",kv_sharing_fast_prefill="Fals'
    'e",mamba_block_size="None",mamba_cache_dtype="auto",mamba_cache_mode="none",mamb'
    'a_page_size_padded="None",mamba_ssm_cache_dtype="float32",num_cpu_blocks="None",'
    'num_gpu_blocks="728",num_gpu_blocks_override="None",prefix_cache_retention_inter'
    'val="0",prefix_caching_hash_algo="sha256",prefix_match_unit="None",replayssm_buf'
    'fer_len="16",skip_page_size_padded="None",sliding_window="None",swa_bounded_repl'
    'ay="True",use_kda_recoverssm="False",use_replayssm="False",user_specified_block_'
    'size="True"} 1.0'
    "\n"
)


def test_waiting_requests_add_up_and_the_fullest_cache_decides() -> None:
    assert parse_load(PAGE) == ReplicaLoad(waiting=3.0, kv_usage=0.75)


def test_the_cache_size_is_its_blocks_times_their_size() -> None:
    load = parse_load(PAGE + CACHE_CONFIG)
    assert load is not None and load.kv_capacity_tokens == 728 * 32
    # Before the engine has its blocks, the size in tokens is read instead.
    unallocated = CACHE_CONFIG.replace('num_gpu_blocks="728"', 'num_gpu_blocks="None"')
    load = parse_load(PAGE + unallocated)
    assert load is not None and load.kv_capacity_tokens == 23296


def test_the_older_gauge_name_is_read_too() -> None:
    page = 'vllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
    assert parse_load(page) == ReplicaLoad(waiting=0.0, kv_usage=0.5)


def test_a_page_without_either_gauge_is_not_a_load() -> None:
    assert parse_load("# nothing here\nother_metric 1\n") is None
