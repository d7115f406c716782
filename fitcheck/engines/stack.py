"""Will the installed stack run here?  Driver vs CUDA build, GPU vs the torch build's kernels, and the
kernels a request needs.  Pure: tables with their sources, a SoftwareStack and a Machine in, issues out.
The kernels' device rules (compute capabilities, device kinds) are the capability table's
(fitcheck.engines.capabilities and each engine's rows); what is added here is what the installed packages say.

Rules:
1. Driver vs torch's CUDA build.  Each CUDA release needs a minimum driver (table below).  Within one
   CUDA major version an older driver still runs the build through minor-version compatibility
   (from the first driver of that major: 525.60.13 for 12.x), without PTX JIT and features that need
   the newer driver: a warning.  Below that floor the build cannot run: a blocking issue.
2. GPU vs the torch build.  A kernel compiled for sm_XY runs on compute capability X.Z with Z >= Y
   (same major): the GPU must have a binary in the build's list (table below), or it cannot run.
   A CUDA build on an AMD GPU, a ROCm build on an NVIDIA GPU, or a CPU-only build on either: cannot run.
3. Kernels the request needs: flash-attention 2 and fp8 where the capability table runs them, flash-attn and
   bitsandbytes installed (no Apple Metal backend; ROCm from BITSANDBYTES_ROCM_MIN), vLLM installed on a GPU its
   table admits, vLLM's pinned torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitcheck.engines import ENGINES
from fitcheck.engines.capabilities import ATTENTION_RUNS, BITSANDBYTES_ROCM_MIN, FP8, gpu_kind
from fitcheck.machine import Machine, known
from fitcheck.probe.software import SoftwareStack
from fitcheck.versions import version_tuple

# Minimum Linux x86_64 driver per CUDA release (the GA release of each minor version).
# Source: NVIDIA CUDA Toolkit Release Notes, table 3 "CUDA Toolkit and Corresponding Driver Versions"
# (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html#id4), "Toolkit Driver Version".
MIN_DRIVER_FOR_CUDA: dict[tuple[int, int], str] = {
    (11, 0): "450.36.06", (11, 1): "455.23", (11, 2): "460.27.03", (11, 3): "465.19.01", (11, 4): "470.42.01",
    (11, 5): "495.29.05", (11, 6): "510.39.01", (11, 7): "515.43.04", (11, 8): "520.61.05",
    (12, 0): "525.60.13", (12, 1): "530.30.02", (12, 2): "535.54.03", (12, 3): "545.23.06", (12, 4): "550.54.14",
    (12, 5): "555.42.02", (12, 6): "560.28.03", (12, 8): "570.26", (12, 9): "575.51.03", (13, 0): "580.65.06",
}
# Minor-version compatibility: the oldest driver that runs any build of a CUDA major version.
# Source: NVIDIA CUDA Compatibility guide, "Minor Version Compatibility", table 2
# (https://docs.nvidia.com/deploy/cuda-compatibility/#minor-version-compatibility): 11.x >= 450.80.02,
# 12.x >= 525.60.13; 13.x needs the 13.0 driver (580).
MIN_DRIVER_FOR_MAJOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

# The compute capabilities PyTorch's official Linux x86 / Windows CUDA wheels ship kernels for
# (TORCH_CUDA_ARCH_LIST of pytorch's .ci/manywheel/build_cuda.sh; RELEASE.md "PyTorch CUDA support
# matrix").  cu118-cu126: what torch reports on a GPU it lacks kernels for, "The current PyTorch install
# supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90" (pytorch/pytorch#150733, an RTX
# 5090 D on a cu12x wheel).  cu128/cu129 add Blackwell (sm_100, sm_120) and drop Maxwell and Pascal; Volta
# (sm_70) is out of torch 2.7's cu128 build, back in 2.8-2.10 (`torch.cuda.get_arch_list()` on 2.8 cu128:
# sm_70 ... sm_120, pytorch/pytorch#158700) and out again from 2.11 (pytorch/pytorch#172352, whose 2.11
# matrix also gives cu130: Turing 7.5 to Blackwell 12.0).
_LEGACY = ("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0")
_TURING_UP = ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
_VOLTA_UP = ("7.0", *_TURING_UP)
TORCH_ARCHS: dict[str, tuple[str, ...]] = {
    "11.8": _LEGACY, "12.1": _LEGACY, "12.4": _LEGACY, "12.6": _LEGACY,
    "12.8": _TURING_UP, "12.9": _TURING_UP, "13.0": _TURING_UP,
}
TORCH_ARCHS_WITH_VOLTA = ((2, 8), (2, 11))  # torch versions [from, to) whose cu128/cu129 builds keep sm_70
# The CUDA builds PyTorch publishes (download.pytorch.org/whl/<tag>), for the fix to suggest.
TORCH_CUDA_BUILDS = ("11.8", "12.1", "12.4", "12.6", "12.8", "13.0")


def torch_archs(torch_version: str, cuda: str) -> tuple[str, ...] | None:
    """The compute capabilities an official torch build ships kernels for (None: not in the table)."""
    archs = TORCH_ARCHS.get(cuda)
    low, high = TORCH_ARCHS_WITH_VOLTA
    if cuda in ("12.8", "12.9") and low <= version_tuple(torch_version)[:2] < high:
        return _VOLTA_UP
    return archs


BNB_PRECISIONS = ("int8", "nf4")
BNB_OPTIMIZERS = ("adamw-8bit", "paged-adamw-8bit")


@dataclass(frozen=True)
class Issue:
    kind: str        # 'driver', 'compute_capability', 'backend', 'kernel', 'package'
    blocking: bool   # True: cannot run here (a verdict); False: a warning
    reason: str
    fix: str

    @property
    def text(self) -> str:
        return f"{self.reason}: {self.fix}"


def _cc(text: str) -> tuple[int, int] | None:
    v = version_tuple(text)
    return (v[0], v[1] if len(v) > 1 else 0) if v else None


def _cuda(text: str) -> tuple[int, int]:
    v = version_tuple(text)
    return (v[0], v[1] if len(v) > 1 else 0)


def min_driver(cuda: str) -> str | None:
    """The minimum driver of a CUDA release (the nearest listed release at or below it)."""
    want = _cuda(cuda)
    listed = [k for k in MIN_DRIVER_FOR_CUDA if k <= want and k[0] == want[0]]
    return MIN_DRIVER_FOR_CUDA[max(listed)] if listed else None


def newest_build_for_driver(driver: str) -> str | None:
    """The newest PyTorch CUDA build this driver runs: at full compatibility if one does, else through
    minor-version compatibility; None when none runs."""
    d = version_tuple(driver)
    full = [b for b in TORCH_CUDA_BUILDS if (m := min_driver(b)) and version_tuple(m) <= d]
    if full:
        return full[-1]
    minor = [b for b in TORCH_CUDA_BUILDS
             if (f := MIN_DRIVER_FOR_MAJOR.get(_cuda(b)[0])) is not None and version_tuple(f) <= d]
    return minor[-1] if minor else None


def runs_on_cc(archs: tuple[str, ...], cc: str) -> bool:
    """Does a build with kernels for `archs` run on compute capability `cc` (same major, minor <=)?"""
    g = _cc(cc)
    if g is None:
        return True
    return any((a := _cc(arch)) is not None and a[0] == g[0] and a[1] <= g[1] for arch in archs)


def _index(tag: str) -> str:
    return f"pip install torch --index-url https://download.pytorch.org/whl/{tag}"


# ---- the checks ------------------------------------------------------------------------------------
def check_driver(stack: SoftwareStack, machine: Machine) -> list[Issue]:
    """Rule 1: torch's CUDA build against the NVIDIA driver."""
    t = stack.torch
    nvidia = [g for g in machine.gpus if g.vendor == "nvidia"]
    if t is None or t.backend != "cuda" or not t.backend_version or not nvidia:
        return []
    driver = machine.driver_version
    need = min_driver(t.backend_version)
    if not known(driver) or need is None:
        return []
    d = version_tuple(str(driver))
    if d >= version_tuple(need):
        return []
    major = _cuda(t.backend_version)[0]
    floor = MIN_DRIVER_FOR_MAJOR.get(major)
    supports = f" supports CUDA {machine.cuda_version}" if known(machine.cuda_version) else ""
    what = f"driver {driver}{supports}; torch {t.version}+{t.tag or 'cu'} needs driver >= {need}"
    alt = newest_build_for_driver(str(driver))
    tag = "cu" + alt.replace(".", "") if alt else ""
    fix = f"upgrade the NVIDIA driver to >= {need}" + (f" or install the {tag} build ({_index(tag)})"
                                                       if alt and alt != t.backend_version else "")
    if floor is not None and d >= version_tuple(floor):
        return [Issue("driver", False, what + f" (it runs through CUDA {major}.x minor-version compatibility, "
                      "without PTX JIT or features of the newer driver)", fix)]
    return [Issue("driver", True, what, fix)]


def check_backend(stack: SoftwareStack, machine: Machine, uses_gpu: bool) -> list[Issue]:
    """Rule 2: the torch build against the GPU's vendor and compute capability."""
    t = stack.torch
    if t is None or not uses_gpu or not machine.gpus:
        return []
    gpu = machine.gpus[0]
    vendor = gpu.vendor
    out: list[Issue] = []
    if vendor == "nvidia" and t.backend in ("cpu", "rocm"):
        build = "a CPU-only build" if t.backend == "cpu" else f"a ROCm {t.backend_version} build"
        out.append(Issue("backend", True, f"torch {t.version} is {build}: it cannot use the NVIDIA GPU",
                         f"install a CUDA build ({_index('cu' + _best_for(machine).replace('.', ''))})"))
    elif vendor == "amd" and t.backend in ("cpu", "cuda"):
        build = "a CPU-only build" if t.backend == "cpu" else f"a CUDA {t.backend_version} build"
        out.append(Issue("backend", True, f"torch {t.version} is {build}: it cannot use the AMD GPU",
                         f"install a ROCm build ({_index('rocm6.2')})"))
    elif vendor == "apple" and t.backend in ("cuda", "rocm"):
        out.append(Issue("backend", True, f"torch {t.version} is a {t.backend.upper()} build: no Apple MPS",
                         "install the macOS wheel (pip install torch)"))
    archs = torch_archs(t.version, t.backend_version) if t.backend == "cuda" and t.backend_version else None
    if vendor == "nvidia" and archs is not None:
        for g in machine.gpus:
            cc = g.compute_capability
            if known(cc) and not runs_on_cc(archs, str(cc)):
                sm = " ".join("sm_" + a.replace(".", "") for a in archs)
                good = [b for b in _driver_builds(machine) if runs_on_cc(TORCH_ARCHS[b], str(cc))]
                if good:
                    tag = "cu" + good[-1].replace(".", "")
                    fix = f"install the {tag} build ({_index(tag)})"
                else:
                    fix = "upgrade the NVIDIA driver and install a torch build with kernels for it"
                out.append(Issue("compute_capability", True,
                                 f"{g.name} has compute capability {cc}; torch {t.version}+{t.tag} ships kernels for "
                                 f"{sm} only", fix))
                break
    return out


def _driver_builds(machine: Machine) -> list[str]:
    """The published CUDA builds this machine's driver runs (all of them when the driver is unknown)."""
    driver = machine.driver_version
    newest = newest_build_for_driver(str(driver)) if known(driver) else None
    if known(driver) and newest is None:
        return []
    return [b for b in TORCH_CUDA_BUILDS if newest is None or version_tuple(b) <= version_tuple(newest)]


def _best_for(machine: Machine) -> str:
    """The CUDA build to suggest for this machine's driver and GPU."""
    cc = machine.gpus[0].compute_capability if machine.gpus else None
    builds = _driver_builds(machine)
    if known(cc):
        builds = [b for b in builds if runs_on_cc(TORCH_ARCHS.get(b, ()), str(cc))] or builds
    return builds[-1] if builds else TORCH_CUDA_BUILDS[-1]


def _min_cc(machine: Machine) -> tuple[int, int] | None:
    ccs = [c for g in machine.gpus if g.vendor == "nvidia" and known(g.compute_capability)
           and (c := _cc(str(g.compute_capability))) is not None]
    return min(ccs) if ccs else None


def check_kernels(stack: SoftwareStack, machine: Machine, plan) -> list[Issue]:
    """Rule 3: the kernels this plan needs, on this GPU with this stack (the device rules from the capability
    table, on the GPU of lowest compute capability)."""
    if stack.torch is None or plan is None:
        return []
    device = getattr(plan, "device", "gpu")
    if device == "cpu":
        return []
    vendor = machine.gpus[0].vendor if machine.gpus else None
    cc = _min_cc(machine)
    kind = gpu_kind(machine.gpus[0]) if machine.gpus else "cpu"
    cc_value = float(f"{cc[0]}.{cc[1]}") if cc is not None else None
    engine = getattr(plan, "engine", "transformers")
    precision = getattr(plan, "precision", "")
    out: list[Issue] = []
    if getattr(plan, "attention", None) == "flash":
        problem = ATTENTION_RUNS["flash"].problem(kind, cc_value) if vendor == "nvidia" and cc is not None else None
        if problem:
            out.append(Issue("kernel", True, problem, "use --attention sdpa"))
        elif stack.get("flash-attn") is None:
            out.append(Issue("package", True, "--attention flash needs flash-attn, which is not installed",
                             "pip install flash-attn --no-build-isolation, or use --attention sdpa"))
    fp8 = precision == "fp8" or getattr(plan, "kv_dtype", None) == "fp8"
    problem = FP8.problem(kind, cc_value) if fp8 and vendor == "nvidia" and cc is not None else None
    if problem:
        out.append(Issue("kernel", True, problem.replace("FP8 kernels need", "fp8 needs"),
                         "use bf16/fp16, or int8/awq weights"))
    bnb = (engine == "transformers" and precision in BNB_PRECISIONS) or getattr(plan, "optimizer", "") in BNB_OPTIMIZERS
    if bnb:
        out += _bitsandbytes(stack, vendor, precision)
    if engine != "transformers":
        out += _engine_package(stack, machine, engine, vendor, cc, cc_value, kind)
    return out


def _bitsandbytes(stack: SoftwareStack, vendor: str | None, precision: str) -> list[Issue]:
    installed = stack.get("bitsandbytes")
    if vendor == "apple":
        return [Issue("kernel", True, "bitsandbytes has no Apple Metal backend",
                      "use a GGUF type with llama.cpp, or bf16 weights and a 32-bit optimizer")]
    if installed is None:
        return [Issue("package", True, f"{precision if precision in BNB_PRECISIONS else 'an 8-bit optimizer'} "
                      "needs bitsandbytes, which is not installed", "pip install bitsandbytes")]
    if vendor == "amd" and version_tuple(installed.version)[:2] < BITSANDBYTES_ROCM_MIN:
        low = ".".join(map(str, BITSANDBYTES_ROCM_MIN))
        return [Issue("kernel", True, f"bitsandbytes {installed.version} has no ROCm backend",
                      f"install bitsandbytes >= {low} (multi-backend, ROCm preview)")]
    return []


def _engine_package(stack: SoftwareStack, machine: Machine, engine: str, vendor: str | None,
                    cc: tuple[int, int] | None, cc_value: float | None, kind: str) -> list[Issue]:
    """An engine run from this Python environment (vLLM): installed, on a GPU its table admits, with its torch."""
    eng = ENGINES[engine]
    if not eng.runs_installed_package:  # llama.cpp, SGLang and MLX run their own servers, not this environment's
        return []
    installed = stack.get(eng.distribution or engine)
    if vendor == "apple":
        return [Issue("kernel", True, f"{eng.title} has no Apple Metal backend", "use llama.cpp")]
    if installed is None:
        return [Issue("package", True, f"--engine {engine} needs {eng.title}, which is not installed",
                      f"pip install {eng.distribution or engine}")]
    out: list[Issue] = []
    problem = eng.runs.problem(kind, cc_value) if vendor == "nvidia" and cc is not None else None
    if problem:
        out.append(Issue("kernel", True, problem, "use llama.cpp or transformers"))
    pinned = _pinned(installed.requires, "torch")
    if pinned and stack.torch is not None and stack.torch.version != pinned:
        out.append(Issue("package", True, f"{eng.distribution} {installed.version} requires torch=={pinned}; torch "
                         f"{stack.torch.version} is installed",
                         f"pip install torch=={pinned} (or the {eng.distribution} release built for torch "
                         f"{stack.torch.version})"))
    return out


def _pinned(requires: tuple[str, ...], name: str) -> str | None:
    for req in requires:
        head = req.split(";")[0].replace(" ", "")
        if head.lower().startswith(name + "=="):
            return head.split("==", 1)[1]
    return None


@dataclass(frozen=True)
class StackCheck:
    """The installed stack and what it means for one request on this machine."""

    stack: SoftwareStack
    issues: tuple[Issue, ...]

    @property
    def blocking(self) -> tuple[Issue, ...]:
        return tuple(i for i in self.issues if i.blocking)

    @property
    def warnings(self) -> tuple[Issue, ...]:
        return tuple(i for i in self.issues if not i.blocking)


def check_stack(stack: SoftwareStack, machine: Machine, plan=None) -> StackCheck:
    """Every rule for `plan` (None: the machine alone, as `fitcheck probe` asks) on `machine`."""
    uses_gpu = plan is None or getattr(plan, "device", "gpu") != "cpu"
    engine = getattr(plan, "engine", "transformers") if plan is not None else "transformers"
    issues: list[Issue] = []
    runner = ENGINES.get(engine)  # a training plan's launcher runs the environment's torch
    if runner is None or runner.uses_torch:  # llama.cpp and MLX run their own binaries, not torch
        issues += check_driver(stack, machine)
        issues += check_backend(stack, machine, uses_gpu)
    issues += check_kernels(stack, machine, plan)
    return StackCheck(stack, tuple(issues))


def issue_dict(i: Issue) -> dict:
    return {"kind": i.kind, "blocking": i.blocking, "reason": i.reason, "fix": i.fix}


__all__ = ["MIN_DRIVER_FOR_CUDA", "MIN_DRIVER_FOR_MAJOR", "TORCH_ARCHS",
           "Issue", "StackCheck", "check_stack", "issue_dict", "min_driver", "newest_build_for_driver", "runs_on_cc",
           "version_tuple"]
