"""The quickstart (the README's, continued in docs/quickstart.md), run as written against the
local model: ``./scripts/serve.sh`` (SmolLM2-135M-Instruct on the cached CPU vLLM, the caches
of ``~/.cache/agentic-api``), every marked block that is not simulated-only, then Ctrl-C.
The simulated run of all of them is tests/process/test_readme.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support.readme import free_port, quickstart_blocks, reader_env, refuses, serving

pytestmark = pytest.mark.real_vllm

CACHE = Path.home() / ".cache" / "agentic-api"


def test_readme_quickstart_runs_as_written_against_the_local_model(tmp_path: Path) -> None:
    blocks = quickstart_blocks()
    port, model_port = free_port(), free_port()
    home = tmp_path / "home"
    home.mkdir()
    env = reader_env(
        home,
        {
            "AGENTIC_PORT": str(port),
            "AGENTIC_LOCAL_MODEL_PORT": str(model_port),
            # The reader's HOME is a scratch folder; the model's caches stay where they are.
            "AGENTIC_VLLM_VENV": os.environ.get("AGENTIC_VLLM_VENV", str(CACHE / "vllm-venv")),
            "AGENTIC_SMOLLM2_DIR": os.environ.get("AGENTIC_SMOLLM2_DIR", str(CACHE / "smollm2")),
            "AGENTIC_VLLM_RUN_DIR": str(tmp_path / "run"),
        },
    )
    serve = blocks["serve local"].code.strip()
    with serving(serve, env, tmp_path / "serve.log", ready_timeout=900) as served:
        assert "SmolLM2-135M-Instruct on a local CPU vLLM" in served.output()
        outputs: dict[str, str] = {}
        for block in blocks.values():
            if block.name.startswith("serve") or block.simulated_only:
                continue
            result = served.run(block, blocks["env"], timeout=600)
            assert result.returncode == 0, (
                block.name,
                result.stdout[-3000:],
                result.stderr[-3000:],
            )
            outputs[block.name] = result.stdout
        assert served.interrupt(timeout=120) == 130
    assert refuses(port) and refuses(model_port)
    assert "stopping the local vLLM" in served.output()

    assert '"id":"SmolLM2-135M-Instruct"' in outputs["env"]
    # A real model's answers: not the simulator's echo, and some words.
    text = outputs["continuation"]
    assert "echo:" not in text and len(text.split()) >= 6, text
    cached = re.search(r"^cached tokens: (\d+)$", text, re.MULTILINE)
    assert cached is not None and int(cached[1]) > 0, text
    assert "status: completed" in outputs["streaming"]
    call = re.search(r"^tool call: get_weather (\{.*\})$", outputs["tool-call"], re.MULTILINE)
    assert call is not None, outputs["tool-call"]
    # strict: true and a named tool: arguments valid for the schema.
    assert set(json.loads(call[1])) == {"city"}
    assert "tool said: ['18 degrees and cloudy']" in outputs["agents-sdk"]
    turns = re.findall(
        r"^resp_\S+ input \d+ cached (\d+) \| token account: (\w+)", outputs["admin"], re.MULTILINE
    )
    assert len(turns) == 2 and turns[0][1] == "cold_start", outputs["admin"]
    # Re-tokenizing a sampled answer may diverge, after the prefix that was reused.
    assert turns[1][1] in {"exact", "diverged"} and int(turns[1][0]) > 0, outputs["admin"]
