"""The hostile battery's inputs: command lines run as fitcheck processes, and parser inputs run in-process.

Every case says which exit codes are right (CLI) or which exceptions are (parsers: FitcheckError or
ValueError only); anything else, a traceback, a run over 10 s or over 500 MB is a finding.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from benchmarks.hostile import files as F

BIG = "9" * 400
HUGE = "9" * 5000
BAD_INPUT = frozenset({2})
VERDICT = frozenset({0, 1})
ANY_ANSWER = frozenset({0, 1, 2, 3})


@dataclass
class CliCase:
    group: str
    name: str
    argv: list[str]
    expect: frozenset[int] = BAD_INPUT
    env: dict[str, str] = field(default_factory=dict)
    must_not_print: tuple[str, ...] = ()
    must_print: tuple[str, ...] = ()
    secret: str = ""                    # a credential in the input: printing it is a finding


@dataclass
class ParserCase:
    group: str
    name: str
    run: Callable[[], object]


# ---- command lines -----------------------------------------------------------------------------

def number_cases() -> list[CliCase]:
    cases = []
    for flag in ("--context", "--batch", "--gpus", "--gpu-layers"):
        for value in (BIG, HUGE, "-1", "nan", "1e400", "0x10"):
            cases.append(CliCase("numbers", f"{flag} {value[:12]}", ["qwen-7b", flag, value, "--profile", "rtx-4090"]))
    for flag in ("--seq-len", "--grad-accum", "--lora-rank", "--batch"):
        for value in (BIG, HUGE, "0"):
            cases.append(CliCase("numbers", f"lora {flag} {value[:12]}",
                                 ["qwen-7b", "--mode", "lora", flag, value, "--profile", "rtx-4090"]))
    for value in (BIG + "b", "nanb", "1e400b", "0", "0.1", HUGE):
        cases.append(CliCase("numbers", f"--params {value[:12]}", ["nosuch-model-x", "--params", value]))
    for req in (f"ram>={BIG}GiB", f"gpus>={HUGE}", f"cc>={HUGE}", "ram>=nanGiB", "vram>=1e400GiB",
                f"cuda>={BIG}.{BIG}", "vram>=24"):
        cases.append(CliCase("numbers", f"--require {req[:16]}", ["check", "--profile", "rtx-4090", "--require", req]))
    for flag, value in (("--headroom", "nan"), ("--headroom", "inf"), ("--gpu-memory-utilization", "nan")):
        cases.append(CliCase("numbers", f"{flag} {value}", ["qwen-7b", flag, value, "--profile", "rtx-4090"]))
    for value in ("nan", "inf", "-1", BIG):
        cases.append(CliCase("numbers", f"where --max-price {value[:12]}", ["where", "qwen-7b", "--max-price", value]))
    cases.append(CliCase("numbers", "where --context huge", ["where", "qwen-7b", "--context", BIG]))
    return cases


def _plan(body: str) -> str:
    return f'[[case]]\nmodel = "qwen-7b"\nprofile = "rtx-4090"\n{body}\n'


def file_cases(work: Path) -> list[CliCase]:
    """Plans, profiles, configs, index files and --output that are not what they claim to be."""
    cases: list[CliCase] = []
    fifo = work / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    sparse = work / "sparse-2g.toml"
    with open(sparse, "wb") as fh:
        fh.truncate(2 * 1024**3)
    deep = F.write(work / "deep.toml", "x = " + "[" * 5000 + "]" * 5000 + "\n")
    cases += [
        CliCase("files", "--plan /dev/zero", ["check", "--plan", "/dev/zero"]),
        CliCase("files", "--plan FIFO", ["check", "--plan", str(fifo)]),
        CliCase("files", "--profile FIFO", ["qwen-7b", "--profile", str(fifo)]),
        CliCase("files", "--output FIFO", ["qwen-7b", "--profile", "rtx-4090", "--output", str(fifo)]),
        CliCase("files", "--plan 2 GiB", ["check", "--plan", str(sparse)]),
        CliCase("files", "--profile 2 GiB", ["qwen-7b", "--profile", str(sparse)]),
        CliCase("files", "--plan nested 5000", ["check", "--plan", str(deep)]),
        CliCase("files", "--profile nested 5000", ["qwen-7b", "--profile", str(deep)]),
        CliCase("files", "--plan folder", ["check", "--plan", str(work)]),
        CliCase("files", "--plan missing", ["check", "--plan", str(work / "missing.toml")]),
    ]
    for label, body in (("400-digit", f"context = {BIG}"), ("5000-digit", f"context = {HUGE}"),
                        ("nan", "headroom = nan"), ("inf", "gpu_memory_utilization = inf"),
                        ("negative", "batch = -3"), ("array 5000 deep", "context = " + "[" * 5000 + "]" * 5000)):
        path = F.write(work / f"plan-{label.replace(' ', '-')}.toml", _plan(body))
        cases.append(CliCase("files", f"plan {label}", ["check", "--plan", str(path)]))
        prof = F.write(work / f"profile-{label.replace(' ', '-')}.toml",
                       'kind = "desktop"\n[memory]\ntotal_bytes = ' + (body.split("= ", 1)[1]) + "\n")
        cases.append(CliCase("files", f"profile {label}", ["qwen-7b", "--profile", str(prof)]))
    # config.json variants
    for label, text in (("deep", "[" * 5000 + "]" * 5000), ("400-digit", json.dumps({"model_type": "llama"})[:-1]
                        + f', "num_hidden_layers": {BIG}}}'), ("not json", "{"), ("NaN", '{"hidden_size": NaN}'),
                        ("array", "[1, 2]"), ("binary", "\x00\x01\x02")):
        folder = work / f"cfg-{label.replace(' ', '-')}"
        F.write(folder / "config.json", text)
        cases.append(CliCase("files", f"config {label}", [str(folder), "--profile", "rtx-4090"]))
    bom = work / "cfg-bom"
    F.write(bom / "config.json", "\ufeff" + json.dumps(F.llama_config()))
    cases.append(CliCase("files", "config with a UTF-8 BOM", [str(bom), "--profile", "rtx-4090"], VERDICT))
    # an index file that is a FIFO
    idx = work / "index-fifo"
    F.write_json(idx / "config.json", F.llama_config())
    if not (idx / "model.safetensors.index.json").exists():
        os.mkfifo(idx / "model.safetensors.index.json")
    cases.append(CliCase("files", "index FIFO", [str(idx), "--profile", "rtx-4090"]))
    return cases


def model_cases(work: Path) -> list[CliCase]:
    """Model files that crashed or misled: each a clear line and exit 2, or the right answer."""
    cases: list[CliCase] = []

    def st_case(label: str, tensors: dict, config: dict | None = None, expect=BAD_INPUT, **kw) -> None:
        folder = work / f"st-{label.replace(' ', '-')}"
        F.write(folder / "model.safetensors", F.st_bytes(tensors, **kw))
        if config is not None:
            F.write_json(folder / "config.json", config)
        cases.append(CliCase("model files", label, [str(folder), "--profile", "rtx-4090"], expect))

    t = F.llama_tensors()
    st_case("scalar qweight with g_idx", {**t, "model.layers.0.mlp.up_proj.qweight": ("I32", []),
                                          "model.layers.0.mlp.up_proj.g_idx": ("I32", [64])}, F.llama_config(),
            ANY_ANSWER - {3})
    st_case("overlapping data_offsets", t, overlap=True)
    st_case("hidden size 0", {**F.llama_tensors(), "model.embed_tokens.weight": ("BF16", [256, 0])})
    st_case("valid llama", t, F.llama_config(), VERDICT)
    st_case("valid llama without config", t, None, VERDICT)
    # index total_size = 1 with shards missing
    folder = work / "index-total-1"
    F.write_json(folder / "config.json", F.llama_config(layers=32, hidden=4096, inter=11008, heads=32, kv_heads=8,
                                                       vocab=32000))
    F.write_json(folder / "model.safetensors.index.json",
                 {"metadata": {"total_size": 1}, "weight_map": {"a": "model-00001-of-00002.safetensors"}})
    cases.append(CliCase("model files", "index total_size = 1", [str(folder), "--profile", "rtx-4090"]))
    # symlinked shard to a token file: refused, and the token's bytes never printed
    token = F.write(work / "hf-token", "hf_SECRETsecretSECRETsecret")
    folder = work / "symlink-token"
    folder.mkdir(exist_ok=True)
    link = folder / "model.safetensors"
    if not link.is_symlink():
        link.symlink_to(token)
    cases.append(CliCase("model files", "shard symlinked to a token", [str(folder), "--profile", "rtx-4090"],
                         must_not_print=("hf_SECRET", "SECRET", "7308327")))
    # a Hugging Face cache snapshot: symlinks into the repo's blobs are fine
    repo = work / "hub" / "models--org--tiny"
    blob = F.write(repo / "blobs" / "abc", json.dumps(F.llama_config()))
    snap = repo / "snapshots" / "rev1"
    snap.mkdir(parents=True, exist_ok=True)
    if not (snap / "config.json").is_symlink():
        (snap / "config.json").symlink_to(Path("../../blobs") / blob.name)
    cases.append(CliCase("model files", "HF cache snapshot symlinks", [str(snap), "--profile", "rtx-4090"], VERDICT))
    # an empty folder named like a catalog model
    (work / "qwen-7b").mkdir(exist_ok=True)
    cases.append(CliCase("model files", "empty ./qwen-7b folder", ["qwen-7b", "--profile", "rtx-4090"], VERDICT,
                         must_print=("read as a model name",)))

    # GGUF
    def gguf_case(label: str, meta: dict, tensors: dict, expect=BAD_INPUT) -> None:
        path = F.write_gguf(work / f"gguf-{label.replace(' ', '-').replace('/', '-')}.gguf", meta, tensors)
        cases.append(CliCase("model files", f"gguf {label}", [str(path), "--profile", "rtx-4090"], expect))

    meta, tensors = F.gguf_llama_meta()
    gguf_case("valid", meta, tensors, VERDICT)
    gguf_case("rank-0 ffn_up", meta, {**tensors, "blk.0.ffn_up.weight": ("F32", [])}, ANY_ANSWER - {3})
    gguf_case("64 kv heads of 4", {**meta, "llama.attention.head_count_kv": 64}, tensors)
    gguf_case("3 kv heads of 4", {**meta, "llama.attention.head_count_kv": 3}, tensors)
    gguf_case("hidden 65 with 4 heads", {**meta, "llama.embedding_length": 65}, tensors)
    gguf_case("64 experts used of 8", {**meta, "llama.expert_count": 8, "llama.expert_used_count": 64}, tensors)
    gguf_case("6 Mi empty strings in 3 arrays",
              {**meta, **{f"junk.{i}": ("strings", 2 * 1024**2) for i in range(3)}}, tensors)
    # profiles with a zero bandwidth: speed unknown, not a crash
    for part in ("gpu", "ram"):
        text = Path(__file__).resolve().parents[2].joinpath("hardware_profiles", "rtx-4090.toml").read_text()
        lines = text.splitlines()
        in_gpu = False
        out = []
        for line in lines:
            if line.startswith("[["):
                in_gpu = "gpu" in line
            elif line.startswith("["):
                in_gpu = False
            if line.startswith("bandwidth") and (in_gpu == (part == "gpu")):
                line = "bandwidth_gbps = 0"
            out.append(line)
        prof = F.write(work / f"bw0-{part}.toml", "\n".join(out) + "\n")
        cases.append(CliCase("model files", f"profile {part} bandwidth 0", ["qwen-7b", "--profile", str(prof)],
                             VERDICT))
    return cases


def cost_cases(work: Path) -> list[CliCase]:
    """Inputs within the limits that used to take tens of seconds or gigabytes."""
    cases: list[CliCase] = []
    for layers in (100_000, 1_000_000):
        folder = work / f"layers-{layers}"
        F.write_json(folder / "config.json", {**F.llama_config(), "num_hidden_layers": layers})
        cases.append(CliCase("cost", f"config with {layers:,} layers", [str(folder), "--profile", "rtx-4090"],
                             ANY_ANSWER - {3}))
        cases.append(CliCase("cost", f"{layers:,} layers, q4_k_m",
                             [str(folder), "--profile", "rtx-4090", "-p", "q4_k_m"],
                             ANY_ANSWER - {3}))
    for count, expect in ((150_000, ANY_ANSWER - {3}), (250_000, BAD_INPUT)):
        path = work / f"tensors-{count}.safetensors"
        if not path.exists():  # written by a child process: this one stays small (children inherit its peak RSS)
            code = ("import json, struct, sys\n"
                    "n = int(sys.argv[2])\n"
                    "doc = {f't.{i}': {'dtype': 'BF16', 'shape': [1], 'data_offsets': [2 * i, 2 * i + 2]}"
                    " for i in range(n)}\n"
                    "raw = json.dumps(doc).encode()\n"
                    "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(raw)) + raw + bytes(2 * n))\n")
            subprocess.run([sys.executable, "-c", code, str(path), str(count)], check=True)
        cases.append(CliCase("cost", f"safetensors with {count:,} tensors", [str(path), "--profile", "rtx-4090"],
                             expect))
    return cases


def hub_cases(silent: str, refused: str) -> list[CliCase]:
    """Hub ids outside the catalog against loopback endpoints that never answer or refuse (with credentials)."""
    cases = []
    for label, endpoint in (("silent endpoint", silent), ("refused endpoint", refused)):
        env = {"HF_ENDPOINT": f"http://user:TOKEN123@{endpoint}", "HF_HUB_OFFLINE": "0"}
        cases.append(CliCase("hub", label, ["someorg/not-in-catalog-model", "--profile", "rtx-4090"], BAD_INPUT,
                             env, must_not_print=("TOKEN123", "Retrying")))
    cases.append(CliCase("hub", "offline, not cached", ["someorg/not-in-catalog-model", "--profile", "rtx-4090"],
                         BAD_INPUT, {"HF_HUB_OFFLINE": "1"}))
    return cases


def baseline_cases() -> list[CliCase]:
    return [
        CliCase("baseline", "qwen-7b on rtx-4090", ["qwen-7b", "--profile", "rtx-4090"], VERDICT),
        CliCase("baseline", "README --require vram>=24GiB on rtx-4090",
                ["check", "--profile", "rtx-4090", "--require", "vram>=24GiB"], frozenset({0})),
        CliCase("baseline", "probe", ["probe"], frozenset({0})),
        CliCase("baseline", "profiles", ["profiles"], frozenset({0})),
        CliCase("baseline", "models", ["models", "qwen"], frozenset({0})),
    ]


# ---- parsers, in-process ---------------------------------------------------------------------------

def _mutations(data: bytes, rng: random.Random, n: int) -> Iterator[bytes]:
    for _ in range(n):
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            op = rng.random()
            pos = rng.randrange(len(b)) if b else 0
            if op < 0.5 and b:
                b[pos] = rng.randrange(256)
            elif op < 0.7:
                b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            elif op < 0.85 and b:
                del b[pos:pos + rng.randint(1, 16)]
            else:  # an interesting number at a random place
                b[pos:pos + 8] = struct.pack("<Q", rng.choice([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]))
        yield bytes(b)


def parser_cases(seed: int = 18, fuzz: int = 400) -> list[ParserCase]:
    from fitcheck.model import gguf_header, safetensors_header
    from fitcheck.model.gguf_spec import spec_from_gguf
    from fitcheck.model.hf_config import spec_from_config
    from fitcheck.preflight.plan_file import parse_plan
    from fitcheck.preflight.requirements import parse_requirement
    from fitcheck.profiles import read_profile_text
    from fitcheck.units import parse_count, parse_size

    rng = random.Random(seed)
    cases: list[ParserCase] = []
    st = F.st_bytes(F.llama_tensors())
    head_len = 8 + struct.unpack("<Q", st[:8])[0]
    for cut in range(0, head_len + 1):
        cases.append(ParserCase("truncations", f"safetensors cut at {cut}",
                                partial(safetensors_header.parse_header_bytes, st[:cut])))
    meta, tensors = F.gguf_llama_meta()
    gg = F.gguf_bytes(meta, tensors, with_data=False)

    def gguf_spec(data: bytes) -> object:
        header = gguf_header.parse_header(data)
        return spec_from_gguf([header], "fuzz")

    for cut in range(0, len(gg) + 1, 3):
        cases.append(ParserCase("truncations", f"gguf cut at {cut}", partial(gguf_spec, gg[:cut])))
    for i, data in enumerate(_mutations(st[:head_len], rng, fuzz)):
        cases.append(ParserCase("fuzz", f"safetensors mutation {i}",
                                partial(safetensors_header.parse_header_bytes, data)))
    for i, data in enumerate(_mutations(gg, rng, fuzz)):
        cases.append(ParserCase("fuzz", f"gguf mutation {i}", partial(gguf_spec, data)))
    config = json.dumps(F.llama_config()).encode()

    def config_spec(data: bytes) -> object:
        from fitcheck.bounded import json_loads_bounded

        try:
            doc = json_loads_bounded(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        return spec_from_config(doc, "fuzz")

    for i, data in enumerate(_mutations(config, rng, fuzz)):
        cases.append(ParserCase("fuzz", f"config mutation {i}", partial(config_spec, data)))
    plan = b'[defaults]\nprofile = "rtx-4090"\ncontext = 8192\n[[case]]\nmodel = "qwen-7b"\nbatch = 2\n'
    for i, data in enumerate(_mutations(plan, rng, fuzz)):
        cases.append(ParserCase("fuzz", f"plan mutation {i}",
                                partial(parse_plan, data.decode("utf-8", "replace"), "fuzz.toml")))
    profile = (Path(__file__).resolve().parents[2] / "hardware_profiles" / "rtx-4090.toml").read_bytes()
    for i, data in enumerate(_mutations(profile, rng, fuzz)):
        cases.append(ParserCase("fuzz", f"profile mutation {i}",
                                partial(read_profile_text, data.decode("utf-8", "replace"), "fuzz.toml")))
    texts = ["24GiB", "1e400GiB", BIG + "GiB", "nan", "-1GB", "1.5.5g", "", " ", "0x10", "²GiB", HUGE]
    for text in texts:
        cases.append(ParserCase("units", f"parse_size {text[:12]!r}", partial(parse_size, text)))
        cases.append(ParserCase("units", f"parse_count {text[:12]!r}", partial(parse_count, text)))
        for fact in ("vram", "gpus", "cc", "cuda", "ram"):
            cases.append(ParserCase("units", f"--require {fact}>={text[:12]!r}",
                                    partial(parse_requirement, f"{fact}>={text}")))
    return cases


def probe_cases() -> list[ParserCase]:
    """Fault injection into the probe's pure readers: /proc/meminfo, *_VISIBLE_DEVICES, NVML return values."""
    import types

    from fitcheck.machine import SystemMemory, Unknown
    from fitcheck.probe.amd import parse_visible_indices
    from fitcheck.probe.cuda_visible import parse_cuda_visible_devices
    from fitcheck.probe.memory import parse_meminfo, system_memory_from
    from fitcheck.probe.nvidia import read_nvidia

    cases: list[ParserCase] = []
    meminfos = ["MemTotal: -5 kB\nMemAvailable: 1 kB\n", "MemTotal: 1 kB\nMemAvailable: 99999999999 kB\n",
                f"MemTotal: {BIG} kB\n", "MemTotal: nan kB\n", "", "MemTotal:\n", "\x00" * 100]

    def mem(text: str) -> object:
        info = parse_meminfo(text)
        m = system_memory_from(info.get("MemTotal"), info.get("MemAvailable"), info.get("SwapTotal"),
                               info.get("SwapFree"), [], "/proc/meminfo")
        for value in (m.total_bytes, m.available_bytes):
            if not isinstance(value, Unknown) and not 0 <= value <= 2**56:
                raise AssertionError(f"impossible reading taken as a fact: {value}")
        if isinstance(m.total_bytes, int) and isinstance(m.available_bytes, int) and m.available_bytes > m.total_bytes:
            raise AssertionError("available above total")
        return m

    for i, text in enumerate(meminfos):
        cases.append(ParserCase("probe", f"meminfo {i}", partial(mem, text)))
    for value in ("²", HUGE, "0,0", "-1", "GPU-", "0,,1", " ", "MIG-x,0", "1" * 30, "0x1"):
        cases.append(ParserCase("probe", f"CUDA_VISIBLE_DEVICES={value[:10]!r}",
                                partial(parse_cuda_visible_devices, value, 2, ["GPU-a", "GPU-b"])))
        cases.append(ParserCase("probe", f"ROCR_VISIBLE_DEVICES={value[:10]!r}",
                                partial(parse_visible_indices, value)))

    class NVMLError(Exception):
        pass

    def fake_nvml(**odd) -> types.SimpleNamespace:
        values = {"count": 1, "driver": "550.54.15", "cuda": 12040, "name": "GPU", "uuid": "GPU-a",
                  "memory": types.SimpleNamespace(total=24 * 2**30, free=20 * 2**30, used=4 * 2**30),
                  "cc": (8, 9), "bus": 384, "clock": 10501, "mig": (0, 0), **odd}
        return types.SimpleNamespace(
            NVMLError=NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
            nvmlDeviceGetCount=lambda: values["count"], nvmlSystemGetDriverVersion=lambda: values["driver"],
            nvmlSystemGetCudaDriverVersion_v2=lambda: values["cuda"],
            nvmlSystemGetCudaDriverVersion=lambda: values["cuda"],
            nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: values["name"],
            nvmlDeviceGetUUID=lambda h: values["uuid"], nvmlDeviceGetMemoryInfo=lambda h, **k: values["memory"],
            nvmlDeviceGetCudaComputeCapability=lambda h: values["cc"],
            nvmlDeviceGetMemoryBusWidth=lambda h: values["bus"], nvmlDeviceGetMaxClockInfo=lambda h, c: values["clock"],
            nvmlDeviceGetMigMode=lambda h: values["mig"], nvmlDeviceGetMaxMigDeviceCount=lambda h: 0)

    ram = SystemMemory(64 * 2**30, 48 * 2**30, None, 0, 0)
    odd_values: dict[str, list] = {"count": ["2", None, 2**70, -1], "driver": [b"\xff\xfe", 5, None],
                                   "cuda": ["12.4", None, -1, 2**70],
                  "name": [7, None, b"\xff"], "uuid": [None, 3], "cc": ["8.9", None, (8,), ("a", "b")],
                  "memory": [None, types.SimpleNamespace(total=2**70, free=1, used=1),
                             types.SimpleNamespace(total=1, free=2**40, used=0), types.SimpleNamespace()],
                  "bus": ["384", None, -1], "clock": [None, 2**70], "mig": [None, 1, ()]}

    def run(key: str, value: object) -> object:
        reading = read_nvidia({}, ram, nvml=fake_nvml(**{key: value}))  # type: ignore[arg-type]
        if key not in ("driver", "cuda", "count") and isinstance(reading.driver_version, Unknown):
            raise AssertionError("one odd field blanked the driver version")
        return reading

    odd: list[tuple[str, object]] = [(key, value) for key, values in odd_values.items() for value in values]
    for odd_key, odd_value in odd:
        cases.append(ParserCase("probe", f"NVML {odd_key}={odd_value!r:.20}", partial(run, odd_key, odd_value)))
    return cases
