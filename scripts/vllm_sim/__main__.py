"""``python3 scripts/vllm_sim serve MODEL [flags]``: the simulator (the ``vllm_sim`` package beside
``sparkbench/``) run from a checkout, or from ``/opt/sparkbench`` in the image.

Also the image's stand-ins: ``python3 scripts/vllm_sim hf download ...``,
``python3 scripts/vllm_sim nvidia-smi ...`` and ``python3 scripts/vllm_sim dmesg``.
"""
import os
import sys

# The folder above scripts/, which holds the vllm_sim package and the sparkbench it uses (the twin,
# the package's data): the checkout's root, or /opt/sparkbench in the image.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

if __name__ == "__main__":
    from vllm_sim.__main__ import main  # noqa: E402

    sys.exit(main(sys.argv[1:]))
