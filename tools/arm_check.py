#!/usr/bin/env python3
"""Check that acep builds and matches byte for byte the same on ARM as on this x86 machine.

For each architecture (arm64: a 64-bit Raspberry Pi OS; armhf: a 32-bit one) it builds a
Debian root with debootstrap, runs it under qemu-user-static, installs the project there as
a Pi user would (arm64: numpy's wheel from PyPI; armhf: Debian's python3-numpy, since PyPI
has no armv7 numpy wheel), checks that every compiled module runs (``acep backend --all``),
runs `acep sample`, three `acep match` patterns on the embedded flights and the agent's
source reading them, and compares their output with the same commands run here from the
same source (sha256). It keeps the wheels it built
(aarch64, armv7l) for a release. Roots, caches and wheels live under --workdir, outside
the repository; a second run reuses the roots. Needs root, debootstrap, qemu-user-static
and binfmt_misc with the qemu interpreters registered (tools/README.md).

Exit status: 0 all identical, 1 a mismatch or a failed check, 2 the machine cannot run it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
WORKDIR = Path("/var/tmp/acep-arm")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BASE_PACKAGES = ["python3", "python3-venv", "python3-dev", "gcc", "ca-certificates"]
# Inside the root: where the source, the virtual environment and the wheels go.
SRC, VENV, DIST, RUN = "/opt/acep-src", "/opt/acep-venv", "/opt/acep-dist", "/tmp/acep-check"
PASSED_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "PIP_INDEX_URL", "PIP_DEFAULT_TIMEOUT")


@dataclass(frozen=True)
class Arch:
    """One Debian architecture: its qemu interpreter, wheel tag and where numpy comes from."""

    name: str
    qemu: str
    wheel_tag: str
    debian_numpy: bool

    @property
    def packages(self) -> list[str]:
        """Debian packages the root needs."""
        return BASE_PACKAGES + (["python3-numpy"] if self.debian_numpy else [])


ARCHES = {
    "arm64": Arch("arm64", "qemu-aarch64", "linux_aarch64", debian_numpy=False),
    "armhf": Arch("armhf", "qemu-arm", "linux_armv7l", debian_numpy=True),
}

EVENTS = f"{RUN}/flights-sample.jsonl"
UNPACK = ("import gzip, importlib.resources as r, sys; open(sys.argv[1], 'wb').write("
          "gzip.decompress(r.files('acep.data').joinpath('flights-sample.jsonl.gz').read_bytes()))")
# The compared commands: (name, acep's arguments). Each side runs them with cwd = RUN.
RUNS = [
    ("sample", ["sample", "--limit", "100000"]),
    ("rising", ["match", "-p", "ontime late late+ verylate", "-w", "3h", "-k", "1",
                "--partition", "origin",
                "--where", "late.delay > ontime.delay and verylate.delay > late.delay + 30",
                EVENTS]),
    ("late-bundles", ["match", "-p", "late late+ verylate", "-w", "2h", "-k", "1",
                      "--partition", "origin", "--bundles", EVENTS]),
    ("alternation", ["match", "-p", "verylate (late|ontime) verylate", "-w", "90min",
                     "-k", "2", "--partition", "destination", EVENTS]),
]

# The agent's own reading of the same file (with three bad lines put in): its source's
# chunks, offsets and batches, as the agent builds them.
AGENT_SCRIPT = """\
import sys
import numpy as np
from acep.events import EventError
from edge.agent.sources import FileSource, chunk_batch
lines = open(sys.argv[1], "rb").read().splitlines(keepends=True)
lines[5:5] = [b"not json\\n", b"[1, 2]\\n", b"\\n"]
lines[9000:9000] = [b'{"type": "late", "t": 1, "delay": {"x": 1}}\\n']
open("agent.jsonl", "wb").write(b"".join(lines))
source = FileSource("agent.jsonl", follow=False, batch_events=777)
position = 0
for chunk in source.chunks():
    try:
        batch = chunk_batch(chunk, position, "agent.jsonl")
    except EventError as e:
        print(len(chunk), chunk[0][1], chunk[-1][1], e)
        continue
    finally:
        position += len(chunk)
    print(len(chunk), chunk[0][1], chunk[-1][1], batch.tag_is_time, batch.types().tolist())
    print(batch.tags.tolist())
    for name, col in batch.columns.items():
        print(name, np.asarray(col).dtype, np.asarray(col).tolist())
print("bad lines", source.bad_lines, "offset", source.offset)
"""
AGENT_RUN = "agent-source"
# ISO tags with 0-6 fraction digits over years 1-9999, read by the compiled reader: each
# float printed exactly, and the reader's floats checked against datetime's to the bit.
ISO_SCRIPT = """\
import random, sys
from datetime import datetime, timedelta
from acep.events import read_all, values
rng, lo = random.Random(7), datetime(1, 1, 1)
span = int((datetime(9999, 12, 31) - lo).total_seconds())
stamps = []
for _ in range(20000):
    when = lo + timedelta(seconds=rng.randrange(span), microseconds=rng.randrange(10**6))
    digits = rng.randrange(7)
    stamps.append(when.isoformat(timespec="seconds")
                  + ("." + f"{when.microsecond:06d}"[:digits] if digits else ""))
stamps.sort()
with open("iso.jsonl", "w") as f:
    f.writelines(f'{{"type": "a", "t": "{s}"}}\\n' for s in stamps)
tags = read_all("iso.jsonl").tags
want = values._tags_from_values(stamps, values._TagKind())[0]
print("\\n".join(map(float.hex, tags.tolist())))
sys.exit(0 if tags.tobytes() == want.tobytes() else "compiled ISO tags differ from datetime's")
"""
ISO_RUN = "iso-tags"
COMPARED = [name for name, _ in RUNS] + [AGENT_RUN, ISO_RUN]


class Failure(Exception):
    """A step failed: the message says which and shows the end of its output."""


@dataclass
class Report:
    """What one architecture's check found."""

    arch: str
    steps: list[tuple[str, float, str]] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)
    backend: str = "?"
    wheel: str = "-"
    problems: list[str] = field(default_factory=list)

    def step(self, name: str, started: float, result: str = "ok", good: bool = True) -> None:
        """Record a step's wall time and result; a step that is not good is a problem."""
        self.steps.append((name, time.monotonic() - started, result))
        print(f"arm-check: {self.arch}: {name}: {result} ({self.steps[-1][1]:.0f} s)",
              file=sys.stderr, flush=True)
        if not good:
            self.problems.append(f"{name}: {result}")


def sh(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
       what: str = "") -> bytes:
    """Run a command and return its standard output; raise Failure naming it when it fails."""
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).decode(errors="replace").strip()[-1500:]
        raise Failure(f"{what or argv[0]} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def inside(root: Path, command: str, what: str) -> bytes:
    """Run a shell command in the root with a clean environment (the venv first on PATH)."""
    env = [f"{k}={os.environ[k]}" for k in PASSED_ENV if k in os.environ]
    env += ["HOME=/root", "LANG=C.UTF-8", "TZ=UTC",
            f"PATH={VENV}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PIP_CERT=/etc/acep-ca.crt", "SSL_CERT_FILE=/etc/acep-ca.crt",
            "PIP_DISABLE_PIP_VERSION_CHECK=1", "DEBIAN_FRONTEND=noninteractive"]
    return sh(["chroot", str(root), "/usr/bin/env", "-i", *env, "/bin/sh", "-ec", command],
              what=what)


def preflight(arches: list[Arch]) -> None:
    """Check root, the tools and qemu's binfmt registration; exit 2 naming what is missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("run as root (debootstrap and chroot need it)")
    for tool in ("debootstrap", "chroot", "git"):
        if shutil.which(tool) is None:
            problems.append(f"{tool} not found (apt-get install debootstrap)")
    for arch in arches:
        entry = Path("/proc/sys/fs/binfmt_misc") / arch.qemu
        if not entry.exists():
            problems.append(f"{entry} missing: apt-get install qemu-user-static binfmt-support; "
                            "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; "
                            f"update-binfmts --enable {arch.qemu}")
        elif "flags: " in (text := entry.read_text()) and "F" not in text.split("flags: ")[1]:
            problems.append(f"{entry} lacks the F flag: the root cannot find qemu")
    if problems:
        for p in problems:
            print(f"arm-check: {p}", file=sys.stderr)
        sys.exit(2)


def remove_root(root: Path) -> None:
    """Delete a root, first unmounting what an interrupted run left mounted in it."""
    prefix = f"{root}/"
    with open("/proc/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        sh(["umount", point], what=f"umount {point}")
    shutil.rmtree(root, ignore_errors=not root.exists())


def ensure_root(arch: Arch, root: Path, mirror: str, report: Report) -> None:
    """Build the Debian root unless a finished one is there; add missing packages."""
    done = root / ".acep-root-done"
    if not done.exists():
        t = time.monotonic()
        if root.exists():
            remove_root(root)  # an unfinished root from an interrupted run
        sh(["debootstrap", f"--arch={arch.name}", "--foreign", "--variant=minbase",
            f"--include={','.join(arch.packages)}", SUITE, str(root), mirror],
           what="debootstrap (first stage)")
        sh(["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"],
           what="debootstrap --second-stage (under qemu)")
        done.touch()
        report.step("debootstrap", t)
    shutil.copy(CA_BUNDLE, root / "etc/acep-ca.crt")
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    missing = [p for p in arch.packages
               if inside(root, f"dpkg-query -W -f='${{Status}}' {p} 2>/dev/null || true",
                         "dpkg-query") != b"install ok installed"]
    if missing:
        t = time.monotonic()
        inside(root, f"apt-get update -q && apt-get install -y -q {' '.join(missing)}",
               "apt-get install")
        report.step(f"apt {' '.join(missing)}", t)


def export_source(ref: str, dest: Path) -> None:
    """Put a clean copy of the source at ref (git archive) in dest."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    tar = sh(["git", "-C", str(REPO), "archive", "--format=tar", ref], what="git archive")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)


def acep_commands(acep: str, python: str) -> list[tuple[str, str]]:
    """Shell commands, one per compared run, writing each output to RUN/NAME.out."""
    unpack = f'{python} -c "{UNPACK}" {EVENTS}'
    runs = [(name, " ".join([acep, *map(quote, args)]) + f" > {RUN}/{name}.out")
            for name, args in RUNS]
    agent = (AGENT_RUN, f"{python} agent_source.py {EVENTS} > {RUN}/{AGENT_RUN}.out")
    iso = (ISO_RUN, f"{python} iso_tags.py > {RUN}/{ISO_RUN}.out")
    return [("unpack", unpack), *runs, agent, iso]


def write_scripts(run_dir: Path) -> None:
    """The compared Python scripts, beside the outputs."""
    (run_dir / "agent_source.py").write_text(AGENT_SCRIPT)
    (run_dir / "iso_tags.py").write_text(ISO_SCRIPT)


def backend_of(listing: str) -> str:
    """``compiled`` when ``acep backend --all`` lists every module compiled, else
    ``python:`` and the modules that are not."""
    slow = [line.split()[-1] for line in listing.splitlines()
            if line.strip() and "compiled" not in line.split()]
    return "compiled" if listing.strip() and not slow else f"python: {','.join(slow)}"


def quote(arg: str) -> str:
    """Quote one argument for /bin/sh."""
    return "'" + arg.replace("'", "'\\''") + "'"


def check_arch(arch: Arch, args: argparse.Namespace) -> Report:
    """Build or reuse the root, install the project there, run the commands, keep the wheel."""
    report = Report(arch.name)
    root = args.workdir / arch.name / "root"
    try:
        ensure_root(arch, root, args.mirror, report)
        proc = root / "proc"
        if not os.path.ismount(proc):
            sh(["mount", "-t", "proc", "proc", str(proc)], what="mount proc")
        try:
            install_and_run(arch, root, args, report)
        finally:
            subprocess.run(["umount", str(proc)], check=False)
    except Failure as exc:
        report.problems.append(str(exc))
    return report


def install_and_run(arch: Arch, root: Path, args: argparse.Namespace, report: Report) -> None:
    """Build the wheel, install it in a fresh venv, run the compared commands."""
    t = time.monotonic()
    export_source(args.ref, root / SRC.lstrip("/"))
    for d in (VENV, DIST, RUN):
        shutil.rmtree(root / d.lstrip("/"), ignore_errors=True)
    system = " --system-site-packages" if arch.debian_numpy else ""
    inside(root, f"python3 -m venv{system} {VENV} && mkdir -p {DIST} {RUN}", "python3 -m venv")
    report.step("venv + source", t)

    t = time.monotonic()
    inside(root, f"cd /tmp && pip wheel {SRC} --no-deps -w {DIST}", "pip wheel (Cython build)")
    wheels = sorted((root / DIST.lstrip("/")).glob("acep-*.whl"))
    if len(wheels) != 1:
        raise Failure(f"pip wheel left {len(wheels)} wheels in {DIST}")
    report.wheel = wheels[0].name
    tagged = wheels[0].name.endswith(f"-{arch.wheel_tag}.whl")
    report.step("pip wheel", t, arch.wheel_tag if tagged else f"tag is not {arch.wheel_tag}",
                good=tagged)
    (args.workdir / "wheels").mkdir(parents=True, exist_ok=True)
    shutil.copy(wheels[0], args.workdir / "wheels" / wheels[0].name)

    t = time.monotonic()
    inside(root, f"cd /tmp && pip install {DIST}/{wheels[0].name}", "pip install (the wheel)")
    listed = inside(root, "pip list --format=freeze", "pip list").decode()
    found = ok_packages(listed, arch)
    report.step("pip install", t, found, good="MISSING" not in found)

    t = time.monotonic()
    report.backend = backend_of(inside(root, "cd /tmp && acep backend --all",
                                       "acep backend --all").decode())
    inside(root, "cd /tmp && acep agent --help > /dev/null", "acep agent --help")
    write_scripts(root / RUN.lstrip("/"))
    for name, command in acep_commands("acep", "python"):
        inside(root, f"cd {RUN} && {command}", f"{name}: {command}")
    report.step("acep runs", t, report.backend, good=report.backend == "compiled")
    report.digests = digests(root / RUN.lstrip("/"))


def ok_packages(freeze: str, arch: Arch) -> str:
    """Say where numpy and msgpack came from, as the freeze list shows them."""
    versions = dict(line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    parts = [f"{name} {versions.get(name, 'MISSING')}" for name in ("numpy", "msgpack")]
    source = "Debian numpy" if arch.debian_numpy else "PyPI numpy"
    return f"{', '.join(parts)} ({source})"


def digests(run_dir: Path) -> dict[str, str]:
    """sha256 of each compared run's output."""
    return {name: hashlib.sha256((run_dir / f"{name}.out").read_bytes()).hexdigest()
            for name in COMPARED}


def check_x86(args: argparse.Namespace) -> Report:
    """Run the same commands here, from the same source with its kernel built in place."""
    report = Report("x86_64")
    base = args.workdir / "x86_64"
    src, run = base / "src", Path(RUN)
    try:
        t = time.monotonic()
        export_source(args.ref, src)
        sh([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=src,
           what="setup.py build_ext")
        report.step("build_ext", t)
        t = time.monotonic()
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": str(src), "TZ": "UTC"}
        where = sh([sys.executable, "-c", "import acep; print(acep.__file__)"], cwd=run, env=env)
        if not where.decode().startswith(str(src)):
            raise Failure(f"x86 side imports acep from {where.decode().strip()}, not {src}")
        acep = f"{sys.executable} -c 'import sys; from acep.cli import main; sys.exit(main())'"
        report.backend = backend_of(sh(["sh", "-ec", f"{acep} backend --all"], cwd=run,
                                       env=env).decode())
        write_scripts(run)
        for name, command in acep_commands(acep, sys.executable):
            sh(["sh", "-ec", command], cwd=run, env=env, what=f"x86 {name}")
        report.step("acep runs", t, report.backend, good=report.backend == "compiled")
        report.digests = digests(run)
        shutil.copytree(run, base / "out", dirs_exist_ok=True)
    except Failure as exc:
        report.problems.append(str(exc))
    return report


def summary(reference: Report, reports: list[Report]) -> bool:
    """Print the steps, backends, wheels and digests; return whether everything agrees."""
    everyone = [reference, *reports]
    print(f"\n{'arch':<8} {'step':<16} {'seconds':>8}  result")
    for r in everyone:
        for name, secs, result in r.steps:
            print(f"{r.arch:<8} {name:<16} {secs:>8.1f}  {result}")
    print(f"\n{'arch':<8} {'backend':<9} wheel")
    for r in everyone:
        print(f"{r.arch:<8} {r.backend:<9} {r.wheel}")
    print(f"\n{'run':<13} {'arch':<8} {'sha256 x86_64':<17} {'sha256 arm':<17} result")
    same_all = True
    for r in reports:
        for name in COMPARED:
            mine, theirs = r.digests.get(name, "-"), reference.digests.get(name, "-")
            same = mine == theirs != "-"
            same_all = same_all and same
            print(f"{name:<13} {r.arch:<8} {theirs[:16]:<17} {mine[:16]:<17} "
                  f"{'identical' if same else 'DIFFERENT'}")
    for r in everyone:
        for problem in r.problems:
            print(f"\n{r.arch}: FAILED: {problem}")
    ok = same_all and not any(r.problems for r in everyone)
    print(f"\narm-check: {'all identical' if ok else 'FAILED'}")
    return ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: which architectures, where, which mirror and which commit."""
    p = argparse.ArgumentParser(prog="tools/arm_check.py", description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=sorted(ARCHES), action="append",
                   help="arm64 and/or armhf (repeatable; default both, one after the other)")
    p.add_argument("--workdir", type=Path, default=WORKDIR,
                   help=f"roots, outputs and wheels (default {WORKDIR}; keep it out of the repo)")
    p.add_argument("--mirror", default=MIRROR, help=f"Debian mirror (default {MIRROR})")
    p.add_argument("--ref", default="HEAD", help="the commit to check (default HEAD)")
    p.add_argument("--fresh", action="store_true", help="build the roots again from nothing")
    args = p.parse_args(argv)
    args.workdir = args.workdir.resolve()
    if args.workdir.is_relative_to(REPO):
        p.error(f"--workdir {args.workdir} is inside the repository; use one outside it")
    args.arch = args.arch or ["arm64", "armhf"]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 identical, 1 different or failed, 2 cannot run here."""
    args = parse_args(argv)
    arches = [ARCHES[a] for a in args.arch]
    preflight(arches)
    if args.fresh:
        for arch in arches:
            remove_root(args.workdir / arch.name / "root")
    reference = check_x86(args)
    reports = []
    for arch in arches:
        print(f"arm-check: {arch.name} ...", file=sys.stderr, flush=True)
        reports.append(check_arch(arch, args))
    return 0 if summary(reference, reports) else 1


if __name__ == "__main__":
    sys.exit(main())
