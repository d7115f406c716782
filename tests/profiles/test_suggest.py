"""An unknown --profile name: the suggestions are of the kind the name asks for (fitcheck.profiles.suggest), they
exist, and the hint is one line."""

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fitcheck.cli import cli
from fitcheck.errors import FitcheckError
from fitcheck.profiles import list_profiles, load_profile, profile_names
from fitcheck.profiles.overrides import catalogue_gpu, parse_count_prefix
from fitcheck.profiles.suggest import CPU_MACHINE, GPU, MAC, NO_GPU, intent_of, suggest, unknown_profile_hint, words

PROFILES = list_profiles()
BY_NAME = {m.name: m for m in PROFILES}


def hint_for(name: str) -> str:
    with pytest.raises(FitcheckError) as info:
        load_profile(name)
    assert info.value.message == f"unknown hardware profile {name!r}"
    return info.value.hint


def named(hint: str) -> list[str]:
    """The profiles a hint suggests ('did you mean a, b, c? ...')."""
    listed = hint.removeprefix("did you mean ").split("?")[0].removesuffix(" (no GPU)")
    return listed.split(", ")


@pytest.mark.parametrize(("typed", "intent"), [
    ("cpu-only", NO_GPU), ("no-gpu", NO_GPU), ("nogpu-box", NO_GPU), ("laptop-64gb", CPU_MACHINE),
    ("ubuntu", CPU_MACHINE), ("desktop", CPU_MACHINE), ("rtx-4090-laptop", GPU), ("rtx4080", GPU), ("a100", GPU),
    ("b200", GPU), ("h100-pcie", GPU), ("t4", GPU), ("mi250x", GPU), ("github-gpu", GPU), ("macbook-m2", MAC),
    ("m4-max", MAC), ("apple-studio", MAC), ("zzz", "any"),
])
def test_the_kind_a_name_asks_for(typed, intent):
    assert intent_of(typed) == intent


def test_words_split_a_gpu_family_from_its_number():
    assert words("RTX4090-Laptop") == ["rtx", "4090", "laptop"]
    assert words("8x-h100") == ["8x", "h100"]


def test_cpu_only_suggests_machines_without_a_gpu_and_the_device_cpu_what_if():
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "cpu-only"])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fitcheck: unknown hardware profile 'cpu-only' (did you mean ")
    hint = lines[0].split(" (", 1)[1]
    names = named(hint)
    assert len(names) == 3 and all(not BY_NAME[n].gpus for n in names), names
    assert "--device cpu" in hint and "--ram SIZE" in hint and "`fitcheck profiles` lists them all" in hint


@pytest.mark.parametrize(("typed", "first"), [
    ("rtx4090", "rtx-4090"), ("rtx-4080", "rtx-4090"), ("a100-96gb", "a100-80gb"), ("a100-40", "a100-40gb"),
    ("h100", "h100-sxm"), ("4x-h100", "8x-h100"), ("rtx3090-24gb", "rtx-3090"), ("2x-3090", "2x-rtx-3090"), ("github-gpu", "github-gpu-t4"),
    ("tesla-t4", "t4"), ("mi250", "mi300x"),
])
def test_a_gpu_name_suggests_the_closest_gpus(typed, first):
    hint = hint_for(typed)
    names = named(hint)
    assert names[0] == first, hint
    assert all(BY_NAME[n].gpus and BY_NAME[n].gpus[0].vendor != "apple" for n in names), names
    gpu_arg = hint.split("--gpu ", 1)[1].split(" ", 1)[0]
    assert catalogue_gpu(parse_count_prefix(gpu_arg, "--gpu")[1], PROFILES)


def test_a_gpu_name_names_the_what_if_with_the_count_typed():
    assert "--gpu 4xh100-sxm answers as if this machine had those GPUs" in hint_for("4x-h100")
    assert "--gpu rtx-4090 answers as if this machine had that GPU" in hint_for("rtx4090")


def test_the_memory_a_cpu_machine_name_gives_ranks_the_suggestions():
    assert named(hint_for("laptop-64gb"))[0] == "laptop-32gb"
    assert named(hint_for("laptop-12gb"))[0] in ("laptop-8gb", "laptop-16gb")
    assert named(hint_for("github-ubuntu"))[0] == "github-ubuntu-latest"


def test_a_mac_name_suggests_macs():
    names = named(hint_for("macbook-pro-m4"))
    assert names[0] == "macbook-pro-m4-max-128gb" and all(BY_NAME[n].gpus[0].vendor == "apple" for n in names)


def test_a_name_of_no_kind_is_suggested_by_spelling_as_before():
    hint = hint_for("rtx-409")
    assert hint.startswith("did you mean rtx-4090")
    assert named(hint_for("no-such-box"))  # still three names


def test_a_saved_profile_is_suggested_too(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert CliRunner().invoke(cli, ["probe", "--profile", "laptop-8gb", "--save", "my-cpu-box"]).exit_code == 0
    assert "my-cpu-box" in named(hint_for("my-cpu-bx"))


NAME_CHARS = st.sampled_from(list("abcdhlmtvxgpu0123456789-") + ["cpu", "rtx", "gpu", "laptop", "mac", "gb", "x"])


@settings(max_examples=300, deadline=None)
@given(st.lists(NAME_CHARS, min_size=1, max_size=8).map("".join))
def test_every_suggestion_exists_and_the_hint_is_one_line(typed):
    if typed.strip().lower() in profile_names() or not typed.strip("-"):
        return
    hint = unknown_profile_hint(typed, PROFILES)
    assert "\n" not in hint and hint.endswith("`fitcheck profiles` lists them all")
    s = suggest(typed, PROFILES)
    assert len(s.names) == 3 and len(set(s.names)) == 3
    assert set(s.names) <= set(profile_names()), s
    if s.intent in (NO_GPU, CPU_MACHINE):
        assert all(not BY_NAME[n].gpus for n in s.names), s   # four shipped profiles have no GPU
    if s.intent == GPU:
        assert all(BY_NAME[n].gpus for n in s.names), s
    if "--gpu " in hint:
        arg = hint.split("--gpu ", 1)[1].split(" ", 1)[0]
        assert catalogue_gpu(parse_count_prefix(arg, "--gpu")[1], PROFILES)


def test_an_unknown_gpu_what_if_suggests_the_closest_gpus():
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "t4", "--gpu", "4080"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "no such GPU in the profile catalogue (did you mean rtx-4090, " in r.stderr
    r = CliRunner().invoke(cli, ["qwen-7b", "--profile", "t4", "--gpu", "voodoo"])
    assert r.exit_code == 2 and "(`fitcheck profiles` lists the GPUs)" in r.stderr
