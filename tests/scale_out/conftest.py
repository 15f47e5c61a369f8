"""The scale-out tier's one tier, shared by its tests (starting it takes minutes on real
vLLM). ``AGENTIC_SCALE_OUT_UPSTREAM``: ``vllm`` (default, the real_vllm tier's cache) or
``sim`` (the simulator: a quick dry run of everything but the engine)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from tests.scale_out.tier import REPO, Tier, TierOptions, Upstream, running_tier

SCRIPTS = REPO / "scripts" / "real_vllm"


@pytest.fixture(scope="session")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    upstream = cast(Upstream, os.environ.get("AGENTIC_SCALE_OUT_UPSTREAM", "vllm"))
    assert upstream in ("sim", "vllm"), f"AGENTIC_SCALE_OUT_UPSTREAM={upstream!r}"
    if upstream == "vllm":
        subprocess.run([str(SCRIPTS / "setup.sh")], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([str(SCRIPTS / "setup_router.sh")], check=True, stdout=subprocess.DEVNULL)
    folder = Path(os.environ.get("AGENTIC_SCALE_OUT_WORK") or tmp_path_factory.mktemp("tier"))
    with running_tier(TierOptions(upstream=upstream), folder) as running:
        yield running
