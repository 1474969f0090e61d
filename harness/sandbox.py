"""The one sandbox builder: every process that runs code derived from a proposal starts here.

A sandboxed process sees an allowlist and nothing else (bubblewrap, Debian `bubblewrap`):

- read-only: the system's /usr (with the /bin, /lib... links), a few files of /etc (the
  dynamic loader's cache, alternatives, time zone, a passwd naming the sandbox user), the Python
  interpreter and its environment's packages, the paths its View names (its commit's files, the
  training shards and tokenizer, the pinned evaluation inputs...);
- read-write: only the folders its View names (a run's own output folder), a private /tmp and
  /dev/shm of bounded size;
- its own /dev (null, zero, random, tty...) plus the device nodes of its own GPUs;
- its own /proc, pid, ipc, uts, cgroup and network namespaces (no network at all);
- never: the home directory, /run, /var, /root, /srv, /mnt, other runs' folders, any data cache
  beyond what the View binds, the stdlib's test suites and any folder the data view says holds
  validation documents (they are hidden even where they lie under a bound root).

No privilege inside, whether the loop runs as root or not: its own user namespace maps the
sandbox user (uid 65534) to the caller, every capability is dropped, no new privileges, user
namespaces disabled inside, and a seccomp filter (harness/seccomp.py) refuses mount, umount,
setns, unshare, ptrace, bpf and the rest.

Without bubblewrap (or where it cannot make namespaces) `detect()` says why; the loop then
refuses to start unless the user passed `--sandbox none`, and says the results are unsealed.
Either way a child's environment is scrubbed of secrets (harness/secrets.py).
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness import seccomp
from harness.secrets import scrub_env as scrub_secrets

# The user the sandboxed process runs as (nobody), whatever the caller's uid.
SANDBOX_UID = SANDBOX_GID = 65534
SANDBOX_USER = "autoresearch"
HOME_INSIDE = "/tmp/home"
# Size caps of the private in-memory folders (bytes): room for compiler caches, not for a disk.
TMP_BYTES = 4 << 30
SHM_BYTES = 1 << 30
# What of /etc a program may need: the loader's cache (CUDA and system libraries live in
# multiarch folders only the cache names), alternatives (cc -> gcc for torch.compile), the time zone.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf")
# Top-level names of a merged-/usr system: links into /usr, or real folders on older systems.
USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# GPU device nodes every GPU process needs, beside its own /dev/nvidiaN.
NVIDIA_COMMON = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
# Extra read-only paths a machine needs (a GPU driver under /run, say): colon-separated.
EXTRA_RO_ENV = "AUTORESEARCH_SANDBOX_RO"
# Kernel caches the FA3 loader may read (the hub is offline inside).
HF_KERNEL_GLOB = "models--kernels-community--*"
# How long the one-off "can bubblewrap make namespaces here?" probe may take.
PROBE_TIMEOUT_S = 20


@dataclass
class DataView:
    """Paths of the prepared data, from prepare.describe()["paths"] (absolute)."""
    cache: Path
    data: Path | None = None
    tokenizer: Path | None = None
    pointer: Path | None = None
    val: Path | None = None
    hide: list[Path] = field(default_factory=list)     # validation documents' sources (prepare.py)

    @classmethod
    def from_describe(cls, info: dict) -> "DataView | None":
        paths = (info or {}).get("paths") or {}
        if not paths.get("cache"):
            return None
        get = lambda k: Path(paths[k]) if paths.get(k) else None  # noqa: E731
        return cls(cache=Path(paths["cache"]), data=get("data"), tokenizer=get("tokenizer"),
                   pointer=get("pointer"), val=get("val"), hide=[Path(p) for p in paths.get("hide") or []])

    def as_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if isinstance(v, list) else v)
                for k, v in vars(self).items()}

    @classmethod
    def from_dict(cls, d: dict | None) -> "DataView | None":
        if not d or not d.get("cache"):
            return None
        return cls(cache=Path(d["cache"]), **{k: Path(d[k]) if d.get(k) else None
                                              for k in ("data", "tokenizer", "pointer", "val")},
                   hide=[Path(p) for p in d.get("hide") or []])

    def training_shards(self) -> list[Path]:
        if self.data is None or not self.data.is_dir():
            return []
        return sorted(p for p in self.data.glob("shard_*.parquet") if self.val is None or p.name != self.val.name)


@dataclass
class View:
    """Everything one sandboxed process may see besides the system and the interpreter."""
    cwd: Path                                                     # read-only; the process starts here
    readonly: list[Path] = field(default_factory=list)
    writable: list[Path] = field(default_factory=list)           # created when missing
    binds: list[tuple[Path, Path]] = field(default_factory=list)  # (source, target), read-only
    rw_binds: list[tuple[Path, Path]] = field(default_factory=list)  # (source, target), read-write:
    # a run's output folder at one path (harness/runner.py), the compile warm-up's cache (harness/compiled.py)
    hide: list[Path] = field(default_factory=list)               # absent even under a bound root
    gpus: list[str] | None = None                                 # host GPU indices; None: every GPU


def data_view(data: DataView | None, mode: str, *, stand_ins: dict | None = None) -> tuple[list, list, list]:
    """(readonly, binds, hide) that show `data` for a `mode`:
    "train": the training shards, tokenizer and pointer; the validation shard's path is an empty file;
    "open": the validation shard too (a train.py that evaluates itself, for a reviewer that trusts it);
    "none": nothing of the data.
    stand_ins: {training shard: file shown at its path instead} (screening hides its proxy split)."""
    if data is None or mode == "none":
        return [], [], []
    if mode not in ("train", "open"):
        raise ValueError(f"unknown data mode {mode!r}")
    stand_ins = {Path(k).resolve(): Path(v) for k, v in (stand_ins or {}).items()}
    readonly, binds = [], []
    for shard in data.training_shards():
        if shard.resolve() in stand_ins:
            binds.append((stand_ins[shard.resolve()], shard))
        else:
            readonly.append(shard)
    readonly += [p for p in (data.tokenizer, data.pointer) if p is not None and p.exists()]
    if data.val is not None:
        if mode == "open" and data.val.exists():
            readonly.append(data.val)
        else:
            binds.append((Path(os.devnull), data.val))
    return readonly, binds, list(data.hide)


@dataclass
class Sandbox:
    kind: str                  # "bwrap" | "none"
    reason: str = ""           # why "none"
    binary: str | None = None

    @property
    def sealed(self) -> bool:
        return self.kind == "bwrap"

    def describe(self) -> dict:
        return {"kind": self.kind, "reason": self.reason, "sealed": self.sealed}

    # ---- starting processes ------------------------------------------------------------------
    def popen(self, argv: list[str], view: View, env: dict | None = None, enter: list[str] | None = None,
              **kw) -> subprocess.Popen:
        """Start `argv` inside this sandbox (or, kind "none", as is in view.cwd), with `env`
        (default os.environ) scrubbed of secrets. `enter`: a command prefix run outside the
        sandbox first (the run's cgroup, harness/procs.py CpuAccount). Other keywords go to
        subprocess.Popen."""
        env = child_env(os.environ if env is None else env, view, sealed=self.sealed)
        if not self.sealed:
            for p in view.writable:
                Path(p).mkdir(parents=True, exist_ok=True)
            return subprocess.Popen(list(enter or []) + list(argv), cwd=view.cwd, env=env, **kw)
        fd = _seccomp_fd()
        try:
            full = list(enter or []) + self.command(argv, view, seccomp_fd=fd)
            fds = tuple(kw.pop("pass_fds", ())) + ((fd,) if fd is not None else ())
            return subprocess.Popen(full, cwd=view.cwd, env=env, pass_fds=fds, **kw)
        finally:
            if fd is not None:
                os.close(fd)

    def run(self, argv: list[str], view: View, env: dict | None = None, timeout: float | None = None,
            **kw) -> subprocess.CompletedProcess:
        """popen() and wait, like subprocess.run (capture_output/text/input are honoured)."""
        if kw.pop("capture_output", False):
            kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        data = kw.pop("input", None)
        if data is not None:
            kw["stdin"] = subprocess.PIPE
        with self.popen(argv, view, env, **kw) as proc:
            try:
                out, err = proc.communicate(data, timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
            return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def command(self, argv: list[str], view: View, seccomp_fd: int | None = None) -> list[str]:
        """The bubblewrap command line for `argv` seen through `view`."""
        a = [self.binary, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID),
             "--disable-userns", "--cap-drop", "ALL",
             "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session",
             "--proc", "/proc", "--dev", "/dev",
             "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--dir", HOME_INSIDE,
             "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
        a += _system_binds()
        roots = _interpreter_paths() + _extra_readonly()
        hidden = _hidden(roots, view.hide)
        for p in roots:
            a += ["--ro-bind", str(p), str(p)]
        for p in hidden:                       # over the roots, under everything the view binds
            a += ["--tmpfs", str(p)] if p.is_dir() else ["--ro-bind", os.devnull, str(p)]
        for p in _kernel_caches():
            a += ["--ro-bind", str(p), str(p)]
        cwd = Path(view.cwd).resolve()
        _check_bindable([cwd, *view.readonly, *view.writable, *(src for src, _ in view.binds + view.rw_binds)])
        a += ["--ro-bind", str(cwd), str(cwd)]
        for p in view.readonly:
            p = Path(p).resolve()
            a += ["--ro-bind", str(p), str(p)]
        for src, dst in view.binds:
            a += ["--ro-bind", str(Path(src).resolve()), str(Path(dst).absolute())]
        for p in view.writable:
            p = Path(p)
            p.mkdir(parents=True, exist_ok=True)
            a += ["--bind", str(p.resolve()), str(p.resolve())]
        for src, dst in view.rw_binds:
            Path(src).mkdir(parents=True, exist_ok=True)
            a += ["--bind", str(Path(src).resolve()), str(Path(dst).absolute())]
        for dev in gpu_devices(view.gpus):
            a += ["--dev-bind", dev, dev]
        for p in _sys_paths(bool(gpu_devices(view.gpus))):
            a += ["--ro-bind", p, p]
        a += ["--remount-ro", "/"]             # the sandbox's own root: nothing written outside the view
        if seccomp_fd is not None:
            a += ["--seccomp", str(seccomp_fd)]
        a += ["--chdir", str(cwd), "--"]
        return a + list(argv)


def child_env(env: dict, view: View | None = None, *, sealed: bool = True) -> dict:
    """The environment of a child: no secrets (harness/secrets.py), the hub offline, no .pyc
    files; inside a sandbox also its own home, /tmp caches and GPU numbering."""
    out = scrub_secrets(dict(env))
    out.update(HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    if not sealed:
        return out
    # the data cache defaults to the caller's home (prepare.py), which is another folder inside
    out.setdefault("AUTORESEARCH_CACHE", str((Path.home() / ".cache" / "autoresearch").resolve()))
    out.update(HOME=HOME_INSIDE, USER=SANDBOX_USER, LOGNAME=SANDBOX_USER, TMPDIR="/tmp",
               TRITON_CACHE_DIR="/tmp/triton-cache", TORCHINDUCTOR_CACHE_DIR="/tmp/inductor-cache")
    hub = _hub_cache()
    if hub is not None:
        out["HF_HUB_CACHE"] = str(hub)
    if view is not None and view.gpus is not None:
        # Only these GPUs' device nodes exist inside: CUDA numbers them from 0 in bus order.
        out["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        out["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(view.gpus)))
    return out


def gpus_of(env: dict) -> list[str] | None:
    """The host GPUs a run's CUDA_VISIBLE_DEVICES names (numbers only), or None for every GPU."""
    v = (env or {}).get("CUDA_VISIBLE_DEVICES")
    if v is None:
        return None
    if v.strip() == "":               # set and empty: no GPU at all
        return []
    parts = [p.strip() for p in v.split(",") if p.strip()]
    return parts if all(p.isdigit() for p in parts) else None


def gpu_devices(gpus: list[str] | None, dev: Path = Path("/dev"),
                driver: Path = Path("/proc/driver/nvidia/gpus")) -> list[str]:
    """Device nodes of the given GPUs (CUDA indices in PCI bus order) plus the common ones; every
    /dev/nvidiaN when `gpus` is None or the driver's map cannot be read. [] without NVIDIA GPUs."""
    nodes = sorted(dev.glob("nvidia[0-9]*"), key=lambda p: int(p.name[6:]))
    if not nodes or gpus == []:
        return []
    chosen = nodes
    if gpus is not None:
        minors = _minors_by_bus(driver)
        if minors is not None:
            chosen = [dev / f"nvidia{minors[int(i)]}" for i in gpus if int(i) < len(minors)]
    common = [dev / n for n in NVIDIA_COMMON if (dev / n).exists()]
    caps = sorted((dev / "nvidia-caps").glob("*")) if (dev / "nvidia-caps").is_dir() else []
    return [str(p) for p in chosen + common + caps if p.exists()]


def _minors_by_bus(driver: Path) -> list[int] | None:
    """Device minor numbers of the GPUs, in PCI bus order (what CUDA_DEVICE_ORDER=PCI_BUS_ID uses)."""
    try:
        entries = sorted(p for p in driver.iterdir() if (p / "information").is_file())
        out = []
        for p in entries:
            for line in (p / "information").read_text().splitlines():
                if line.startswith("Device Minor:"):
                    out.append(int(line.split(":", 1)[1]))
                    break
            else:
                return None
        return out or None
    except (OSError, ValueError):
        return None


def _check_bindable(paths) -> None:
    """A view may name files and folders of its own, never a root that holds everything else."""
    home = Path.home().resolve()
    for p in paths:
        p = Path(p).resolve()
        if p == Path("/") or p == Path(tempfile.gettempdir()).resolve() or _under(home, p):
            raise ValueError(f"a sandbox view may not bind {p}: it would show far more than the run needs")


def _sys_paths(gpu: bool) -> list[str]:
    """What of /sys a process needs: the CPU topology (torch sizes its thread pools from it) and,
    with GPUs, the PCI devices and driver modules the NVIDIA libraries read."""
    want = ["/sys/devices/system/cpu", "/sys/devices/system/node"]
    if gpu:
        want = ["/sys/devices", "/sys/bus", "/sys/module", "/sys/class"]
    return [p for p in want if Path(p).exists()]


_SYSTEM: list[str] | None = None


def _system_binds() -> list[str]:
    """/usr, the top-level links into it, the few /etc files, a passwd and group of our own."""
    global _SYSTEM
    if _SYSTEM is None:
        a = ["--ro-bind", "/usr", "/usr"]
        for name in USR_LINKS:
            p = Path("/") / name
            if p.is_symlink():
                a += ["--symlink", os.readlink(p), str(p)]
            elif p.is_dir():
                a += ["--ro-bind", str(p), str(p)]
        for name in ETC_FILES:
            p = Path("/etc") / name
            if p.exists():
                a += ["--ro-bind", str(p), str(p)]
        ids = _identity_files()
        a += ["--ro-bind", str(ids / "passwd"), "/etc/passwd", "--ro-bind", str(ids / "group"), "/etc/group"]
        _SYSTEM = a
    return list(_SYSTEM)


def _identity_files() -> Path:
    """passwd and group naming the sandbox user (getpass, torch's caches ask who they are)."""
    folder = Path(tempfile.gettempdir()) / f"autoresearch-sandbox-{os.getuid()}"
    folder.mkdir(mode=0o755, exist_ok=True)
    for name, text in (("passwd", f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}::{HOME_INSIDE}:/bin/sh\n"),
                       ("group", f"{SANDBOX_USER}:x:{SANDBOX_GID}:\n")):
        path = folder / name
        if not path.is_file() or path.read_text() != text:
            tmp = folder / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.chmod(0o644)
            tmp.replace(path)
    return folder


def _interpreter_paths() -> list[Path]:
    """Folders the sandboxed `sys.executable` needs: its venv and the base Python installation
    (those under /usr are bound already; a folder inside another is bound with it)."""
    found = []
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        p = Path(p).resolve()
        if p.is_dir() and not _under(p, Path("/usr")) and p != Path("/"):
            found.append(p)
    return sorted({p for p in found if not any(q != p and _under(p, q) for q in found)})


def _under(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def _extra_readonly() -> list[Path]:
    return [Path(p).resolve() for p in os.environ.get(EXTRA_RO_ENV, "").split(":") if p and Path(p).exists()]


def _hidden(roots: list[Path], extra: list[Path]) -> list[Path]:
    """What must stay invisible under the bound roots: every Python test suite (the offline
    fallback's validation documents come from it), the home folder and the view's own list
    (run folders, data caches, a --source corpus: where one of them lies under /usr or a venv)."""
    found = [Path.home()]
    for root in [Path("/usr"), *roots]:
        for pattern in ("lib/python3*/test", "lib/python3*/idlelib/idle_test", "local/lib/python3*/test"):
            found += [Path(p) for p in glob.glob(str(root / pattern))]
    found += [Path(p) for p in extra]
    out = []
    for p in found:
        p = p.resolve() if p.exists() else p
        if p.exists() and p not in out and any(_under(p, r) for r in [Path("/usr"), *roots]):
            out.append(p)
    return out


def _hub_cache() -> Path | None:
    hub = os.environ.get("HF_HUB_CACHE") or (Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")
    hub = Path(hub)
    return hub if any(hub.glob(HF_KERNEL_GLOB)) else None


def _kernel_caches() -> list[Path]:
    hub = _hub_cache()
    return sorted(hub.glob(HF_KERNEL_GLOB)) if hub is not None else []


_SECCOMP_FILE: Path | None = None


def _seccomp_fd() -> int | None:
    """A readable descriptor of the seccomp program (bwrap reads it once), or None when this
    machine has none (the sandbox then lacks the filter; detect() says so)."""
    global _SECCOMP_FILE
    prog = seccomp.program()
    if prog is None:
        return None
    if _SECCOMP_FILE is None or not _SECCOMP_FILE.is_file():
        path = _identity_files() / f"seccomp-{seccomp.machine()}.bpf"
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(prog)
        tmp.replace(path)
        _SECCOMP_FILE = path
    return os.open(_SECCOMP_FILE, os.O_RDONLY)


_DETECTED: dict[str, Sandbox] = {}


def detect(mode: str = "auto") -> Sandbox:
    """The best sandbox this machine can make. mode: auto | bwrap | none. "bwrap" raises
    RuntimeError when it cannot; "auto" returns kind "none" with the reason (callers refuse)."""
    if mode == "none":
        return Sandbox("none", "disabled with --sandbox none")
    if mode in _DETECTED:
        return _DETECTED[mode]
    binary = shutil.which("bwrap")
    if binary is None:
        box = Sandbox("none", "bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    elif seccomp.program() is None:
        box = Sandbox("none", f"no seccomp filter for this machine ({os.uname().machine})")
    else:
        box = Sandbox("bwrap", binary=binary)
        # The probe's cwd: a folder kept beside the identity files and reused. It is bound read-only,
        # so it stays empty, and a loop killed mid-probe (kill -9) leaves no folder behind.
        empty = _identity_files() / "probe"
        empty.mkdir(exist_ok=True)
        try:
            probe = box.run(["/bin/true"], View(cwd=empty), capture_output=True, text=True,
                            timeout=PROBE_TIMEOUT_S)
            ok, why = probe.returncode == 0, (probe.stderr or "").strip()[-300:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, why = False, str(exc)
        if not ok:
            box = Sandbox("none", f"bubblewrap cannot make its namespaces here: {why}")
    if mode == "bwrap" and not box.sealed:
        raise RuntimeError(f"--sandbox bwrap: {box.reason}")
    _DETECTED[mode] = box
    return box


def refusal(box: Sandbox) -> str | None:
    """Why the loop will not start with this sandbox (None when it is sealed)."""
    if box.sealed:
        return None
    return (f"no sandbox: {box.reason}. Without one a proposed train.py runs with your files, your "
            "network and your GPUs, and can read the validation data: its results cannot be trusted. "
            "Install bubblewrap (apt-get install bubblewrap), or pass --sandbox none to run unsealed.")


def warning(box: Sandbox) -> str | None:
    """The loud line the loop prints (and run.json keeps) when runs are not sealed."""
    if box.sealed:
        return None
    return ("WARNING: UNSEALED (--sandbox none): " + box.reason + ". train.py runs with this machine's "
            "files and network and can read the validation data: the results are NOT trusted. The "
            "trusted evaluation, the content check of the evaluation inputs, the harness clock and the "
            "secret scrub still apply.")
