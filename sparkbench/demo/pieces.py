"""What the demo's steps need beyond ``make demo``'s own setup (the venv, a Docker engine, the base
and simulator images): images built when a step first needs them, by the same scripts
``make setup`` runs, with their progress lines shown. A script whose image is up to date says so
in a second; the first build takes minutes (the estimates below, measured here)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from .console import Printer, minutes
from .play import REPO


@dataclass(frozen=True)
class Piece:
    key: str
    image: str
    script: str
    what: str
    first_build_s: int  # the first build on this machine size (2 cores), wheelhouse included


SIM_IMAGES = ("sparkbench/vllm-sim:v0.25.0", "sparkbench/vllm-sim:v0.24.0")
PIECES = {
    "ray-image": Piece("ray-image", "sparkbench/vllm-sim-ray:v0.25.0", "scripts/build_sim_ray_image.sh",
                       "the simulator with Ray 2.60 (a Ray node per simulated Spark)", 110),
    "vllm-cpu-image": Piece("vllm-cpu-image", "sparkbench/vllm-cpu:v0.32.0", "scripts/build_vllm_cpu_image.sh",
                            "real vLLM 0.32.0's CPU build with a tiny model baked in", 320),
}


def present(image: str) -> bool:
    """True when the Docker engine has ``image``."""
    try:
        return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
    except OSError:
        return False


def missing_sim_images() -> list[str]:
    """The simulator images step 1 needs that are missing (``make demo`` builds them)."""
    return [image for image in SIM_IMAGES if not present(image)]


def ensure(piece: Piece, out: Printer) -> int:
    """Run the piece's build script (a second when its image is up to date), its progress lines
    stamped; returns its exit status."""
    doing = ("checking it is up to date" if present(piece.image)
             else f"missing: building it now ({minutes(piece.first_build_s)} here)")
    out.stamped(f"{piece.image} ({piece.what}): {doing} — {piece.script}")
    with subprocess.Popen([str(REPO / piece.script)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip():
                out.stamped("  " + line.rstrip())
        rc = proc.wait()
    if rc != 0:
        out.stamped(f"{piece.script} failed (exit {rc}); run it alone to see why, or 'make setup'")
    return rc
