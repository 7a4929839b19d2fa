#!/usr/bin/env bash
# Build the simulator cluster image sparkbench/vllm-sim-ray:v0.25.0 (and :latest) FROM the
# simulator image sparkbench/vllm-sim:v0.25.0 (run scripts/build_sim_image.sh first).
#
# Usage: scripts/build_sim_ray_image.sh
#
# Ray 2.60.0 comes from a wheelhouse on the host (containers reach no package index), made with the
# host's own pip sources and kept outside the repository:
#   SPARKBENCH_RAY_WHEELHOUSE (default /var/cache/sparkbench/wheelhouse/ray-2.60.0)
# It is reused once complete (marker file .complete); the build reads it from a short-lived HTTP
# server bound to the Docker bridge address, as scripts/build_vllm_cpu_image.sh does.
#
# The image is labelled with a hash of its inputs (Dockerfile.ray, the base image's id, the wheel
# list, the Ray version); when the label matches nothing is rebuilt and this takes a second. A
# rebuilt simulator image has a new id, so this image follows it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
ray_version=${SPARKBENCH_RAY_VERSION:-2.60.0}
base=${SPARKBENCH_SIM_RAY_BASE:-sparkbench/vllm-sim:v0.25.0}
name=${SPARKBENCH_SIM_RAY_IMAGE:-sparkbench/vllm-sim-ray}
tag="$name:v0.25.0"
wheelhouse=${SPARKBENCH_RAY_WHEELHOUSE:-/var/cache/sparkbench/wheelhouse/ray-$ray_version}
dockerfile="$repo/images/vllm-sim/Dockerfile.ray"
label=org.sparkbench.sim-ray.inputs

say() { printf 'build-sim-ray-image: %s\n' "$*" >&2; }

image_inputs() { sha256sum <"$dockerfile"; }
image_context() { cp "$dockerfile" "$1/Dockerfile"; }
image_step() {  # a progress line per step of Dockerfile.ray
  case "$1" in
    "Step "*"apt-get update"*) step="apt-get install python3-pip python3-venv iperf3 ethtool iproute2 procps" ;;
    "Step "*"pip install"*) step="pip install ray==$ray_version from the wheelhouse (the longest step)" ;;
    "Successfully built"*) step="image built; tagging" ;;
  esac
}

# shellcheck source=lib/build_image.sh
. "$here/lib/build_image.sh"
build_image say "$tag" "$base" scripts/build_sim_image.sh "ray==$ray_version" "about 80 MB" \
  " (apt + pip install, about a minute)" \
  --build-arg "RAY_VERSION=$ray_version" --label "org.sparkbench.sim-ray.ray-version=$ray_version"
