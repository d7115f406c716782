"""Plan files: several checks in one run (``fitcheck check --plan plan.toml``).  Pure parsing.

    # plan.toml
    [defaults]                 # optional: applies to every case whose mode it fits
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

Case fields: model (required), name, params, profile, strict, and every request option of
fitcheck.options under its name (mode, precision, context, prompt (tokens prefilled; default the whole
context), seq_len, batch, kv_dtype, engine, gpus,
device, gpu_layers, gpu_memory_utilization, transformers_version (a string: "4.38"), attention, headroom
(percent), and the training options: grad_accum, optimizer, grad_checkpointing, lora_rank, zero,
fsdp, offload, ...), each checked as the command line checks it.
A file that is not a plan (not TOML, no cases, an unknown table) is one FitcheckError (exit 2); otherwise every
malformed case and field is found before any case runs, and all of them are one PlanInvalid (exit 2): a line
each, naming the file, the case and the field, with a suggestion where one exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fitcheck.errors import FitcheckError
from fitcheck.options import BY_NAME, PLAN_ALIASES, PLAN_FIELDS

FIELDS = PLAN_FIELDS
# Cases one plan may hold: each is a check (~5 ms, ~10 ms with its alternatives on a 2-core runner), so a plan
# at the limit answers in a few seconds; a larger one is refused at once rather than left to run for minutes.
MAX_CASES = 1000
_STR = ("model", "name", "params", "profile")


def case_label(path: str, index: int, name: object = None) -> str:
    """How every error names a case: 'PATH: case N (NAME)' -- its 1-based index, and its name (the `name`
    field, else the model, as Case.name) when it has one; 'PATH: case N' when neither is a usable string."""
    named = isinstance(name, str) and name.strip() != ""
    return f"{path}: case {index}" + (f" ({name})" if named else "")


def _raw_name(raw: dict) -> object:
    """A case table's name as Case.name will be: its `name`, else its `model`."""
    name = raw.get("name")
    return name if isinstance(name, str) and name.strip() else raw.get("model")


@dataclass(frozen=True)
class Case:
    index: int                      # 1-based position in the file
    name: str
    model: str
    options: dict = field(default_factory=dict)  # every other field given (defaults merged in)
    own: tuple[str, ...] = ()       # the fields the case itself gives (not from [defaults])

    def get(self, key: str, default=None):
        return self.options.get(key, default)

    def label(self, path: str) -> str:
        """'PATH: case N (NAME)', as every error names this case (case_label)."""
        return case_label(path, self.index, self.name)


@dataclass(frozen=True)
class PlanFile:
    path: str
    cases: tuple[Case, ...]


class PlanInvalid(FitcheckError):
    """Every malformed case of a plan file, found before any case runs: one line each (``errors``)."""

    def __init__(self, path: str, errors: list[str] | tuple[str, ...]):
        self.path = path
        self.errors = tuple(errors)
        n = len(self.errors)
        super().__init__("; ".join(self.errors))
        self.summary = f"{path}: {n} error{'s' if n != 1 else ''}, no case was run"


def _check_field(where: str, key: str, value) -> None:
    if key not in FIELDS:
        import difflib

        close = difflib.get_close_matches(key, FIELDS, n=1)
        raise FitcheckError(f"{where}: unknown field {key!r}",
                            f"did you mean {close[0]!r}?" if close else "fields: " + ", ".join(FIELDS))
    if key in _STR:
        if not (isinstance(value, str) and value.strip() != ""):
            raise FitcheckError(f"{where}: field {key!r} must be a non-empty string, got {value!r}")
        return
    if key == "strict":
        if not isinstance(value, bool):
            raise FitcheckError(f"{where}: field {key!r} must be true or false, got {value!r}")
        return
    opt = BY_NAME[PLAN_ALIASES.get(key, key)]
    if opt.kind in ("int", "float"):
        if isinstance(value, str) and any(str(c).lower() == value.strip().lower() for c in opt.choices):
            return  # a word the option takes as the command line does (cpu_moe = "all")
        if opt.kind == "int":
            want = (f"a whole number >= {opt.low:g}" + (f" and <= {opt.high:g}" if opt.high else "")
                    + "".join(f' or "{c}"' for c in opt.choices))
        elif key == "headroom":
            want = "a percentage between 0 and 99"
        else:
            want = f"a number between {opt.low:g} and {opt.high:g}"
        number = isinstance(value, int if opt.kind == "int" else (int, float)) and not isinstance(value, bool)
        finite = number and not (isinstance(value, float) and not math.isfinite(value))
        if not finite or (opt.low is not None and value < opt.low) or (opt.high is not None and value > opt.high):
            raise FitcheckError(f"{where}: field {key!r} must be {want}, got {value!r}")
        return
    if opt.kind == "str" and not isinstance(value, str):
        raise FitcheckError(f"{where}: field {key!r} must be a string (quoted), got {value!r}")
    if opt.kind == "flag" and not isinstance(value, bool):
        raise FitcheckError(f"{where}: field {key!r} must be true or false, got {value!r}")
    try:
        opt.parse(value)
    except FitcheckError as exc:
        raise FitcheckError(f"{where}: field {key!r}: {exc.message}", exc.hint) from None


def _defaults_for(defaults: dict, mode: str) -> dict:
    """The [defaults] that apply to a case of ``mode``: an inference-only default (context, engine)
    is not a training case's, nor a training-only one (seq_len, optimizer) an inference case's, so
    one plan mixes both; a case's own field of the wrong mode is still refused."""
    def applies(key: str) -> bool:
        opt = BY_NAME.get(PLAN_ALIASES.get(key, key))
        return opt is None or opt.applies(mode)
    return {k: v for k, v in defaults.items() if applies(k)}


def parse_plan(text: str, path: str = "plan.toml") -> PlanFile:
    """The cases of a plan file's text; FitcheckError naming ``path`` when it is not a plan, PlanInvalid naming
    every malformed case and field."""
    plan, errors = parse_plan_errors(text, path)
    if errors:
        raise PlanInvalid(path, errors)
    return plan


def _errors_of(check, *args) -> list[str]:
    try:
        check(*args)
    except FitcheckError as exc:
        return [exc.one_line()]
    return []


def parse_plan_errors(text: str, path: str = "plan.toml") -> tuple[PlanFile, list[str]]:
    """The well-formed cases of a plan file's text, and a line for each malformed case or field (all of them,
    not only the first).  FitcheckError when the text is not a plan at all."""
    from fitcheck.bounded import loads_toml

    doc = loads_toml(text, path, "plan file")
    unknown = sorted(set(doc) - {"defaults", "case"})
    if unknown:
        raise FitcheckError(f"{path}: unknown table or key {unknown[0]!r}", "a plan has [defaults] and [[case]] tables")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise FitcheckError(f"{path}: 'defaults' must be a table ([defaults])")
    cases_doc = doc.get("case")
    if not isinstance(cases_doc, list) or not cases_doc:
        raise FitcheckError(f"{path}: no cases", "add one or more [[case]] tables, each with model = \"...\"")
    if len(cases_doc) > MAX_CASES:
        raise FitcheckError(f"{path}: {len(cases_doc):,} cases; a plan holds at most {MAX_CASES:,}",
                            "split it into several plan files")
    errors: list[str] = []
    for key, value in defaults.items():
        if key in ("model", "name"):
            errors.append(f"{path}: [defaults]: field {key!r} belongs in each [[case]]")
        else:
            errors += _errors_of(_check_field, f"{path}: [defaults]", key, value)
    cases = []
    for i, raw in enumerate(cases_doc, 1):
        if not isinstance(raw, dict):
            errors.append(f"{case_label(path, i)}: must be a table ([[case]])")
            continue
        where = case_label(path, i, _raw_name(raw))
        bad = [] if "model" in raw else [f"{where}: field 'model' is missing"]
        for key, value in raw.items():
            bad += _errors_of(_check_field, where, key, value)
        if bad:
            errors += bad
            continue
        mode = str(raw.get("mode", defaults.get("mode", "inference")))
        merged = {**_defaults_for(defaults, mode), **{k: v for k, v in raw.items() if k not in ("model", "name")}}
        own = tuple(k for k in raw if k not in ("model", "name"))
        cases.append(Case(i, raw.get("name") or raw["model"], raw["model"].strip(), merged, own))
    return PlanFile(path, tuple(cases)), errors


def read_plan(path: str) -> PlanFile:
    """Read and parse ``path`` (the only I/O here)."""
    plan, errors = read_plan_errors(path)
    if errors:
        raise PlanInvalid(path, errors)
    return plan


def read_plan_errors(path: str) -> tuple[PlanFile, list[str]]:
    """Read ``path``: its well-formed cases and a line for each malformed one (parse_plan_errors)."""
    from fitcheck.bounded import read_text_file

    text = read_text_file(path, "plan file", "TOML")
    return parse_plan_errors(text, path)
