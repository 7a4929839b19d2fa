"""Entry point: ``python3 scripts/vllm_sim serve MODEL [flags]`` (and, in the image, ``vllm``).

Also dispatches the image's stand-ins: ``python3 scripts/vllm_sim hf download ...`` and
``python3 scripts/vllm_sim nvidia-smi ...``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vllm_sim.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
