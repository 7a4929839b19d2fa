# shellcheck shell=bash
# The build of an image whose Python packages come from the host's wheelhouse (lib/wheelhouse.sh),
# sourced by scripts/build_sim_ray_image.sh and scripts/build_vllm_cpu_image.sh: the base image's
# id, the wheelhouse (filled once), the input hash the image is labelled with (an image whose label
# matches is only tagged :latest again, in a second), the wheelhouse served on the Docker bridge
# during `docker build`, a progress line per named step of the build, :latest, and the old builds
# of the tag pruned.
#
#   build_image SAY TAG BASE BASE_SCRIPT REQUIREMENT ABOUT_DOWNLOAD ABOUT_BUILD [DOCKER_BUILD_ARG...]
#       SAY             the caller's message function (its name)
#       TAG             NAME:vVERSION; NAME:latest is tagged too
#       BASE            the image built FROM; BASE_SCRIPT is the script that builds it (named when missing)
#       REQUIREMENT     what the wheelhouse holds, NAME==VERSION (its version goes into the input hash)
#       ABOUT_DOWNLOAD  how large the wheelhouse's download is (e.g. "about 80 MB")
#       ABOUT_BUILD     what the build message adds after the wheel count (how long the build takes)
#       DOCKER_BUILD_ARG...  the image's own `docker build` arguments (its version's --build-arg and --label);
#                       BASE_IMAGE, WHEELHOUSE_URL, WHEELHOUSE_HOST and the input label are added here
# with these set by the caller:
#   wheelhouse      the wheelhouse directory
#   label           the label that holds the input hash (also the filter of the prune)
#   image_inputs    a function that prints the image's own inputs (its Dockerfile's hash, ...): hashed
#                   with the wheel list, the base image's id and the version
#   image_context   a function that copies the build context into the directory it is given
#   image_step      a function that sets `step` to the progress words for a line of the build's
#                   output (leaves it empty for the others)

# shellcheck source=lib/wheelhouse.sh
. "$(dirname "${BASH_SOURCE[0]}")/wheelhouse.sh"

build_image() {
  local say=$1 tag=$2 base=$3 base_script=$4 requirement=$5 about_download=$6 about_build=$7
  shift 7
  local image_name=${tag%:*} image_version=${requirement#*==} t0 base_id nfiles wheel_list want have step rc size
  t0=$(date +%s)

  if ! base_id=$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null); then
    "$say" "base image $base is missing; run $base_script first"; exit 1
  fi

  # 1. The wheelhouse (host side, the host's configured pip sources), for the image's Python.
  if [ ! -f "$wheelhouse/.complete" ]; then
    "$say" "downloading $requirement and its dependencies into $wheelhouse ($about_download)"
    wheelhouse_fill "$wheelhouse" "$requirement" "$base" "$say"
    "$say" "wheelhouse ready ($(($(date +%s) - t0)) s)"
  fi
  nfiles=$(find "$wheelhouse" -maxdepth 1 -type f ! -name '.*' | wc -l)

  # 2. Is the image up to date?
  wheel_list=$(wheelhouse_list "$wheelhouse")
  want=$( { image_inputs; printf '%s\n' "$wheel_list" "${base_id#sha256:}" "$image_version"; } | sha256sum | cut -c1-24)
  have=$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$tag" 2>/dev/null || true)
  if [ "$have" = "$want" ]; then
    docker tag "$tag" "$image_name:latest"
    "$say" "$tag is up to date ($(($(date +%s) - t0)) s)"
    return 0
  fi

  # 3. Serve the wheelhouse on the Docker bridge for the duration of the build (global: the EXIT
  # trap runs after this function has returned).
  _build_image_ctx=$(mktemp -d "/tmp/sparkbench-${image_name##*/}-ctx.XXXXXX")
  wheelhouse_serve "$wheelhouse" "$_build_image_ctx"
  trap _build_image_cleanup EXIT
  image_context "$_build_image_ctx"

  "$say" "building $tag from $base: $nfiles wheels from $wheelhouse$about_build"
  # The build's own output goes to a log; a progress line per step image_step names.
  set +e
  DOCKER_BUILDKIT=0 docker build --network bridge --build-arg "BASE_IMAGE=$base" "$@" \
      --build-arg "WHEELHOUSE_URL=$WHEELHOUSE_URL" --build-arg "WHEELHOUSE_HOST=$WHEELHOUSE_HOST" \
      --label "$label=$want" -t "$tag" "$_build_image_ctx" 2>&1 | tee "$_build_image_ctx.build.log" \
      | while IFS= read -r line; do
    step=""
    image_step "$line"
    [ -n "$step" ] && "$say" "  [$(printf '%3d' "$(($(date +%s) - t0))") s] $step"
  done
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" != 0 ]; then
    "$say" "docker build failed (status $rc); last lines:"; tail -n 30 "$_build_image_ctx.build.log" >&2; exit 1
  fi
  docker tag "$tag" "$image_name:latest"
  # Old builds of this tag become dangling: remove those (only ours, never an image in use).
  docker image prune -f --filter "label=$label" >/dev/null 2>&1 || true
  size=$(docker image inspect --format '{{.Size}}' "$tag" \
         | awk '{if ($1 >= 1e9) printf "%.1f GB", $1/1e9; else printf "%.0f MB", $1/1e6}')
  "$say" "done: $tag and $image_name:latest ($size, $(($(date +%s) - t0)) s)"
}

_build_image_cleanup() {
  kill "$WHEELHOUSE_PID" 2>/dev/null || true
  rm -rf "$_build_image_ctx" "$_build_image_ctx.http.log" "$_build_image_ctx.build.log"
}
