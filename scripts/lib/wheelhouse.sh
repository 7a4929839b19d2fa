# shellcheck shell=bash
# The host-side wheelhouse of sparkbench's images, sourced by scripts/lib/build_image.sh (the build
# of scripts/build_vllm_cpu_image.sh and scripts/build_sim_ray_image.sh). Containers reach no
# package index (and see neither the host's pip configuration nor its TLS trust), so Python
# packages are downloaded on the host, with its own pip sources, into a directory outside the
# repository, and served to `docker build` over the Docker bridge for the duration of the build.
#
#   wheelhouse_fill DIR REQUIREMENT BASE_IMAGE SAY   pip download REQUIREMENT (and its dependencies)
#                                                    into DIR unless DIR/.complete exists; wheels
#                                                    for BASE_IMAGE's python3 when the host's differs
#   wheelhouse_list DIR                              "name size" per file, sorted (for input hashes)
#   wheelhouse_serve DIR CTX                         an HTTP server on the bridge gateway; sets
#                                                    WHEELHOUSE_URL, WHEELHOUSE_HOST, WHEELHOUSE_PID
#                                                    (its log is CTX.http.log; kill the pid when done)
# SAY is the caller's message function (its name).

wheelhouse_fill() {
  local dir=$1 requirement=$2 base=$3 say=$4 python py_minor img_minor log
  [ -f "$dir/.complete" ] && return 0
  python=$(command -v python3)
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    "$say" "python3 -m pip is not available on this host; install it (Debian: sudo apt-get install -y python3-pip)"; return 1
  fi
  py_minor=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  img_minor=$(docker run --rm --entrypoint python3 "$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  local platform_args=()
  if [ "$py_minor" != "$img_minor" ]; then
    "$say" "host python3 is $py_minor but the image's is $img_minor: downloading wheels for $img_minor"
    platform_args=(--python-version "$img_minor" --platform manylinux_2_28_x86_64 --only-binary=:all:)
  fi
  mkdir -p "$dir"
  log=$(mktemp /tmp/sparkbench-wheelhouse.XXXXXX.log)
  if ! "$python" -m pip download -q --disable-pip-version-check -d "$dir" \
      ${platform_args[@]+"${platform_args[@]}"} "$requirement" >"$log" 2>&1; then
    "$say" "pip download failed; last lines:"; grep -v '^WARNING: Location' "$log" | tail -n 20 >&2
    rm -f "$log"; return 1
  fi
  rm -f "$log"
  if ls "$dir" | grep -v -E '\.whl$' | grep -q .; then
    "$say" "note: the wheelhouse holds non-wheel files (the image has no compiler): $(ls "$dir" | grep -v -E '\.whl$' | tr '\n' ' ')"
  fi
  touch "$dir/.complete"
}

wheelhouse_list() {
  (cd "$1" && find . -maxdepth 1 -type f ! -name '.*' -printf '%f %s\n' | LC_ALL=C sort)
}

wheelhouse_serve() {
  local dir=$1 ctx=$2 gateway port
  gateway=$(docker network inspect bridge --format '{{range .IPAM.Config}}{{.Gateway}}{{end}}' 2>/dev/null || true)
  gateway=${gateway:-172.17.0.1}
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
  python3 -m http.server --bind "$gateway" --directory "$dir" "$port" >"$ctx.http.log" 2>&1 &
  WHEELHOUSE_PID=$!
  WHEELHOUSE_URL="http://$gateway:$port/"
  WHEELHOUSE_HOST=$gateway
  for _ in $(seq 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('$WHEELHOUSE_URL', timeout=1)" 2>/dev/null && break
    sleep 0.2
  done
}
