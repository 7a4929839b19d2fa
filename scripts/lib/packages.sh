# shellcheck shell=bash
# Debian packages a setup script needs, checked by the command each one provides. Sourced by the
# scripts under scripts/ that use a Debian package (Python's venv, the Docker engine, debootstrap,
# Chromium, sshd, sudo).
#
#   need_packages SAY COMMAND:PACKAGE...
#       For each pair whose COMMAND is not found (on PATH, or a file at COMMAND when it is a path), the
#       PACKAGE is missing. As root the missing packages are installed from the configured Debian
#       mirror (apt-get update first when the package lists are empty or the install fails), and
#       each COMMAND must then be found. Not root: SAY names the `apt-get install` line and the
#       function returns 1. Returns 0 when every COMMAND is there.
# SAY is the caller's message function (its name).
#
# PKG_APT_FLAGS (set before the call): apt-get install's flags (default: --no-install-recommends).

_pkg_has() {
  case $1 in
    /*) [ -e "$1" ] ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

need_packages() {
  local say=$1 pair cmd pkg missing=() cmds=()
  shift
  for pair in "$@"; do
    cmd=${pair%%:*}
    pkg=${pair#*:}
    if ! _pkg_has "$cmd"; then
      missing+=("$pkg")
      cmds+=("$cmd")
    fi
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  install_packages "$say" "for ${cmds[*]}" "${missing[@]}" || return 1
  for cmd in "${cmds[@]}"; do
    if ! _pkg_has "$cmd"; then
      "$say" "${cmd} is still not found after installing ${missing[*]}; check PATH (it holds: $PATH)"
      return 1
    fi
  done
}

#   install_packages SAY WHY PACKAGE...
#       Install the PACKAGEs (missing for the reason WHY) as root; not root, SAY names the
#       `apt-get install` line and the function returns 1.
install_packages() {
  local say=$1 why=$2 flags log
  shift 2
  if [ "$(id -u)" -ne 0 ]; then
    "$say" "missing: $* ($why); install with: sudo apt-get install -y $*"
    return 1
  fi
  "$say" "installing $* ($why) from the configured Debian mirror"
  read -r -a flags <<<"${PKG_APT_FLAGS---no-install-recommends}"
  log=$(mktemp /tmp/sparkbench-apt.XXXXXX.log)
  export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null \
      || ! apt-get install -y -q -o DPkg::Lock::Timeout=300 ${flags[@]+"${flags[@]}"} "$@" >"$log" 2>&1; then
    if ! { apt-get update -q >"$log" 2>&1 &&
           apt-get install -y -q -o DPkg::Lock::Timeout=300 ${flags[@]+"${flags[@]}"} "$@" >>"$log" 2>&1; }; then
      "$say" "apt-get install $* failed; last lines:"
      tail -n 15 "$log" >&2
      rm -f "$log"
      return 1
    fi
  fi
  rm -f "$log"
  "$say" "installed $*"
}
