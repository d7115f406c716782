"""Will the stack run here?  A fake environment (dist-info folders) and fake driver readings, one per mismatch."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.engines.stack import MIN_DRIVER_FOR_CUDA, check_stack, min_driver, newest_build_for_driver, runs_on_cc
from fitcheck.probe.software import read_stack
from fitcheck.profiles import load_profile


def make_env(root: Path, *packages: tuple[str, str, tuple[str, ...]]) -> Path:
    """A venv-shaped folder with one dist-info folder per (name, version, requires)."""
    site = root / "lib" / "python3.11" / "site-packages"
    for name, version, requires in packages:
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        meta += [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(meta) + "\n\nlong description\nRequires-Dist: not-a-header\n")
    return root


def stack_of(tmp_path, *packages):
    env = make_env(tmp_path / "venv", *packages)
    return read_stack(env={"VIRTUAL_ENV": str(env)}, own=())


def machine(profile="rtx-4090", driver="550.54.14", cuda="12.4", cc=None):
    m = load_profile(profile)
    gpus = tuple(replace(g, compute_capability=cc) for g in m.gpus) if cc else m.gpus
    return replace(m, kind="probed", source="probe", driver_version=driver, cuda_version=cuda, gpus=gpus)


def test_reads_torch_build_from_local_version_requirements_and_conda(tmp_path):
    s = stack_of(tmp_path, ("torch", "2.5.1+cu124", ()), ("vllm", "0.6.4", ("torch==2.5.1",)),
                 ("flash-attn", "2.7.0", ()), ("requests", "2.0", ()))
    assert (s.torch.version, s.torch.backend, s.torch.backend_version) == ("2.5.1", "cuda", "12.4")
    assert [p.name for p in s.packages] == ["torch", "vllm", "flash-attn"]  # only the watched ones
    assert s.get("vllm").requires == ("torch==2.5.1",)  # headers only, not the description
    pypi = stack_of(tmp_path / "b", ("torch", "2.4.0", ("nvidia-cuda-runtime-cu12==12.1.105; platform_system == "
                                                        "'Linux'", "filelock")))
    assert (pypi.torch.backend, pypi.torch.backend_version, pypi.torch.tag) == ("cuda", "12.1", "cu121")
    rocm = stack_of(tmp_path / "c", ("torch", "2.5.1+rocm6.2", ()))
    assert (rocm.torch.backend, rocm.torch.backend_version) == ("rocm", "6.2")
    cpu = stack_of(tmp_path / "d", ("torch", "2.5.1+cpu", ()))
    assert cpu.torch.backend == "cpu"
    conda = make_env(tmp_path / "conda", ("torch", "2.5.1", ()))
    (conda / "conda-meta").mkdir()
    (conda / "conda-meta" / "pytorch-2.5.1-py3.11_cuda12.4_cudnn9.1.0_0.json").write_text("{}")
    s = read_stack(env={"CONDA_PREFIX": str(conda)}, own=())
    assert (s.torch.backend, s.torch.backend_version) == ("cuda", "12.4")


def test_first_environment_wins_and_no_torch_is_reported(tmp_path):
    project = make_env(tmp_path / "project", ("torch", "2.5.1+cu124", ()))
    other = make_env(tmp_path / "other", ("torch", "2.1.0+cu118", ()))
    s = read_stack(env={"VIRTUAL_ENV": str(project)}, extra=(str(other),), own=())
    assert s.torch.version == "2.1.0" and len(s.environments) == 2  # --python-env comes first
    empty = read_stack(env={}, own=(str(tmp_path),))
    assert empty.torch is None and check_stack(empty, machine()).issues == ()


def test_driver_tables():
    assert min_driver("12.4") == "550.54.14" and min_driver("11.8") == "520.61.05"
    assert min_driver("12.7") == MIN_DRIVER_FOR_CUDA[(12, 6)]  # an unlisted minor: the nearest below
    assert newest_build_for_driver("470.82.01") == "11.8"     # through 11.x minor-version compatibility
    assert newest_build_for_driver("550.54.14") == "12.4"
    assert runs_on_cc(("8.0", "8.6"), "8.9") and not runs_on_cc(("8.0", "8.6", "9.0"), "12.0")
    assert not runs_on_cc(("7.5", "8.0"), "7.0")


def test_driver_too_old_for_the_cuda_build_cannot_run(tmp_path):
    s = stack_of(tmp_path, ("torch", "2.5.1+cu124", ()))
    [issue] = check_stack(s, machine(driver="470.82.01", cuda="11.4")).issues
    assert issue.blocking and issue.kind == "driver"
    assert "driver 470.82.01 supports CUDA 11.4; torch 2.5.1+cu124 needs driver >= 550.54.14" in issue.reason
    assert "upgrade the NVIDIA driver" in issue.fix and "cu118" in issue.fix
    # Same CUDA major, older driver: minor-version compatibility, a warning only.
    [warn] = check_stack(s, machine(driver="535.54.03", cuda="12.2")).issues
    assert not warn.blocking and "minor-version compatibility" in warn.reason
    assert check_stack(s, machine(driver="550.54.14")).issues == ()


def test_gpu_without_kernels_in_the_torch_build_cannot_run(tmp_path):
    s = stack_of(tmp_path, ("torch", "2.5.1+cu124", ()))
    [issue] = check_stack(s, machine("rtx-5090", driver="570.86.10", cuda="12.8")).issues
    assert issue.blocking and issue.kind == "compute_capability"
    assert "compute capability 12.0" in issue.reason and "sm_90" in issue.reason and "cu128" in issue.fix
    new = stack_of(tmp_path / "new", ("torch", "2.7.0+cu128", ()))
    assert check_stack(new, machine("rtx-5090", driver="570.86.10", cuda="12.8")).issues == ()


def test_wrong_backend_cannot_run(tmp_path):
    cpu = stack_of(tmp_path, ("torch", "2.5.1+cpu", ()))
    [issue] = check_stack(cpu, machine()).issues
    assert issue.blocking and issue.kind == "backend" and "CPU-only" in issue.reason and "cu124" in issue.fix
    cuda = stack_of(tmp_path / "b", ("torch", "2.5.1+cu124", ()))
    [amd] = check_stack(cuda, replace(load_profile("mi300x"), kind="probed")).issues
    assert amd.blocking and "AMD" in amd.reason and "rocm" in amd.fix


def _plan(model, *args, m=None):
    from fitcheck.pipeline import check as check_api
    from fitcheck.request import Request

    return check_api(model, Request(**dict(args)), m, alternatives=False).plan


def test_kernels_the_request_needs(tmp_path):
    bare = stack_of(tmp_path, ("torch", "2.5.1+cu124", ()))
    box = machine()
    vllm_plan = _plan("qwen-0.5b", ("engine", "vllm"), m=box)
    [issue] = check_stack(bare, box, vllm_plan).issues
    assert issue.kind == "package" and "pip install vllm" in issue.fix
    nf4 = _plan("qwen-0.5b", ("precision", "nf4"), m=box)
    assert "pip install bitsandbytes" in check_stack(bare, box, nf4).issues[0].fix
    pinned = stack_of(tmp_path / "p", ("torch", "2.4.0+cu124", ()), ("vllm", "0.6.4", ("torch==2.5.1",)))
    [issue] = check_stack(pinned, box, vllm_plan).issues
    assert "vllm 0.6.4 requires torch==2.5.1" in issue.reason
    t4 = machine("t4", driver="550.54.14", cuda="12.4")
    from fitcheck.pipeline import check as check_api
    from fitcheck.request import Request

    flash = check_api("qwen-0.5b", Request(mode="lora", attention="flash"), t4, alternatives=False).plan
    issues = check_stack(stack_of(tmp_path / "f", ("torch", "2.5.1+cu124", ()), ("flash-attn", "2.7.0", ())), t4,
                         flash).issues
    assert [i.kind for i in issues] == ["kernel"] and "8.0" in issues[0].reason
    llama = _plan("qwen-0.5b", ("precision", "q4_k_m"), m=box)
    old_driver = machine(driver="470.82.01", cuda="11.4")
    assert check_stack(bare, old_driver, llama).issues == ()  # llama.cpp does not run torch


# ---- the CLI: check, probe, --require on this machine (the probe faked) -------------------------
@pytest.fixture
def this_machine(monkeypatch):
    def use(m):
        monkeypatch.setattr("fitcheck.probe.probe", lambda **kw: m)
    return use


def _run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env or {})


def test_check_says_cannot_run_here_with_reason_and_fix(tmp_path, this_machine):
    env = make_env(tmp_path / "venv", ("torch", "2.5.1+cu124", ()))
    this_machine(machine(driver="470.82.01", cuda="11.4"))
    r = _run("qwen-0.5b", "-v", env={"VIRTUAL_ENV": str(env)})
    assert r.exit_code == 1, r.output
    assert ("CANNOT RUN HERE — driver 470.82.01 supports CUDA 11.4; torch 2.5.1+cu124 needs driver >= 550.54.14"
            in r.output)
    assert "Software: torch 2.5.1 (CUDA 12.4)" in r.output
    doc = json.loads(_run("qwen-0.5b", "--json", env={"VIRTUAL_ENV": str(env)}).output)
    assert doc["verdict"]["status"] == "cannot_run" and doc["verdict"]["exit_code"] == 1
    assert set(doc["software"]) == {"environments", "torch", "packages", "problems", "issues", "status"}
    assert doc["software"]["status"] == "cannot_run" and doc["software"]["issues"][0]["kind"] == "driver"
    # A --profile describes another machine: the installed stack is not checked against it.
    prof = json.loads(_run("qwen-0.5b", "--profile", "rtx-4090", "--json", env={"VIRTUAL_ENV": str(env)}).output)
    assert prof["software"] is None and prof["verdict"]["status"] == "fits"
    assert _run("qwen-0.5b", "--profile", "rtx-4090", "--python-env", str(env)).exit_code == 2


def test_probe_software_section_and_json(tmp_path, this_machine):
    env = make_env(tmp_path / "venv", ("torch", "2.5.1+cu124", ()), ("bitsandbytes", "0.45.0", ()))
    this_machine(machine("rtx-5090", driver="570.86.10", cuda="12.8"))
    out = _run("probe", "--python-env", str(env)).output
    assert "Software (package metadata only)" in out and "bitsandbytes  0.45.0" in out and "cannot run" in out
    doc = json.loads(_run("probe", "--json", "--python-env", str(env)).output)
    assert set(doc) == {"schema", "fitcheck_version", "machine", "software"}
    assert doc["software"]["torch"]["backend_version"] == "12.4"
    assert doc["software"]["issues"][0]["kind"] == "compute_capability"
    assert json.loads(_run("probe", "--profile", "rtx-4090", "--json").output)["software"] is None


def test_require_driver_and_torch_cuda(tmp_path, this_machine):
    env = make_env(tmp_path / "venv", ("torch", "2.5.1+cu124", ()))
    this_machine(machine(driver="535.54.03", cuda="12.2"))
    venv = {"VIRTUAL_ENV": str(env)}
    ok = _run("check", "--require", "driver>=530", "--require", "torch>=2.4", env=venv)
    assert ok.exit_code == 0, ok.output
    bad = _run("check", "--require", "driver>=550", "--require", "torch_cuda<=driver", env=venv)
    assert bad.exit_code == 1
    assert "driver>=550: FAILED (NVIDIA driver version: 535.54.03)" in bad.output
    assert "torch_cuda<=driver: FAILED" in bad.output and "the driver supports CUDA 12.2" in bad.output
    assert _run("check", "--require", "torch_cuda<=cuda", env=venv).exit_code == 1
    assert _run("check", "--profile", "rtx-4090", "--require", "torch>=2.0").exit_code == 3  # not read there
    assert _run("check", "--require", "torch_cuda<=nonsense", env=venv).exit_code == 2


def test_torch_arch_lists_follow_the_release(tmp_path):
    v100 = dict(profile="rtx-4090", driver="570.86.10", cuda="12.8", cc="7.0")
    for version, runs in (("2.7.0+cu128", False), ("2.8.0+cu128", True), ("2.11.0+cu128", False),
                          ("2.8.0+cu126", True)):
        s = stack_of(tmp_path / version, ("torch", version, ()))
        issues = check_stack(s, machine(**v100)).issues
        assert (not issues) == runs, (version, issues)
    pascal = stack_of(tmp_path / "p", ("torch", "2.8.0+cu128", ()))
    [issue] = check_stack(pascal, machine(driver="570.86.10", cuda="12.8", cc="6.1")).issues
    assert "cu126" in issue.fix  # the newest build that still ships sm_60
