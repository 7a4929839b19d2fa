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
dockerfile="$repo/scripts/vllm_sim/image/Dockerfile.ray"
label=org.sparkbench.sim-ray.inputs

say() { printf 'build-sim-ray-image: %s\n' "$*" >&2; }
t0=$(date +%s)

if ! base_id=$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null); then
  say "base image $base is missing; run scripts/build_sim_image.sh first"; exit 1
fi

# 1. The wheelhouse (host side, the host's configured pip sources), for the image's Python.
# shellcheck source=lib/wheelhouse.sh
. "$here/lib/wheelhouse.sh"
if [ ! -f "$wheelhouse/.complete" ]; then
  say "downloading ray==$ray_version and its dependencies into $wheelhouse (about 80 MB)"
  wheelhouse_fill "$wheelhouse" "ray==$ray_version" "$base" say
  say "wheelhouse ready ($(($(date +%s) - t0)) s)"
fi
nfiles=$(find "$wheelhouse" -maxdepth 1 -type f ! -name '.*' | wc -l)

# 2. Is the image up to date?
wheel_list=$(wheelhouse_list "$wheelhouse")
want=$( { sha256sum <"$dockerfile"; printf '%s\n' "$wheel_list" "${base_id#sha256:}" "$ray_version"; } \
        | sha256sum | cut -c1-24)
have=$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$tag" 2>/dev/null || true)
if [ "$have" = "$want" ]; then
  docker tag "$tag" "$name:latest"
  say "$tag is up to date ($(($(date +%s) - t0)) s)"
  exit 0
fi

# 3. Serve the wheelhouse on the Docker bridge for the duration of the build.
ctx=$(mktemp -d /tmp/sparkbench-simrayctx.XXXXXX)
wheelhouse_serve "$wheelhouse" "$ctx"
cleanup() { kill "$WHEELHOUSE_PID" 2>/dev/null || true; rm -rf "$ctx" "$ctx.http.log" "$ctx.build.log"; }
trap cleanup EXIT
cp "$dockerfile" "$ctx/Dockerfile"

say "building $tag from $base: $nfiles wheels from $wheelhouse (apt + pip install, about a minute)"
# The build's own output goes to a log; a progress line per step of Dockerfile.ray.
set +e
DOCKER_BUILDKIT=0 docker build --network bridge \
    --build-arg "BASE_IMAGE=$base" --build-arg "RAY_VERSION=$ray_version" \
    --build-arg "WHEELHOUSE_URL=$WHEELHOUSE_URL" --build-arg "WHEELHOUSE_HOST=$WHEELHOUSE_HOST" \
    --label "$label=$want" --label "org.sparkbench.sim-ray.ray-version=$ray_version" \
    -t "$tag" "$ctx" 2>&1 | tee "$ctx.build.log" | while IFS= read -r line; do
  step=""
  case "$line" in
    "Step "*"apt-get update"*) step="apt-get install python3-pip python3-venv iperf3 ethtool iproute2 procps" ;;
    "Step "*"pip install"*) step="pip install ray==$ray_version from the wheelhouse (the longest step)" ;;
    "Successfully built"*) step="image built; tagging" ;;
  esac
  [ -n "$step" ] && printf 'build-sim-ray-image:   [%3d s] %s\n' "$(($(date +%s) - t0))" "$step" >&2
done
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
  say "docker build failed (status $rc); last lines:"; tail -n 30 "$ctx.build.log" >&2; exit 1
fi
docker tag "$tag" "$name:latest"
# Old builds of this tag become dangling: remove those (only ours, never an image in use).
docker image prune -f --filter "label=$label" >/dev/null 2>&1 || true
size=$(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')
say "done: $tag and $name:latest ($size, $(($(date +%s) - t0)) s)"
