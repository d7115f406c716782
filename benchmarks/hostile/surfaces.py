"""Surfaces the first battery did not reach: caches, stores, environments and receipts that fitcheck
finds through environment variables (HF_HOME, OLLAMA_MODELS, FITCHECK_CACHE_DIR, FITCHECK_CONFIG_DIR,
VIRTUAL_ENV), ``--python-env``, ``--download-dir``, ``--revision``, ``probe --save``, ``measure
--receipts/--export``, terminal encodings and values that carry credentials or control characters.

Every case states the right behaviour, not today's: a FIFO is skipped or refused, never waited on; a
loop or a 5,000-deep document is one clear line (exit 2) or skipped; a receipts file is read in bounded
memory and time; a long path is exit 2 or a verdict, never exit 70; ``nan`` is exit 2; nothing prints a
raw control character or a password; nothing claims free space or a write it did not make.

``python -m benchmarks.hostile --only surfaces`` runs just these (their CLI and parser cases).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.hostile import files as F
from benchmarks.hostile.cases import BAD_INPUT, BIG, VERDICT, CliCase

ROOT = Path(__file__).resolve().parents[2]
LONG = ("/" + "a" * 99) * 50                 # 5,000 characters: valid components, past PATH_MAX
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SECRET = "SECRETPASS"
ESC_NAME = "evil \x1b]0;pwned\x07 \x1b[2J"   # an OSC title change and a screen clear
EXIT_0 = frozenset({0})
ANSWER_OR_BAD = VERDICT | BAD_INPUT          # a verdict or one clear line, nothing else
RECEIPT_SCHEMA = "fitcheck.receipt/1"
MEASURE_PROBE_MODEL = "qwen-0.5b"            # the model whose receipt check names on this machine
HUB_ID = "fitcheck-hostile/tiny"             # not in the catalog: fitcheck reads the HF cache for it
CATALOG_ID = "Qwen/Qwen2.5-0.5B"             # in the catalog: the cache is read with --revision, or for disk


# ---- building blocks --------------------------------------------------------------------------------

def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() and not path.is_symlink():
        os.mkfifo(path)
    return path


def _link(link: Path, target: str | Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(target)
    return link


def _loop(a: Path) -> Path:
    """``a`` -> ``a.loop``, ``a.loop`` -> ``a``: opening either is ELOOP."""
    _link(a, a.name + ".loop")
    _link(a.with_name(a.name + ".loop"), a.name)
    return a


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with open(path, "wb") as fh:
            fh.truncate(size)
    return path


def _deep(n: int = 5000) -> str:
    return "[" * n + "]" * n


def _hf_repo(hub: Path, repo_id: str, ref: Callable[[Path], object] | None = None) -> Path:
    """``hub/models--org--name`` with a snapshot holding a small llama config.json and refs/main:
    written as a commit file, or made by ``ref(path)`` (a FIFO, a loop)."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    F.write_json(folder / "snapshots" / COMMIT / "config.json", F.llama_config())
    main = folder / "refs" / "main"
    if ref is None:
        F.write(main, COMMIT)
    else:
        ref(main)
    return folder


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _metadata(version: str) -> str:
    return f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nSummary: hostile\n\n"


def _python_env(prefix: Path, entry: str, make: Callable[[Path], object]) -> Path:
    """A venv-like prefix whose site-packages holds ``entry`` (a dist-info/egg-info path), made by ``make``."""
    path = _site_packages(prefix) / entry
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path)
    return prefix


def _receipt(model: str, request: dict, fingerprint: str, **over) -> dict:
    doc: dict[str, Any] = {"schema": RECEIPT_SCHEMA, "date": "2025-01-01T00:00:00Z", "model": model, "request": request,
           "machine_fingerprint": fingerprint, "status": "measured", "device": "cpu",
           "measured": {"peak_bytes": 2**30}, "estimated": {"peak_bytes": 2**30}, "error_pct": 0.0}
    for key, value in over.items():
        if key in ("measured", "estimated") and isinstance(value, dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


def _receipts_dir(folder: Path, lines: list[str]) -> Path:
    """A FITCHECK_CACHE_DIR whose receipts.jsonl holds ``lines``."""
    F.write(folder / "receipts.jsonl", "".join(line + "\n" for line in lines))
    return folder


_MATCH_KEY: list[tuple[str, dict, str] | None] = []   # read once per battery run


def _match_key(env: dict[str, str]) -> tuple[str, dict, str] | None:
    """(model id, request, machine fingerprint) that `fitcheck qwen-0.5b` on this machine matches a receipt
    with; None when they cannot be read (the cases that need a matching receipt are then left out)."""
    if not _MATCH_KEY:
        _MATCH_KEY.append(_read_match_key(env))
    return _MATCH_KEY[0]


def _read_match_key(env: dict[str, str]) -> tuple[str, dict, str] | None:
    try:
        out = subprocess.run([sys.executable, "-m", "fitcheck", MEASURE_PROBE_MODEL, "--json"], env=env,
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        doc = json.loads(out.stdout)
        code = ("from fitcheck.probe import probe\nfrom fitcheck.measure.receipts import fingerprint\n"
                "print(fingerprint(probe()))\n")
        fp = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                            cwd=ROOT).stdout.strip()
        return (doc["model"]["id"], doc["request"], fp) if fp else None
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return None


def _measure_would_refuse(env: dict[str, str], model: str) -> bool:
    """True when the estimate of `measure MODEL` on this CPU (transformers, bf16) does not fit, so measure
    refuses it; False (the case is left out) when it fits, and measure would load the model."""
    try:
        out = subprocess.run([sys.executable, "-m", "fitcheck", model, "--engine", "transformers", "--device",
                              "cpu", "-p", "bf16", "--json"], env=env, capture_output=True, text=True, timeout=60,
                             cwd=ROOT)
        return json.loads(out.stdout)["verdict"]["status"] not in ("fits", "tight")
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return False


# ---- command lines -----------------------------------------------------------------------------

def cli_cases(work: Path, base_env: dict[str, str]) -> list[CliCase]:
    root = work / "surfaces"
    clean = root / "clean"
    for sub in ("cache", "config", "ollama", "llama", "hf-home"):
        (clean / sub).mkdir(parents=True, exist_ok=True)
    # every case: offline, and its own empty fitcheck cache and config, Ollama store and llama.cpp cache
    iso = {"HF_HUB_OFFLINE": "1", "FITCHECK_CACHE_DIR": str(clean / "cache"),
           "FITCHECK_CONFIG_DIR": str(clean / "config"), "OLLAMA_MODELS": str(clean / "ollama"),
           "LLAMA_CACHE": str(clean / "llama"), "HF_HOME": str(clean / "hf-home")}
    env = {**base_env, **iso}
    cases: list[CliCase] = []
    for build in (_fifo_cases, _loop_cases, _nesting_cases, _big_receipt_cases, _long_value_cases, _scale_cases,
                  _number_cases, _control_cases, _claim_cases, _encoding_cases, _credential_cases, _plan_cases,
                  _measure_cases):
        cases += build(root, env)
    return [CliCase(c.group, c.name, c.argv, c.expect, {**iso, **c.env}, c.must_not_print, c.must_print, c.secret)
            for c in cases]


def _fifo_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    hf = root / "hf-fifo"
    for repo in (HUB_ID, CATALOG_ID):
        _hf_repo(hf / "hub", repo, _fifo)
    hf_env = {"HF_HOME": str(hf)}
    dist = _python_env(root / "env-dist-fifo", "torch-2.4.0.dist-info", lambda p: _fifo(p / "METADATA"))
    egg = _python_env(root / "env-egg-fifo", "torch-2.4.0-py3.11.egg-info", lambda p: _fifo(p / "PKG-INFO"))
    egg_file = _python_env(root / "env-eggfile-fifo", "torch-2.4.0-py3.11.egg-info", _fifo)
    receipts = root / "cache-fifo"
    _fifo(receipts / "receipts.jsonl")
    out_fifo = _fifo(root / "out.fifo")
    return [
        CliCase("fifo", "HF refs/main FIFO, Hub id not in the catalog", [HUB_ID, "--profile", "rtx-4090"],
                ANSWER_OR_BAD, hf_env),
        CliCase("fifo", "HF refs/main FIFO, catalog id --revision main",
                [CATALOG_ID, "--revision", "main", "--profile", "rtx-4090"], ANSWER_OR_BAD, hf_env),
        CliCase("fifo", "HF refs/main FIFO, catalog id here (download lookup)", [CATALOG_ID], VERDICT, hf_env),
        CliCase("fifo", "HF refs/main FIFO, models --local", ["models", "--local"], EXIT_0, hf_env),
        CliCase("fifo", "--python-env dist-info/METADATA FIFO", [MEASURE_PROBE_MODEL, "--python-env", str(dist)],
                VERDICT),
        CliCase("fifo", "probe --python-env dist-info/METADATA FIFO", ["probe", "--python-env", str(dist)], EXIT_0),
        CliCase("fifo", "--python-env egg-info/PKG-INFO FIFO", [MEASURE_PROBE_MODEL, "--python-env", str(egg)],
                VERDICT),
        CliCase("fifo", "probe, $VIRTUAL_ENV egg-info/PKG-INFO FIFO", ["probe"], EXIT_0, {"VIRTUAL_ENV": str(egg)}),
        CliCase("fifo", "probe --python-env egg-info file FIFO", ["probe", "--python-env", str(egg_file)], EXIT_0),
        CliCase("fifo", "measure --receipts, receipts.jsonl FIFO", ["measure", "--receipts"],
                EXIT_0 | BAD_INPUT, {"FITCHECK_CACHE_DIR": str(receipts)}),
        CliCase("fifo", "check here, receipts.jsonl FIFO", [MEASURE_PROBE_MODEL], VERDICT,
                {"FITCHECK_CACHE_DIR": str(receipts)}),
        CliCase("fifo", "measure --receipts --export FIFO", ["measure", "--receipts", "--export", str(out_fifo)]),
        CliCase("fifo", "probe --save FIFO", ["probe", "--save", str(out_fifo)], BAD_INPUT,
                must_not_print=("Saved profile",)),
    ]


def _loop_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    cfg = root / "loop-config"
    cfg.mkdir(parents=True, exist_ok=True)
    _loop(cfg / "config.json")
    shard = root / "loop-shard"
    F.write_json(shard / "config.json", F.llama_config())
    F.write_json(shard / "model.safetensors.index.json",
                 {"metadata": {"total_size": 1000}, "weight_map": {"model.embed_tokens.weight":
                                                                   "model-00001-of-00001.safetensors"}})
    _loop(shard / "model-00001-of-00001.safetensors")
    single = root / "loop-single"
    F.write_json(single / "config.json", F.llama_config())
    _loop(single / "model.safetensors")
    hf = root / "hf-loop"
    _hf_repo(hf / "hub", HUB_ID, _loop)
    receipts = root / "cache-loop"
    receipts.mkdir(parents=True, exist_ok=True)
    _loop(receipts / "receipts.jsonl")
    return [
        CliCase("loops", "config.json a -> b -> a", [str(cfg), "--profile", "rtx-4090"]),
        CliCase("loops", "index shard a -> b -> a", [str(shard), "--profile", "rtx-4090"]),
        CliCase("loops", "model.safetensors a -> b -> a", [str(single), "--profile", "rtx-4090"]),
        CliCase("loops", "HF refs/main a -> b -> a", [HUB_ID, "--profile", "rtx-4090"], ANSWER_OR_BAD,
                {"HF_HOME": str(hf)}),
        CliCase("loops", "measure --receipts, receipts.jsonl a -> b -> a", ["measure", "--receipts"],
                EXIT_0 | BAD_INPUT, {"FITCHECK_CACHE_DIR": str(receipts)}),
    ]


def _nesting_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    store = root / "ollama-deep"
    F.write(store / "manifests" / "registry.ollama.ai" / "library" / "deepnest" / "latest",
            '{"layers": ' + _deep() + "}")
    deep_line = json.dumps({"schema": RECEIPT_SCHEMA, "measured": {"peak_bytes": 1}, "status": "measured"})[:-1] \
        + ', "request": ' + _deep() + "}"
    receipts = _receipts_dir(root / "cache-deep", [deep_line])
    return [
        CliCase("nesting", "Ollama manifest nested 5000", ["deepnest:latest", "--profile", "rtx-4090"], BAD_INPUT,
                {"OLLAMA_MODELS": str(store)}),
        CliCase("nesting", "models --local, Ollama manifest nested 5000", ["models", "--local"], EXIT_0,
                {"OLLAMA_MODELS": str(store)}),
        CliCase("nesting", "measure --receipts, a receipt nested 5000", ["measure", "--receipts"], EXIT_0,
                {"FITCHECK_CACHE_DIR": str(receipts)}),
        CliCase("nesting", "check here, a receipt nested 5000", [MEASURE_PROBE_MODEL], VERDICT,
                {"FITCHECK_CACHE_DIR": str(receipts)}),
    ]


def _big_receipt_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    sparse = root / "cache-sparse"
    _sparse(sparse / "receipts.jsonl", 2 * 1024**3)
    zero = root / "cache-zero"
    _link(zero / "receipts.jsonl", "/dev/zero")
    many = root / "cache-200k"
    path = many / "receipts.jsonl"
    if not path.exists():
        many.mkdir(parents=True, exist_ok=True)
        line = json.dumps(_receipt("other/model", {"mode": "inference"}, "000000000000")) + "\n"
        with open(path, "w", encoding="utf-8") as fh:
            for _ in range(200):
                fh.write(line * 1000)
    cases = []
    for label, folder in (("2 GiB sparse, no newline", sparse), ("-> /dev/zero", zero),
                          ("200,000 other receipts", many)):
        e = {"FITCHECK_CACHE_DIR": str(folder)}
        cases += [CliCase("big receipts", f"measure --receipts, {label}", ["measure", "--receipts"], EXIT_0, e),
                  CliCase("big receipts", f"measure --receipts --json, {label}", ["measure", "--receipts", "--json"],
                          EXIT_0, e),
                  CliCase("big receipts", f"check here, {label}", [MEASURE_PROBE_MODEL], VERDICT, e)]
    return cases


def _long_value_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    hf_ok = root / "hf-ok"
    for repo in (HUB_ID, CATALOG_ID):
        _hf_repo(hf_ok / "hub", repo)
    long_rev = "a" * 5000
    g = "long values"
    return [
        CliCase(g, "OLLAMA_MODELS 5000 chars, an Ollama name", ["qwen2.5:7b", "--profile", "rtx-4090"], ANSWER_OR_BAD,
                {"OLLAMA_MODELS": LONG}),
        CliCase(g, "OLLAMA_MODELS 5000 chars, check here", [MEASURE_PROBE_MODEL], ANSWER_OR_BAD,
                {"OLLAMA_MODELS": LONG}),
        CliCase(g, "OLLAMA_MODELS 5000 chars, models --local", ["models", "--local"], EXIT_0 | BAD_INPUT,
                {"OLLAMA_MODELS": LONG}),
        CliCase(g, "HF_HOME 5000 chars, a Hub id", [HUB_ID, "--profile", "rtx-4090"], BAD_INPUT, {"HF_HOME": LONG}),
        CliCase(g, "HF_HOME 5000 chars, check here", [MEASURE_PROBE_MODEL], ANSWER_OR_BAD, {"HF_HOME": LONG}),
        CliCase(g, "HF_HOME 5000 chars, models --local", ["models", "--local"], EXIT_0 | BAD_INPUT,
                {"HF_HOME": LONG}),
        CliCase(g, "--revision 5000 chars, catalog id cached",
                [CATALOG_ID, "--revision", long_rev, "--profile", "rtx-4090"], ANSWER_OR_BAD, {"HF_HOME": str(hf_ok)}),
        CliCase(g, "--revision 5000 chars, Hub id cached", [HUB_ID, "--revision", long_rev, "--profile", "rtx-4090"],
                ANSWER_OR_BAD, {"HF_HOME": str(hf_ok)}),
        CliCase(g, "FITCHECK_CACHE_DIR 5000 chars, check here", [MEASURE_PROBE_MODEL], ANSWER_OR_BAD,
                {"FITCHECK_CACHE_DIR": LONG}),
        CliCase(g, "FITCHECK_CONFIG_DIR 5000 chars, --profile my-box", ["qwen-7b", "--profile", "my-box"],
                BAD_INPUT, {"FITCHECK_CONFIG_DIR": LONG}),
    ]


def _scale_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    plan = root / "plan-3000.toml"
    if not plan.exists():
        F.write(plan, "".join(f'[[case]]\nmodel = "qwen-7b"\nprofile = "rtx-4090"\ncontext = {1024 + i}\n'
                              for i in range(3000)))
    limit = root / "plan-1000.toml"
    if not limit.exists():
        F.write(limit, "".join(f'[[case]]\nmodel = "qwen-7b"\nprofile = "rtx-4090"\ncontext = {1024 + i}\n'
                               for i in range(1000)))
    g = "scale"
    return [
        CliCase(g, "plan of 1,000 cases (the limit)", ["check", "--plan", str(limit)], VERDICT),
        CliCase(g, "--nodes 1024 on 8x-h100", ["qwen-7b", "--nodes", "1024", "--profile", "8x-h100"], ANSWER_OR_BAD),
        CliCase(g, "deepseek-v3 vllm --nodes 1024 on 8x-h100",
                ["deepseek-v3", "--engine", "vllm", "--nodes", "1024", "--profile", "8x-h100"], ANSWER_OR_BAD),
        CliCase(g, "full --zero 3 --nodes 1024 on 8x-h100",
                ["qwen-7b", "--mode", "full", "--zero", "3", "--nodes", "1024", "--profile", "8x-h100"], ANSWER_OR_BAD),
        CliCase(g, "where --nodes 1024", ["where", "qwen-7b", "--nodes", "1024"], ANSWER_OR_BAD),
        CliCase(g, "plan of 3,000 cases", ["check", "--plan", str(plan)], ANSWER_OR_BAD),  # verdicts, or a cap
    ]


def _number_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    g = "numbers+"
    cases = [CliCase(g, f"{flag} nan", ["qwen-7b", "--profile", "rtx-4090", flag, "nan"])
             for flag in ("--kwh-price", "--amortize-years", "--hours-per-day")]
    cases += [
        CliCase(g, "where --kwh-price nan", ["where", "qwen-7b", "--kwh-price", "nan"]),
        CliCase(g, "FITCHECK_KWH_PRICE=nan", ["qwen-7b", "--profile", "rtx-4090"], BAD_INPUT,
                {"FITCHECK_KWH_PRICE": "nan"}),
    ]
    cu = _python_env(root / "env-cu999999999", "torch-2.4.0+cu999999999.dist-info",
                     lambda p: F.write(p / "METADATA", _metadata("2.4.0+cu999999999")))
    cases += [
        CliCase(g, "torch 2.4.0+cu999999999, check here", [MEASURE_PROBE_MODEL, "--python-env", str(cu)], VERDICT),
        CliCase(g, "torch 2.4.0+cu999999999, probe", ["probe", "--python-env", str(cu)], EXIT_0),
        CliCase(g, "torch 2.4.0+cu999999999, --require torch_cuda<=driver",
                ["check", "--require", "torch_cuda<=driver", "--python-env", str(cu)], frozenset({1, 3})),
    ]
    # receipts with odd numbers: the listing, its JSON, and check naming the one that matches (below)
    odd: dict[str, dict[str, Any]] = {"string": {"measured": {"peak_bytes": "x"}}, "400-digit": {"measured": {"peak_bytes": int(BIG)}},
           "NaN": {"measured": {"peak_bytes": float("nan")}, "error_pct": float("nan")},
           "Infinity": {"measured": {"peak_bytes": float("inf")}, "estimated": {"peak_bytes": float("-inf")}}}
    key = _match_key(env)
    for i, (label, over) in enumerate(odd.items()):  # folder names by number: a path never holds 'NaN'
        model, request, fp = key or ("other/model", {"mode": "inference"}, "000000000000")
        folder = _receipts_dir(root / f"cache-odd-{i}", [json.dumps(_receipt(model, request, fp, **over))])
        e = {"FITCHECK_CACHE_DIR": str(folder)}
        cases += [
            CliCase(g, f"measure --receipts, peak_bytes {label}", ["measure", "--receipts"], EXIT_0, e,
                    must_not_print=("+nan", "-nan", "+inf", "-inf", "nan GiB", "inf GiB")),
            CliCase(g, f"measure --receipts --json, peak_bytes {label}", ["measure", "--receipts", "--json"], EXIT_0,
                    e, must_not_print=("NaN", "Infinity")),
        ]
        if key is not None:
            cases += [
                CliCase(g, f"check here, matching receipt peak_bytes {label}", [MEASURE_PROBE_MODEL], VERDICT, e,
                        must_not_print=("nan GiB", "inf GiB", "nan %")),
                CliCase(g, f"check here --json, matching receipt peak_bytes {label}", [MEASURE_PROBE_MODEL, "--json"],
                        VERDICT, e, must_not_print=("NaN", "Infinity", "nan GiB", "inf GiB")),
            ]
    if key is not None:  # the surface is reached: a well-formed matching receipt is named
        folder = _receipts_dir(root / "cache-valid", [json.dumps(_receipt(*key))])
        cases.append(CliCase(g, "check here, a valid matching receipt is named (control)", [MEASURE_PROBE_MODEL],
                             VERDICT, {"FITCHECK_CACHE_DIR": str(folder)}, must_print=("Measured on this machine",)))
    return cases


def _profile_text(name: str, gpu_name: str = "NVIDIA GeForce RTX 4090") -> str:
    text = (ROOT / "hardware_profiles" / "rtx-4090.toml").read_text(encoding="utf-8")
    esc = json.dumps  # a TOML basic string: \u001b escapes decode to the raw characters
    text = text.replace('name = "rtx-4090"', f"name = {esc(name)}", 1)
    return text.replace('name = "NVIDIA GeForce RTX 4090"', f"name = {esc(gpu_name)}", 1)


def _control_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    g = "control chars"
    named = F.write(root / "profile-esc-name.toml", _profile_text(ESC_NAME))
    gpu = F.write(root / "profile-esc-gpu.toml", _profile_text("esc-gpu", "NVIDIA \x1b[2J RTX"))
    config = root / "config-esc"
    F.write(config / "profiles" / "evil.toml", _profile_text(ESC_NAME))
    esc_env = _python_env(root / "env-esc", "torch-2.4.0.dist-info",
                          lambda p: F.write(p / "METADATA", _metadata("2.4.0\x1b]0;pwned\x07\x1b[2J")))
    cases = [
        CliCase(g, "profile name with ESC/BEL, check", ["qwen-7b", "--profile", str(named)], ANSWER_OR_BAD),
        CliCase(g, "profile name with ESC/BEL, probe", ["probe", "--profile", str(named)], EXIT_0 | BAD_INPUT),
        CliCase(g, "profile name with ESC/BEL, profiles", ["profiles"], EXIT_0, {"FITCHECK_CONFIG_DIR": str(config)}),
        CliCase(g, "profile name with ESC/BEL, where", ["where", "qwen-7b"], ANSWER_OR_BAD,
                {"FITCHECK_CONFIG_DIR": str(config)}),
        CliCase(g, "GPU name with ESC, check", ["qwen-7b", "--profile", str(gpu)], ANSWER_OR_BAD),
        CliCase(g, "torch Version with ESC, check here", [MEASURE_PROBE_MODEL, "--python-env", str(esc_env)], VERDICT),
        CliCase(g, "torch Version with ESC, probe", ["probe", "--python-env", str(esc_env)], EXIT_0),
    ]
    key = _match_key(env) or ("other/model", {"mode": "inference"}, "000000000000")
    folder = _receipts_dir(root / "cache-esc-date",
                           [json.dumps(_receipt(*key, date="\x1b[2J\x1b]0;pwned\x07"))])
    e = {"FITCHECK_CACHE_DIR": str(folder)}
    cases += [CliCase(g, "receipt date with ESC, measure --receipts", ["measure", "--receipts"], EXIT_0, e),
              CliCase(g, "receipt date with ESC, check here", [MEASURE_PROBE_MODEL], VERDICT, e)]
    return cases


def _claim_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    g = "claims"
    regular = F.write(root / "download-file", "not a folder\n")
    fifo = _fifo(root / "download.fifo")
    free = ("B free",)  # "78.0 GiB free", "0.0 MiB free": a free-space figure for the folder given
    cases = [CliCase(g, "probe --save /dev/null", ["probe", "--save", "/dev/null"], BAD_INPUT,
                     must_not_print=("Saved profile to /dev/null",))]
    for label, where in (("a regular file", str(regular)), ("a FIFO", str(fifo)), ("/dev/null", "/dev/null"),
                         ("/proc", "/proc")):
        cases.append(CliCase(g, f"--download-dir {label}", [MEASURE_PROBE_MODEL, "--download-dir", where],
                             ANSWER_OR_BAD, must_not_print=free))
    if os.geteuid() != 0:  # root writes anywhere: chmod 500 says nothing then
        locked = root / "download-locked"
        locked.mkdir(parents=True, exist_ok=True)
        locked.chmod(0o500)
        cases.append(CliCase(g, "--download-dir unwritable (chmod 500)",
                             [MEASURE_PROBE_MODEL, "--download-dir", str(locked)], ANSWER_OR_BAD, must_not_print=free))
    hf = root / "hf-dotdot"
    F.write_json(hf / "hub" / "models--..--.." / "snapshots" / COMMIT / "config.json", F.llama_config())
    F.write(hf / "hub" / "models--..--.." / "refs" / "main", COMMIT)
    cases += [CliCase(g, "HF cache models--..--.., models --local", ["models", "--local"], EXIT_0,
                      {"HF_HOME": str(hf)}, must_not_print=("../..",)),
              CliCase(g, "HF cache models--..--.., models --local --json", ["models", "--local", "--json"], EXIT_0,
                      {"HF_HOME": str(hf)}, must_not_print=("../..", "..\\/..")),
              ]
    return cases


def _encoding_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    cases = []
    for enc in ("latin-1", "cp1252"):
        e = {"PYTHONIOENCODING": enc}
        cases += [CliCase("encoding", f"check, {enc}", ["check", "qwen-7b", "--profile", "rtx-4090"], VERDICT, e),
                  CliCase("encoding", f"where, {enc}", ["where", "qwen-7b"], VERDICT, e),
                  CliCase("encoding", f"probe, {enc}", ["probe"], VERDICT, e)]
    return cases


def _credential_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    g = "credentials"
    url = f"https://user:{SECRET}@host/x"
    return [
        CliCase(g, "--python-env URL with a password, check", [MEASURE_PROBE_MODEL, "--python-env", url], BAD_INPUT,
                secret=SECRET),
        CliCase(g, "--python-env URL with a password, probe", ["probe", "--python-env", url], BAD_INPUT,
                secret=SECRET),
        CliCase(g, "$VIRTUAL_ENV URL with a password, probe", ["probe"], EXIT_0, {"VIRTUAL_ENV": url}, secret=SECRET),
        CliCase(g, "Hub URL with a password as MODEL",
                [f"https://user:{SECRET}@huggingface.co/org/model", "--profile", "rtx-4090"], BAD_INPUT,
                secret=SECRET),
    ]


def _plan_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    plan = F.write(root / "plan-cpu-moe-all.toml",
                   '[[case]]\nmodel = "Qwen/Qwen3-30B-A3B"\nprofile = "rtx-4090"\ncpu_moe = "all"\n')
    return [CliCase("plans", 'cpu_moe = "all" (as --cpu-moe all)', ["check", "--plan", str(plan)], VERDICT)]


def _measure_cases(root: Path, env: dict[str, str]) -> list[CliCase]:
    """`measure MODEL` on this CPU must refuse at once where the estimate does not fit: each model is left out
    (said on stderr) where its estimate fits, since measure would then load it.  qwen-7b (16 GiB) fits a
    machine with 18 GiB free; qwen-72b (145 GiB) fits none of the battery's.  --memory-limit 1GiB is a second
    guard: were one run anyway, it stops at 1 GiB above its baseline instead of loading the model."""
    cases = []
    for model in ("qwen-7b", "qwen-72b"):
        if not _measure_would_refuse(env, model):
            print(f"surfaces: measure {model} left out: its estimate fits this machine (measure would run it)",
                  file=sys.stderr)
            continue
        argv = ["measure", model, "--device", "cpu", "--memory-limit", "1GiB"]
        cases += [CliCase("measure", f"measure {model} on this CPU: refused at once (estimate does not fit)", argv,
                          frozenset({1})),
                  CliCase("measure", f"measure {model} --json on this CPU: refused at once", [*argv, "--json"],
                          frozenset({1}), must_not_print=("NaN", "Infinity"))]
    return cases
