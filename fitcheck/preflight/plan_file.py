"""Plan files: several checks in one run (``fitcheck check --plan plan.toml``).  Pure parsing.

    # plan.toml
    [defaults]                 # optional: applies to every case
    profile = "rtx-4090"       # a profile name or .toml path; omit to check this machine
    context = 8192

    [[case]]
    name = "chat"              # optional; default: the model
    model = "qwen-7b"
    precision = "awq"
    batch = 8

    [[case]]
    model = "llama3-8b"
    engine = "vllm"

Case fields: model (required), name, mode, precision, context, prompt (tokens prefilled; default
the whole context), batch, kv_dtype, engine, gpus,
device, gpu_layers, gpu_memory_utilization, transformers_version (a string: "4.38"), attention, headroom
(percent), params, profile, strict.
A malformed file is one FitcheckError (exit 2) naming the file, the case and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fitcheck.errors import FitcheckError

# field -> (type check, what it must be)
_INT_MIN = {"context": 1, "prompt": 1, "batch": 1, "gpus": 1, "gpu_layers": 0}
_STR = ("model", "name", "mode", "precision", "kv_dtype", "engine", "device", "params", "profile",
        "transformers_version", "attention")
FIELDS = (*_STR, *_INT_MIN, "gpu_memory_utilization", "headroom", "strict")


@dataclass(frozen=True)
class Case:
    index: int                      # 1-based position in the file
    name: str
    model: str
    options: dict = field(default_factory=dict)  # every other field given (defaults merged in)

    def get(self, key: str, default=None):
        return self.options.get(key, default)


@dataclass(frozen=True)
class PlanFile:
    path: str
    cases: tuple[Case, ...]


def _check_field(where: str, key: str, value) -> None:
    if key not in FIELDS:
        raise FitcheckError(f"{where}: unknown field {key!r}", "fields: " + ", ".join(FIELDS))
    if key in _STR:
        ok, want = isinstance(value, str) and value.strip() != "", "a non-empty string"
    elif key in _INT_MIN:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= _INT_MIN[key]
        want = f"a whole number >= {_INT_MIN[key]}"
    elif key == "strict":
        ok, want = isinstance(value, bool), "true or false"
    elif key == "gpu_memory_utilization":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.05 <= value <= 1
        want = "a number between 0.05 and 1"
    else:  # headroom, percent
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 100
        want = "a percentage between 0 and 99"
    if not ok:
        raise FitcheckError(f"{where}: field {key!r} must be {want}, got {value!r}")


def parse_plan(text: str, path: str = "plan.toml") -> PlanFile:
    """The cases of a plan file's text; FitcheckError naming ``path`` and the field when malformed."""
    from fitcheck.bounded import loads_toml

    doc = loads_toml(text, path, "plan file")
    unknown = sorted(set(doc) - {"defaults", "case"})
    if unknown:
        raise FitcheckError(f"{path}: unknown table or key {unknown[0]!r}", "a plan has [defaults] and [[case]] tables")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise FitcheckError(f"{path}: 'defaults' must be a table ([defaults])")
    for key, value in defaults.items():
        if key in ("model", "name"):
            raise FitcheckError(f"{path}: [defaults]: field {key!r} belongs in each [[case]]")
        _check_field(f"{path}: [defaults]", key, value)
    cases_doc = doc.get("case")
    if not isinstance(cases_doc, list) or not cases_doc:
        raise FitcheckError(f"{path}: no cases", "add one or more [[case]] tables, each with model = \"...\"")
    cases = []
    for i, raw in enumerate(cases_doc, 1):
        if not isinstance(raw, dict):
            raise FitcheckError(f"{path}: case {i}: must be a table ([[case]])")
        where = f"{path}: case {i}" + (f" ({raw['name']})" if isinstance(raw.get("name"), str) else "")
        if "model" not in raw:
            raise FitcheckError(f"{where}: field 'model' is missing")
        for key, value in raw.items():
            _check_field(where, key, value)
        merged = {**defaults, **{k: v for k, v in raw.items() if k not in ("model", "name")}}
        cases.append(Case(i, raw.get("name") or raw["model"], raw["model"].strip(), merged))
    return PlanFile(path, tuple(cases))


def read_plan(path: str) -> PlanFile:
    """Read and parse ``path`` (the only I/O here)."""
    from fitcheck.bounded import read_text_file

    text = read_text_file(path, "plan file", "TOML")
    return parse_plan(text, path)
