#!/usr/bin/env bash
# Build the simulator image(s) sparkbench/vllm-sim:v<VERSION> from sparkbench/debian-base:bookworm.
#
# Usage: scripts/build_sim_image.sh [VERSION...]      (default: 0.25.0)
#   0.25.0 builds the default set: v0.25.0, latest (= v0.25.0) and v0.24.0 (version-bridge demo).
#   Any other version builds v<VERSION> only. Each tag's VLLM_SIM_VERSION defaults to its version.
#
# The image is labelled with a hash of its inputs (simulator sources, profiles, Dockerfile, base
# image id, version); a tag whose label already matches is not rebuilt, so `make setup` takes
# seconds when nothing changed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
base=${SPARKBENCH_BASE_IMAGE:-sparkbench/debian-base:bookworm}
name=${SPARKBENCH_SIM_IMAGE:-sparkbench/vllm-sim}
label=org.sparkbench.sim.inputs

say() { printf 'build-sim-image: %s\n' "$*" >&2; }
t0=$(date +%s)

versions=("$@")
[ ${#versions[@]} -eq 0 ] && versions=(0.25.0)
expanded=()
for v in "${versions[@]}"; do
  v=${v#v}
  if ! [[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    say "version '$v' is not like 0.25.0"; exit 2
  fi
  expanded+=("$v")
  [ "$v" = 0.25.0 ] && expanded+=(0.24.0)
done

if ! base_id=$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null); then
  say "base image $base is missing; run scripts/build_base_image.sh first"; exit 1
fi

ctx=$(mktemp -d /tmp/sparkbench-simctx.XXXXXX)
trap 'rm -rf "$ctx" "$ctx.build.log"' EXIT
mkdir -p "$ctx/sparkbench/scripts/vllm_sim" "$ctx/sparkbench/profiles"
# Sources only (no caches), so the hash depends on what the image contains: the vllm_sim package
# and its command (scripts/vllm_sim, which puts /opt/sparkbench on the path).
(cd "$repo" && find vllm_sim -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
  | xargs -0 -I{} cp --parents {} "$ctx/sparkbench/")
cp "$repo/scripts/vllm_sim/__main__.py" "$ctx/sparkbench/scripts/vllm_sim/"
# The user's own profiles (the checkout's profiles/, when it has any) over the built-in ones.
if [ -d "$repo/profiles" ]; then
  (cd "$repo/profiles" && find . -type f -name '*.json' -print0 | xargs -0 -I{} cp --parents {} "$ctx/sparkbench/profiles/")
fi
# What the simulator uses of sparkbench (standard library only): the engine model it shares with
# the predictor (sparkbench/twin) and the package's data reader with the built-in profiles and the
# quality prompts.
mkdir -p "$ctx/sparkbench/sparkbench/twin"
cp "$repo/sparkbench/__init__.py" "$repo/sparkbench/paths.py" "$repo/sparkbench/package_data.py" "$ctx/sparkbench/sparkbench/"
cp "$repo"/sparkbench/twin/*.py "$ctx/sparkbench/sparkbench/twin/"
(cd "$repo" && find sparkbench/data/profiles -type f -name '*.json' -print0 | xargs -0 -I{} cp --parents {} "$ctx/sparkbench/")
(cd "$repo" && cp --parents sparkbench/data/prompts/quality.json "$ctx/sparkbench/")
cp "$repo/images/vllm-sim/Dockerfile" "$ctx/Dockerfile"
content_hash=$(cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)

seen=""
for v in "${expanded[@]}"; do
  case " $seen " in *" $v "*) continue ;; esac
  seen="$seen $v"
  tag="$name:v$v"
  want="$content_hash-${base_id#sha256:}-$v"
  want=$(printf '%s' "$want" | sha256sum | cut -c1-24)
  have=$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$tag" 2>/dev/null || true)
  if [ "$have" = "$want" ]; then
    say "$tag is up to date"
  else
    say "building $tag (vLLM $v emulated)"
    # The build's output (and the legacy builder's deprecation notice) only when it fails.
    if ! DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE_IMAGE=$base" --build-arg "SIM_VERSION=$v" \
        --label "$label=$want" --label "org.sparkbench.sim.version=$v" -t "$tag" "$ctx" >"$ctx.build.log" 2>&1; then
      say "docker build of $tag failed; last lines:"; tail -n 30 "$ctx.build.log" >&2; exit 1
    fi
  fi
  if [ "$v" = 0.25.0 ]; then
    docker tag "$tag" "$name:latest"
  fi
done
# Old builds of these tags become dangling: remove those (only ours, never an image in use).
docker image prune -f --filter "label=$label" >/dev/null 2>&1 || true
say "done: $(for v in $seen; do printf '%s:v%s ' "$name" "$v"; done)$(case " $seen " in *" 0.25.0 "*) printf '%s:latest ' "$name";; esac)($(($(date +%s) - t0)) s)"
