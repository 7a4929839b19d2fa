"""Entry point: ``python3 scripts/vllm_sim serve MODEL [flags]`` (and, in the image, ``vllm``).

Also dispatches the image's stand-ins: ``python3 scripts/vllm_sim hf download ...`` and
``python3 scripts/vllm_sim nvidia-smi ...``.
"""
import os
import sys

# scripts/ (the vllm_sim package) and the folder above it (sparkbench.twin, the engine model the
# simulator shares with the predictor: the checkout's root, or /opt/sparkbench in the image)
_scripts = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_scripts, os.path.dirname(_scripts)]

if __name__ == "__main__":
    if sys.argv[1:2] in (["nvidia-smi"], ["dmesg"]):  # sampled once a second: skip importing the server
        from vllm_sim import nvsmi  # noqa: E402
        sys.exit((nvsmi.main if sys.argv[1] == "nvidia-smi" else nvsmi.dmesg_main)(sys.argv[2:]))
    from vllm_sim.cli import main  # noqa: E402
    sys.exit(main(sys.argv[1:]))
