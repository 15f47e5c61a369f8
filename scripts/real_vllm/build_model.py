"""Build, fully offline, a tiny random Llama that vLLM can serve on a CPU.

    python scripts/real_vllm/build_model.py OUT_DIR [--vocab-size 4096]

* Model: ``LlamaForCausalLM`` with hidden 128, 2 layers, 4 heads, 2 KV heads, head_dim 32
  (vLLM's CPU attention needs head size 32/64/80/...), random weights from a fixed seed,
  float32, saved with ``save_pretrained`` (safetensors).
* Tokenizer: byte-level BPE trained with ``tokenizers`` on a fixed, sorted slice of this
  Python's stdlib sources; special tokens ``<|endoftext|>`` (pad/bos),
  ``<|im_start|>``, ``<|im_end|>`` (eos); a ChatML ``chat_template`` that renders every role
  (system/developer/user/assistant/tool), assistant reasoning and ``tool_calls``, and a
  tool list.

The output is deterministic for a given Python/transformers/tokenizers/torch install
(``.agentic-digest`` in OUT_DIR lists file hashes so two builds can be compared).
The weights are random: the model emits nonsense; test ids, token counts and
``cached_tokens``, never text.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Single-threaded BPE training keeps merges reproducible.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

SEED = 1234
HIDDEN = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
INTERMEDIATE = 256
MAX_POSITIONS = 4096
CORPUS_BYTES = 4_000_000

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]

# ChatML. Content may be a string or a list of parts ({"type": "text", "text": ...}); any
# role is rendered as-is; an assistant's `reasoning` (vLLM's name for replayed reasoning
# items) or `reasoning_content` becomes <think>...</think> before its content; assistant tool
# calls are rendered as <tool_call> JSON lines; a non-empty tool list becomes a leading
# system block.
CHAT_TEMPLATE = (
    "{%- macro render_content(content) -%}"
    "{%- if content is none -%}"
    "{%- elif content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part is string -%}{{ part }}"
    "{%- elif part.text is defined and part.text is not none -%}{{ part.text }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\n# Tools\\n' }}"
    "{%- for tool in tools -%}{{ tool | tojson }}{{ '\\n' }}{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- set thought = message['reasoning']"
    " if message['reasoning'] is defined and message['reasoning']"
    " else (message['reasoning_content'] if message['reasoning_content'] is defined"
    " else none) -%}"
    "{%- if thought -%}{{ '<think>\\n' + thought + '\\n</think>\\n' }}{%- endif -%}"
    "{{- render_content(message['content']) -}}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for tc in message['tool_calls'] -%}"
    "{%- set fn = tc['function'] if tc['function'] is defined else tc -%}"
    "{{ '\\n<tool_call>{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string -%}{{ fn['arguments'] }}"
    "{%- else -%}{{ fn['arguments'] | tojson }}{%- endif -%}"
    "{{ '}</tool_call>' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def corpus(limit: int = CORPUS_BYTES) -> Iterator[str]:
    """A fixed, sorted slice of the stdlib's .py sources (about `limit` bytes)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in stdlib.rglob("*.py")
        if "site-packages" not in p.parts and "test" not in p.parts and "tests" not in p.parts
    )
    total = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        yield text
        total += len(text)
        if total >= limit:
            return


def build_tokenizer(vocab_size: int) -> Any:  # a tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # type: ignore[import-not-found]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def digest(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


def build(out: Path, vocab_size: int) -> None:
    import torch  # type: ignore[import-not-found]
    from transformers import (  # type: ignore[import-not-found]
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    raw = build_tokenizer(vocab_size)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    pad_id = raw.token_to_id(PAD)
    eos_id = raw.token_to_id(IM_END)

    config = LlamaConfig(
        vocab_size=raw.get_vocab_size(),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.generation_config.bos_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id

    tmp = Path(tempfile.mkdtemp(prefix=".tiny-llama-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        # Pin the dtype in config.json whatever this transformers calls the key.
        cfg_path = tmp / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["torch_dtype"] = "float32"
        if "dtype" in cfg:
            cfg["dtype"] = "float32"
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        (tmp / ".agentic-digest").write_text(json.dumps(digest(tmp), indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab-size", type=int, default=4096)
    args = ap.parse_args(argv)
    out = args.out.expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    build(out, args.vocab_size)
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"built {out} ({size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
