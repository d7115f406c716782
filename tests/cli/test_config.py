"""Configuration without editing files: --gpu/--vram/--ram, FITCHECK_* environment variables, the user
config folder (saved profiles, extra catalog models) and shell completion of models and profiles."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from fitcheck.cli import cli
from fitcheck.user_config import config_dir, is_bare_name

GIB = 1024**3
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env, prog_name="fitcheck")


def doc_of(*args, env=None):
    r = run(*args, "--json", env=env)
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)


# ---- the config folder -------------------------------------------------------------------------------

@pytest.mark.parametrize("env, platform, want", [
    ({"FITCHECK_CONFIG_DIR": "/srv/fc", "XDG_CONFIG_HOME": "/x"}, "linux", "/srv/fc"),
    ({"XDG_CONFIG_HOME": "/x", "HOME": "/home/u"}, "linux", "/x/fitcheck"),
    ({"XDG_CONFIG_HOME": "relative", "HOME": "/home/u"}, "linux", "/home/u/.config/fitcheck"),
    ({"HOME": "/home/u"}, "linux", "/home/u/.config/fitcheck"),
    ({"HOME": "/Users/u"}, "darwin", "/Users/u/Library/Application Support/fitcheck"),
    ({"APPDATA": "C:/Users/u/AppData/Roaming", "HOME": "C:/Users/u"}, "win32", "C:/Users/u/AppData/Roaming/fitcheck"),
    ({"USERPROFILE": "C:/Users/u"}, "win32", "C:/Users/u/AppData/Roaming/fitcheck"),
])
def test_config_dir_per_platform(env, platform, want):
    assert config_dir(env, platform) == Path(want)


def test_bare_names_and_paths():
    assert is_bare_name("my-box") and is_bare_name("gpu_box.2")
    assert not any(is_bare_name(t) for t in ("my-box.toml", "./my-box", "a/b", ".hidden", "", "x" * 120))


def test_probe_save_name_writes_the_config_folder_and_profile_name_finds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    r = run("probe", "--profile", "rtx-4090", "--save", "my-box")
    assert r.exit_code == 0, r.output
    saved = tmp_path / "cfg" / "fitcheck" / "profiles" / "my-box.toml"
    assert saved.is_file() and "--profile my-box" in r.output
    assert 'name = "my-box"' in saved.read_text()
    assert doc_of("qwen-7b", "--profile", "my-box")["machine"]["name"] == "my-box"
    r = run("profiles")
    assert r.exit_code == 0 and "my-box" in r.output
    assert "my-box" in [p["name"] for p in json.loads(run("profiles", "--json").output)["profiles"]]
    # the alternatives' commands name it as it was given
    alt = doc_of("llama-3.1-70b", "--profile", "my-box", "--strict")["alternatives"][0]["fitcheck_command"]
    assert alt.endswith("--profile my-box")
    # a path still means a file where it says
    monkeypatch.chdir(tmp_path)
    assert run("probe", "--profile", "rtx-4090", "--save", "here.toml").exit_code == 0
    assert (tmp_path / "here.toml").is_file()


def test_a_saved_profile_shadows_a_shipped_one_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.setenv("FITCHECK_CONFIG_DIR", str(tmp_path))
    assert run("probe", "--profile", "h100-sxm", "--save", "rtx-4090").exit_code == 0
    assert "H100" in doc_of("qwen-7b", "--profile", "rtx-4090")["machine"]["summary"]


def _add_user_model(root: Path, repo_id: str, fixture: str) -> Path:
    folder = root / "fitcheck" / "models" / repo_id
    folder.mkdir(parents=True)
    (folder / "config.json").write_text((FIXTURES / fixture).read_text())
    return folder / "config.json"


def test_a_config_json_in_the_models_folder_adds_a_catalog_model(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert run("my-org/my-llama", "--profile", "rtx-4090").exit_code == 2  # not yet known (no network here)
    _add_user_model(tmp_path, "my-org/my-llama", "Llama-3.1-8B-Instruct.json")
    doc = doc_of("my-org/my-llama", "--profile", "rtx-4090")
    reference = doc_of("meta-llama/Llama-3.1-8B-Instruct", "--profile", "rtx-4090")
    assert doc["model"]["id"] == "my-org/my-llama"
    assert doc["model"]["params_total"] == reference["model"]["params_total"]
    assert doc["estimate"]["total_bytes"] == reference["estimate"]["total_bytes"]
    listed = json.loads(run("models", "my-org", "--json").output)["models"]
    assert [m["id"] for m in listed] == ["my-org/my-llama"] and listed[0]["family"] == "llama"
    assert "user catalog" in json.dumps(json.loads(run("models", "--show", "my-org/my-llama", "--json").output))


def test_a_user_config_for_a_shipped_id_replaces_its_numbers_and_keeps_its_aliases(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    before = doc_of("qwen-7b", "--profile", "rtx-4090")["model"]
    _add_user_model(tmp_path, "Qwen/Qwen2.5-7B-Instruct", "Llama-3.1-8B-Instruct.json")
    after = doc_of("qwen-7b", "--profile", "rtx-4090")["model"]
    assert after["id"] == before["id"] == "Qwen/Qwen2.5-7B-Instruct"
    assert after["architecture"] == "llama" != before["architecture"]


def test_a_malformed_user_model_is_one_line_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = _add_user_model(tmp_path, "my-org/broken", "Llama-3.1-8B-Instruct.json")
    path.write_text("{not json")
    assert run("models", "qwen-7b").exit_code == 0  # listing others is unaffected
    r = run("my-org/broken", "--profile", "rtx-4090")
    assert r.exit_code == 2 and str(path) in r.output and r.output.count("\n") == 1


# ---- --gpu / --vram / --ram ----------------------------------------------------------------------------

def test_vram_resizes_the_gpus_and_commands_repeat_it():
    doc = doc_of("qwen-7b", "--profile", "rtx-3060", "--vram", "24GiB")
    assert doc["verdict"]["status"] == "fits"
    assert [d["free_bytes"] for d in doc["verdict"]["devices"]] == [24 * GIB]
    assert "rtx-3060 (--vram 24GiB)" in doc["machine"]["summary"]
    two = doc_of("llama-3.1-70b", "--profile", "rtx-3060", "--vram", "2x24GiB", "--gpus", "2", "--strict")
    assert [d["free_bytes"] for d in two["verdict"]["devices"]] == [24 * GIB, 24 * GIB]
    for alt in two["alternatives"]:
        assert alt["fitcheck_command"].endswith("--profile rtx-3060 --vram 2x24GiB")
        again = doc_of(*shlex.split(alt["fitcheck_command"])[1:])  # the printed command reproduces it
        assert again["estimate"]["total_bytes"] == alt["total_bytes"] and again["verdict"]["status"] == alt["status"]


def test_gpu_from_the_profile_catalogue_and_ram():
    doc = doc_of("qwen-7b", "--profile", "laptop-16gb", "--gpu", "2xh100", "--ram", "256GiB")
    summary = doc["machine"]["summary"]
    assert "2× NVIDIA H100 80GB HBM3" in summary and "laptop-16gb (--gpu 2xh100 --ram 256GiB)" in summary
    assert doc["request"]["precision"] == "bf16"  # the H100's compute capability came with it
    by_profile = doc_of("qwen-7b", "--profile", "laptop-16gb", "--gpu", "rtx-4090")
    by_model = doc_of("qwen-7b", "--profile", "laptop-16gb", "--gpu", "GeForce RTX 4090")
    assert by_profile["verdict"]["devices"] == by_model["verdict"]["devices"]
    r = run("probe", "--profile", "laptop-16gb", "--ram", "64GiB", "--json")
    memory = json.loads(r.output)["machine"]["memory"]
    assert memory["total_bytes"] == 64 * GIB and memory["available_bytes"] == 64 * GIB - int(6.4 * GIB)


@pytest.mark.parametrize("args, needle", [
    (["--profile", "laptop-16gb", "--vram", "24GiB"], "has no GPU to resize"),
    (["--profile", "rtx-4090", "--vram", "24"], "no unit"),
    (["--profile", "rtx-4090", "--vram", "0x24GiB"], "GPU count"),
    (["--profile", "rtx-4090", "--gpu", "rtx40"], "matches several GPUs"),
    (["--profile", "rtx-4090", "--gpu", "voodoo5"], "no such GPU in the profile catalogue"),
    (["--profile", "rtx-4090", "--ram", "lots"], "--ram 'lots'"),
])
def test_bad_overrides_exit_2_one_line(args, needle):
    r = run("qwen-7b", *args)
    assert r.exit_code == 2 and needle in r.output and r.output.count("\n") == 1, r.output


# ---- environment variables -----------------------------------------------------------------------------

def test_environment_variables_set_defaults_the_command_line_overrides():
    env = {"FITCHECK_PROFILE": "h100-sxm", "FITCHECK_HEADROOM": "30", "FITCHECK_ENGINE": "vllm",
           "FITCHECK_PRECISION": "awq"}
    doc = doc_of("qwen-7b", env=env)
    assert doc["machine"]["name"] == "h100-sxm"
    request = doc["request"]
    assert (request["headroom_pct"], request["engine"], request["precision"]) == (30, "vllm", "awq")
    doc = doc_of("qwen-7b", "--profile", "rtx-4090", "--headroom", "5", env=env)
    assert doc["machine"]["name"] == "rtx-4090" and doc["request"]["headroom_pct"] == 5
    assert doc_of("qwen-7b", env={"FITCHECK_PROFILE": "rtx-3060", "FITCHECK_VRAM": "48GiB"})["verdict"]["devices"][0][
        "free_bytes"] == 48 * GIB
    r = run("qwen-7b", env={"FITCHECK_ENGINE": "bogus"})
    assert r.exit_code == 2 and "FITCHECK_ENGINE" in r.output


def test_help_names_the_environment_variables():
    text = " ".join(run("check", "--help").output.split())
    for name in ("FITCHECK_PROFILE", "FITCHECK_HEADROOM", "FITCHECK_ENGINE", "FITCHECK_PRECISION", "FITCHECK_VRAM",
                 "FITCHECK_RAM", "FITCHECK_GPU", "FITCHECK_KV_DTYPE", "FITCHECK_TRANSFORMERS_VERSION"):
        assert f"env var: {name}" in text, name


# ---- shell completion ----------------------------------------------------------------------------------

def complete(words: str) -> list[str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    r = CliRunner().invoke(cli, [], prog_name="fitcheck",
                           env={"_FITCHECK_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    return [line.split(",", 1)[1] for line in r.output.splitlines() if line]


def test_shell_completion_of_models_and_profiles(tmp_path, monkeypatch):
    assert "qwen2.5-7b" in complete("fitcheck check qwen2.5-7")
    assert "Qwen/Qwen2.5-7B-Instruct" in complete("fitcheck where Qwen/Qwen2.5-7")
    assert "Qwen2.5-7B-Instruct" in complete("fitcheck check Qwen2.5-7B-I")
    want = {"rtx-4060-laptop", "rtx-4070-laptop", "rtx-4090", "rtx-4090-laptop"}
    assert set(complete("fitcheck check qwen-7b --profile rtx-40")) == want
    assert "llama3-8b" in complete("fitcheck models --show llama3-8")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    _add_user_model(tmp_path, "my-org/my-llama", "Llama-3.1-8B-Instruct.json")
    assert run("probe", "--profile", "rtx-4090", "--save", "my-box").exit_code == 0
    assert complete("fitcheck check my-org/") == ["my-org/my-llama"]
    assert complete("fitcheck check qwen-7b --profile my-") == ["my-box"]


def test_a_user_model_s_files_are_read_once_per_file_identity(tmp_path, monkeypatch):
    """review: each access of a user catalog entry's spec re-read its config.json (and the generation_config.json
    beside it); they are read once until the file changes (path, mtime, size)."""
    import os

    from fitcheck.model import generation_config, local
    from fitcheck.model.catalog import load_catalog

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = _add_user_model(tmp_path, "my-org/counted", "Llama-3.1-8B-Instruct.json")
    reads: list[str] = []
    real_json, real_beside = local.read_json_file, generation_config.read_beside
    monkeypatch.setattr(local, "read_json_file", lambda p, *a, **k: reads.append(str(p)) or real_json(p, *a, **k))
    monkeypatch.setattr(generation_config, "read_beside",
                        lambda folder: reads.append(f"generation in {folder}") or real_beside(folder))
    entry = load_catalog().get("my-org/counted")
    first = entry.spec
    assert entry.spec == first and entry.config == entry.config
    assert reads.count(str(path)) == 1 and reads.count(f"generation in {path.parent}") == 1
    # a changed file (another size and mtime) is read again
    config = json.loads(path.read_text())
    config["num_hidden_layers"] = 16
    path.write_text(json.dumps(config))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert entry.spec.num_layers == 16 and reads.count(str(path)) == 2
