"""A Docker engine for the container tests, and a base image made from Debian's packages.

The engine is the one DOCKER_HOST (or the default socket) names when it answers; otherwise a private
`dockerd` of the test's own, started as root with its data, exec root and socket under a temporary
directory and stopped at the end, so nothing outlives the run. Machines whose network reaches only
package registries cannot pull `python:3.11-slim`: the base image is made with debootstrap from
Debian's packages and `docker import`ed, once per run.

Flags a sandboxed machine needs, each for a reason:
- `dockerd --iptables=false --bridge=none`: no NAT rules or bridge device can be made there, and
  containers use the host's network instead;
- `docker build --network host` / `docker run --network host`: pip in the build reaches the index,
  and the gateway reaches PostgreSQL and Redis on the host's loopback;
- `--secret id=pip_ca,src=<CA bundle>`: the machine's CA bundle (a proxy's CA included) for pip in
  the build only (the Dockerfile's pip_ca mount).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.listening_process import process_stop

BASE_IMAGE = "igw-base:bookworm"
DEBIAN_SUITE = "bookworm"
# What the Dockerfile needs of a base: python3 with venv (and so ensurepip) and CA certificates.
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
DAEMON_START_SECONDS = 60
NO_BUILDKIT = "no docker client here builds with BuildKit (install buildx, or Debian's docker.io client)"


@dataclass
class DockerEngine:
    """A docker CLI that builds with BuildKit, and the environment that points it at the engine."""

    client: str
    env: dict[str, str]
    private: bool  # started by the test: everything in it goes when it stops
    images: list[str] = field(default_factory=list)  # tags to remove from an engine that is not ours

    def run(
        self, *args: str, timeout: float = 120, check: bool = True, stdin: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.client, *args],
            env=self.env,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args[:3])} … exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result


def _answers(client: str, env: dict[str, str]) -> bool:
    try:
        result = subprocess.run(
            [client, "info", "--format", "{{.ServerVersion}}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0 and bool(result.stdout.strip())


def _buildkit_client(env: dict[str, str]) -> str | None:
    """A CLI that can build with BuildKit: one with the buildx plugin, or a client older than 23.0
    (such as Debian's docker.io, /usr/bin/docker), which has BuildKit built in; clients from 23.0 on
    without buildx refuse DOCKER_BUILDKIT=1."""
    candidates = [path for path in (shutil.which("docker"), "/usr/bin/docker") if path]
    for client in dict.fromkeys(candidates):
        if not Path(client).is_file():
            continue
        probe = subprocess.run(
            [client, "buildx", "version"], env=env, capture_output=True, timeout=15, check=False
        )
        if probe.returncode == 0:
            return client
        version = subprocess.run(
            [client, "version", "--format", "{{.Client.Version}}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        ).stdout.strip()
        major = version.split(".")[0]
        if major.isdigit() and int(major) < 23:
            return client
    return None


@contextmanager
def docker_engine() -> Iterator[DockerEngine]:
    """The Docker engine for the run; skips the caller, with the reason, when none can start."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    client = shutil.which("docker") or ("/usr/bin/docker" if Path("/usr/bin/docker").is_file() else None)
    if client is None:
        pytest.skip("the Docker daemon cannot start: no docker client (apt-get install docker.io)")
    if _answers(client, env):
        builder = _buildkit_client(env)
        if builder is None:
            pytest.skip(NO_BUILDKIT)
        engine = DockerEngine(client=builder, env=env, private=False)
        try:
            yield engine
        finally:
            for tag in engine.images:
                engine.run("image", "rm", "--force", tag, check=False)
        return

    dockerd = shutil.which("dockerd")
    if dockerd is None:
        pytest.skip("the Docker daemon cannot start: dockerd is not installed (apt-get install docker.io)")
    if os.geteuid() != 0:
        pytest.skip("the Docker daemon cannot start: no engine answers and starting dockerd needs root")
    # Short paths: containerd's sockets live under the exec root, and a socket path has 107 bytes.
    workdir = Path(tempfile.mkdtemp(prefix="igw-docker-"))
    socket = workdir / "docker.sock"
    log_path = workdir / "dockerd.log"
    env["DOCKER_HOST"] = f"unix://{socket}"
    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            [
                dockerd,
                f"--data-root={workdir / 'data'}",
                f"--exec-root={workdir / 'exec'}",
                f"--pidfile={workdir / 'dockerd.pid'}",
                f"--host=unix://{socket}",
                "--iptables=false",
                "--bridge=none",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + DAEMON_START_SECONDS
        while not _answers(client, env):
            if daemon.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
                pytest.skip(
                    "the Docker daemon cannot start "
                    f"({'exited ' + str(daemon.returncode) if daemon.poll() is not None else 'no answer'}"
                    f" after {DAEMON_START_SECONDS} s): " + " | ".join(tail)
                )
            time.sleep(0.3)
        builder = _buildkit_client(env)
        if builder is None:
            pytest.skip(NO_BUILDKIT)
        yield DockerEngine(client=builder, env=env, private=True)
    finally:
        process_stop(daemon, timeout=30)
        _unmount_under(workdir)
        shutil.rmtree(workdir, ignore_errors=True)


def _unmount_under(directory: Path) -> None:
    """Unmount what the daemon left mounted under its directories (its network namespace file)."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    points = [line.split()[1] for line in mounts if line.split()[1].startswith(f"{directory}/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=30, check=False)


def debian_base_image(engine: DockerEngine) -> str:
    """Make BASE_IMAGE from Debian's packages (debootstrap, minbase) and import it into the engine."""
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise AssertionError("debootstrap is not installed (apt-get install debootstrap)")
    rootfs = Path(tempfile.mkdtemp(prefix="igw-rootfs-"))
    try:
        subprocess.run(
            [debootstrap, "--variant=minbase", f"--include={BASE_PACKAGES}", DEBIAN_SUITE, str(rootfs)],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
        # The downloaded packages and indexes are no part of the image.
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            engine.run("import", "-", BASE_IMAGE, stdin=tar.stdout.fileno(), timeout=300)
        finally:
            tar.stdout.close()
            tar.wait(timeout=60)
    except subprocess.CalledProcessError as error:
        raise AssertionError(f"debootstrap failed: {error.stderr[-3000:]}") from None
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    if not engine.private:
        engine.images.append(BASE_IMAGE)
    return BASE_IMAGE


def pip_ca_bundle() -> str | None:
    """The CA bundle this machine's pip trusts, for the build's pip (None: the image's own)."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return value
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return str(default) if default.is_file() else None
