"""The sandbox for model-generated code: Docker (preferred), else an unshare user + network
namespace with limits, else nothing (the check is then skipped, never passed)."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
from typing import Literal, TypedDict

SANDBOX_TIMEOUT_S = 20.0
SANDBOX_USER = 65534  # "nobody": the unshare sandbox drops to it when measure runs as root

# Inside new mount (+network) namespaces: make every mount read-only, put a 16 MiB tmpfs on the
# working directory, then exec the interpreter. Runs only in the new namespace (private
# propagation), so the host's mounts are untouched. Exit 97 when the root cannot be made read-only.
_RO_SCRIPT = """mount --make-rprivate / 2>/dev/null
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -r); do mount -o remount,bind,ro "$m" 2>/dev/null; done
mount -t tmpfs -o size=16m,mode=0777 sparkbench-sandbox "$PWD" || exit 97
cd "$PWD" || exit 97
mount -o remount,bind,ro / || exit 97
exec "$@"
"""


class _SandboxBase(TypedDict):
    kind: Literal["docker", "unshare", "none"]
    protections: list[str]


class SandboxInfo(_SandboxBase, total=False):
    """``quality[].details.sandbox``: where generated code ran; ``Sandbox.describe``."""

    image: str | None
    reason: str


class Sandbox:
    """Runs untrusted Python: Docker (preferred), else unshare user+net namespace, else nothing."""

    def __init__(self, image: str | None) -> None:
        self.kind = "none"
        self.protections: list[str] = []
        self.reason: str | None = None
        self.image = image
        self.python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        docker = shutil.which("docker")
        reasons = []
        if image and docker:
            r = subprocess.run([docker, "image", "inspect", image], capture_output=True, timeout=60)
            if r.returncode == 0:
                self.kind = "docker"
                self.docker = docker
                self.protections = ["network:none", "read-only-rootfs", "memory:256m", "pids-limit:64",
                                    "cap-drop:ALL", "no-new-privileges", f"user:{SANDBOX_USER}",
                                    f"timeout:{SANDBOX_TIMEOUT_S:g}s"]
                return
            reasons.append(f"sandbox image {image!r} is not on this host (not pulled)")
        elif image:
            reasons.append("docker is not installed")
        else:
            reasons.append("no --sandbox-image given")
        unshare = shutil.which("unshare")
        if unshare and self.python:
            self.unshare = unshare
            self.setpriv = shutil.which("setpriv")
            self.kind = "unshare"
            errors = []
            for variant in ("readonly", "plain"):
                if variant == "readonly" and os.geteuid() == 0 and not self.setpriv:
                    continue
                self.variant = variant
                self.protections = self._protections(variant)
                ok, out = self.run("print(6 * 7)\n")
                if ok and out.strip() == "42":
                    return
                errors.append(f"{variant}: {out.strip()[-120:]}")
            reasons.append("unshare sandbox does not work here: " + "; ".join(errors))
        else:
            reasons.append("unshare or python3 not found")
        self.kind = "none"
        self.protections = []
        self.reason = "; ".join(reasons)

    def _protections(self, variant: str) -> list[str]:
        root = os.geteuid() == 0
        out = [] if (root and variant == "readonly") else ["user-namespace"]
        out.append("network-namespace:no-network")
        if variant == "readonly":
            out += ["mount-namespace:read-only-filesystem", "tmpfs-cwd:16MiB"]
        else:
            out.append("empty-temp-cwd")
        out += [f"rlimit-cpu:{int(SANDBOX_TIMEOUT_S)}s", "rlimit-as:512MiB", "rlimit-fsize:1MiB",
                "isolated-python", f"timeout:{SANDBOX_TIMEOUT_S:g}s"]
        if root:
            out.append(f"uid:{SANDBOX_USER}")
        return out

    def describe(self) -> SandboxInfo:
        d: SandboxInfo = {"kind": self.kind, "protections": list(self.protections)}
        if self.kind == "docker":
            d["image"] = self.image
        if self.reason and self.kind == "none":
            d["reason"] = self.reason
        return d

    def run(self, code: str) -> tuple[bool, str]:
        """Run ``code`` with python3 in the sandbox; (exit status 0, stdout+stderr tail)."""
        if self.kind == "docker":
            name = f"sparkbench-sandbox-{os.getpid()}-{random.randrange(1 << 30)}"
            cmd = [self.docker, "run", "--rm", "-i", "--name", name, "--network", "none", "--read-only",
                   "--memory", "256m", "--pids-limit", "64", "--cap-drop", "ALL",
                   "--security-opt", "no-new-privileges", "--user", f"{SANDBOX_USER}:{SANDBOX_USER}",
                   "--entrypoint", "python3", self.image or "", "-"]  # vLLM images' entrypoint is `vllm serve`
            try:
                r = subprocess.run(cmd, input=code.encode(), capture_output=True, timeout=SANDBOX_TIMEOUT_S + 30)
            except subprocess.TimeoutExpired:
                subprocess.run([self.docker, "rm", "-f", name], capture_output=True, timeout=60)
                return False, "timed out"
            except BaseException:  # interrupted: never leave the container running
                subprocess.run([self.docker, "rm", "-f", name], capture_output=True, timeout=60)
                raise
            return r.returncode == 0, (r.stdout + r.stderr).decode("utf-8", "replace")[-2000:]
        if self.kind == "unshare":
            with tempfile.TemporaryDirectory(prefix="sparkbench-sandbox-") as tmp:
                root = os.geteuid() == 0
                readonly = self.variant == "readonly"
                if root and not readonly:
                    os.chown(tmp, SANDBOX_USER, SANDBOX_USER)

                def limits() -> None:
                    import resource
                    resource.setrlimit(resource.RLIMIT_CPU, (int(SANDBOX_TIMEOUT_S), int(SANDBOX_TIMEOUT_S)))
                    resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
                    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
                    if root and not readonly:
                        os.setgroups([])
                        os.setgid(SANDBOX_USER)
                        os.setuid(SANDBOX_USER)

                py = [self.python or "python3", "-I", "-"]
                if readonly and root:
                    # root needs no user namespace: mount + network namespaces, every mount
                    # read-only, then drop to nobody for the interpreter
                    cmd = [self.unshare, "--propagation", "private", "-mn", "sh", "-c", _RO_SCRIPT, "sandbox",
                           self.setpriv or "setpriv", f"--reuid={SANDBOX_USER}", f"--regid={SANDBOX_USER}",
                           "--clear-groups", *py]
                elif readonly:
                    cmd = [self.unshare, "--propagation", "private", "-rmn", "sh", "-c", _RO_SCRIPT, "sandbox", *py]
                else:
                    cmd = [self.unshare, "-rn", *py]
                env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": tmp, "LANG": "C.UTF-8"}
                try:
                    r = subprocess.run(cmd, input=code.encode(), capture_output=True, cwd=tmp, env=env,
                                       timeout=SANDBOX_TIMEOUT_S + 5, preexec_fn=limits)
                except subprocess.TimeoutExpired:
                    return False, "timed out"
                except OSError as exc:
                    return False, str(exc)
                return r.returncode == 0, (r.stdout + r.stderr).decode("utf-8", "replace")[-2000:]
        return False, "no sandbox"

