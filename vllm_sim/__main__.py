"""``python -m vllm_sim serve MODEL [flags]``; in the image, ``vllm`` and its stand-ins (``hf``,
``nvidia-smi``, ``dmesg``) run this through ``scripts/vllm_sim``."""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    """``nvidia-smi`` and ``dmesg`` (sampled once a second) without importing the server; the rest
    through :func:`vllm_sim.cli.main`."""
    if argv[:1] in (["nvidia-smi"], ["dmesg"]):
        from . import nvsmi

        return (nvsmi.main if argv[0] == "nvidia-smi" else nvsmi.dmesg_main)(argv[1:])
    from .cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
