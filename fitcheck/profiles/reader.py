"""Reading a hardware profile document (fitcheck.profiles.schema's fields) into a Machine: every problem one
FitcheckError line naming the field, the documented defaults filled in, sizes and bandwidths in human units."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Callable
from typing import Any

from fitcheck.errors import FitcheckError
from fitcheck.machine import (
    CPU,
    GPU,
    INTERCONNECTS,
    Cluster,
    Disk,
    Host,
    Machine,
    MigInstance,
    Price,
    Purchase,
    SystemMemory,
    Unknown,
)
from fitcheck.profiles.schema import (
    CC_RE,
    CLUSTER_FIELDS,
    CPU_FIELDS,
    DISK_FIELDS,
    GPU_FIELDS,
    HOST_FIELDS,
    KINDS,
    MACHINE_FIELDS,
    MAX_BYTES,
    MAX_FLOAT,
    MAX_GPUS,
    MAX_INT,
    MEMORY_FIELDS,
    MIG_FIELDS,
    NOT_IN_PROFILE,
    PRICE_FIELDS,
    PURCHASE_FIELDS,
    SCHEMA,
    FieldSpec,
    os_allowance_bytes,
)
from fitcheck.units import GB, TB, GiB, MiB, format_bytes, parse_size


def machine_from_dict(doc: dict[str, Any], where: str = "<profile>", default_name: str = "") -> Machine:
    """Build a Machine from a schema dict (parsed TOML or JSON); errors name ``where`` and the field.

    ``default_name`` is used when the document has no ``name`` (a profile's file stem).
    """
    reader = _Reader(where)
    if not isinstance(doc, dict):
        raise reader.error("", "expected a table of machine facts")
    schema = doc.get("schema", SCHEMA)
    if schema != SCHEMA:
        raise reader.error("schema", f"expected {json.dumps(SCHEMA)}, got {_show(schema)}",
                           hint="this fitcheck reads only that schema version")
    values = reader.table(doc, MACHINE_FIELDS, "", extra_keys={"schema"})

    memory = values["memory"]
    cpu = values["cpu"]
    host_values = values["host"] if values["host"] is not None else reader.table({}, HOST_FIELDS, "host.")
    if host_values["architecture"] is None:
        host_values["architecture"] = cpu.architecture
    host = Host(**host_values)
    gpus = values["gpus"]
    gpu_status = values["gpu_status"]
    if gpu_status is None:
        gpu_status = "" if gpus else "no GPU in this profile"
    return Machine(
        name=values["name"] if values["name"] is not None else default_name,
        kind=values["kind"],
        host=host,
        memory=memory,
        cpu=cpu,
        gpus=gpus,
        gpu_status=gpu_status,
        driver_version=values["driver_version"],
        cuda_version=values["cuda_version"],
        disk=values["disk"],
        price=values["price"],
        purchase=values["purchase"],
        power_watts=values["power_watts"],
        cluster=values["cluster"],
        description=values["description"],
        source=values["source"] if values["source"] is not None else where,
        notes=values["notes"],
    )


# FieldSpec.kind -> the _Reader method that reads it (read_size, read_int, ...).
_KIND_READER = {"bytes": "size", "bandwidth": "size", "int": "int", "float": "float", "str": "str", "cc": "cc",
                "kind": "kind", "bool": "bool", "strings": "strings", "features": "strings", "date": "date",
                "host": "host", "memory": "memory", "cpu": "cpu", "disk": "disk", "price": "price",
                "purchase": "purchase", "cluster": "cluster", "gpus": "gpus", "mig": "mig"}


class _Reader:
    """Reads one document, turning every problem into one FitcheckError line naming the field."""

    def __init__(self, where: str):
        self.where = where

    def error(self, path: str, problem: str, hint: str | None = None) -> FitcheckError:
        prefix = f"{self.where}: {path}: " if path else f"{self.where}: "
        return FitcheckError(prefix + problem, hint)

    # -- tables -------------------------------------------------------------------------------

    def table(self, raw: Any, specs: tuple[FieldSpec, ...], path: str,
              extra_keys: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
        """Read ``raw`` against ``specs``: canonical name -> value, Unknown, or the absent value."""
        where = path.rstrip(".") or "document"
        if not isinstance(raw, dict):
            raise self.error(where, f"expected a table, got {_show(raw)}")
        accepted = _accepted_keys(specs)
        by_field: dict[str, tuple[str, Callable[[Any], Any] | None]] = {}
        for key in raw:
            if key == "unknown" or key in extra_keys:
                continue
            if key not in accepted:
                close = _closest(key, [*accepted, "unknown"])
                hint = f"did you mean {close}?" if close else None
                raise self.error(path + key, "unknown field", hint)
            field_name, convert = accepted[key]
            if field_name in by_field:
                raise self.error(path + key, f"given twice (also as {by_field[field_name][0]})")
            by_field[field_name] = (key, convert)

        unknown = self._unknown_map(raw.get("unknown", {}), specs, path)
        values: dict[str, Any] = {}
        for spec in specs:
            if spec.name in unknown:
                if spec.name in by_field and raw[by_field[spec.name][0]] is not None:
                    raise self.error(path + by_field[spec.name][0], "has both a value and an unknown reason")
                values[spec.name] = Unknown(unknown[spec.name])
                continue
            if spec.name not in by_field or raw[by_field[spec.name][0]] is None:
                if spec.required:
                    raise self.error(path + _display_name(spec), "missing (required)")
                values[spec.name] = Unknown(NOT_IN_PROFILE) if spec.absent is ... else spec.absent
                continue
            key, convert = by_field[spec.name]
            values[spec.name] = self.value(raw[key], spec, path + key, convert)
        return values

    def _unknown_map(self, raw: Any, specs: tuple[FieldSpec, ...], path: str) -> dict[str, str]:
        if not isinstance(raw, dict):
            raise self.error(path + "unknown", f"expected a table of field = \"reason\", got {_show(raw)}")
        facts = {spec.name for spec in specs if spec.fact}
        for name, reason in raw.items():
            if name not in facts:
                close = _closest(name, sorted(facts))
                raise self.error(f"{path}unknown.{name}", "not a fact that can be unknown",
                                 f"did you mean {close}?" if close else None)
            if not isinstance(reason, str):
                raise self.error(f"{path}unknown.{name}", f"expected a reason (a string), got {_show(reason)}")
        return dict(raw)

    # -- values -------------------------------------------------------------------------------

    def value(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        """``raw`` read as a ``spec.kind`` field at ``path`` (``convert``: the unit its key carries)."""
        return getattr(self, f"read_{_KIND_READER[spec.kind]}")(raw, spec, path, convert)

    def read_size(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        assert convert is not None
        if isinstance(raw, float) and not math.isfinite(raw):
            raise self.error(path, f"expected a finite number, got {_show(raw)}")
        result = convert(raw)
        scaled_key = path.endswith(("_gib", "_mib", "_gb", "_gbps", "_tbps"))
        if result is None and scaled_key and isinstance(raw, (int, float)) and not isinstance(raw, bool):
            raise self.error(path, f"is too large, got {_show(raw)}", "at most 1 EiB")
        if result is None:
            key = path.rsplit(".", 1)[-1]
            if key.endswith(("_bytes", "_bytes_per_s")):
                expected = "a whole number of bytes"
            elif key.endswith(("_gib", "_mib", "_gb", "_gbps", "_tbps")):
                expected = "a number"
            elif spec.kind == "bytes":
                expected = 'a size (like "24 GiB")'
            else:
                expected = 'a bandwidth (like "1008 GB/s")'
            raise self.error(path, f"expected {expected}, got {_show(raw)}")
        if result < 0:
            raise self.error(path, f"must not be negative, got {_show(raw)}")
        if result > MAX_BYTES:
            raise self.error(path, f"is too large, got {_show(raw)}", "at most 1 EiB")
        if spec.positive and result == 0:
            raise self.error(path, "must be more than 0 (leave it out, or list it under unknown, if not known)")
        return result

    def read_int(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.error(path, f"expected a whole number, got {_show(raw)}")
        if raw < 0 or (spec.positive and raw == 0):
            raise self.error(path, f"must be more than 0, got {_show(raw)}")
        if raw > MAX_INT:
            raise self.error(path, f"is too large, got {_show(raw)}", f"at most {MAX_INT}")
        return raw

    def read_float(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise self.error(path, f"expected a number, got {_show(raw)}")
        if isinstance(raw, float) and not math.isfinite(raw):
            raise self.error(path, f"expected a finite number, got {_show(raw)}")
        if raw < 0:
            raise self.error(path, f"must not be negative, got {_show(raw)}")
        if raw > MAX_FLOAT:
            raise self.error(path, f"is too large, got {_show(raw)}", f"at most {MAX_FLOAT:g}")
        return float(raw)

    def read_str(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        if not isinstance(raw, str):
            raise self.error(path, f"expected a string, got {_show(raw)}")
        return raw

    def read_cc(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        text = repr(raw) if isinstance(raw, float) else raw  # compute_capability = 8.9 as a number
        if not isinstance(text, str) or not CC_RE.match(text):
            raise self.error(path, f"expected a compute capability like \"8.9\", got {_show(raw)}")
        return text

    def read_kind(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        if raw not in KINDS:
            raise self.error(path, f"expected one of {', '.join(KINDS)}, got {_show(raw)}")
        return raw

    def read_bool(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        if not isinstance(raw, bool):
            raise self.error(path, f"expected true or false, got {_show(raw)}")
        return raw

    def read_strings(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            raise self.error(path, f"expected a list of strings, got {_show(raw)}")
        return frozenset(raw) if spec.kind == "features" else tuple(raw)

    def read_date(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        if isinstance(raw, datetime.date) and not isinstance(raw, datetime.datetime):
            return raw.isoformat()
        if isinstance(raw, str):
            try:
                datetime.date.fromisoformat(raw)
                return raw
            except ValueError:
                pass
        raise self.error(path, f"expected a date like 2025-06-01, got {_show(raw)}")

    def read_host(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        return self.table(raw, HOST_FIELDS, path + ".")  # finished in machine_from_dict

    def read_memory(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        return self.build_memory(raw, path + ".")

    def read_cpu(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        return self.build_cpu(raw, path + ".")

    def read_disk(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        values = self.table(raw, DISK_FIELDS, path + ".")
        return Disk(**values)

    def read_price(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        values = self.table(raw, PRICE_FIELDS, path + ".")
        return Price(**values)

    def read_purchase(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        return Purchase(**self.table(raw, PURCHASE_FIELDS, path + "."))

    def read_cluster(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        values = self.table(raw, CLUSTER_FIELDS, path + ".")
        for key in ("intra_node", "inter_node"):
            if values[key] not in INTERCONNECTS:
                raise self.error(path + "." + key, f"is {values[key]!r}, not one of: " + ", ".join(INTERCONNECTS))
        return Cluster(**values)

    def read_gpus(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        return self.build_gpus(raw, path)

    def read_mig(self, raw: Any, spec: FieldSpec, path: str, convert: Callable[[Any], Any] | None) -> Any:
        return self.build_migs(raw, path)

    # -- builders with the documented defaults ------------------------------------------------

    def build_memory(self, raw: Any, path: str) -> SystemMemory:
        values = self.table(raw, MEMORY_FIELDS, path)
        total = values["total_bytes"]
        if values["available_bytes"] is None:
            values["available_bytes"] = (
                max(total - os_allowance_bytes(total), 0) if isinstance(total, int) else Unknown(NOT_IN_PROFILE)
            )
        available = values["available_bytes"]
        if isinstance(total, int) and isinstance(available, int) and available > total:
            raise self.error(path + "available", f"more than total ({format_bytes(available)} > {format_bytes(total)})",
                             "available RAM cannot exceed total RAM")
        if values["bandwidth_source"] is None:
            values["bandwidth_source"] = "profile" if isinstance(values["bandwidth_bytes_per_s"], int) else ""
        return SystemMemory(**values)

    def build_cpu(self, raw: Any, path: str) -> CPU:
        values = self.table(raw, CPU_FIELDS, path)
        if values["usable_cores"] is None:
            values["usable_cores"] = values["logical_cores"]
        if values["features_source"] is None:
            values["features_source"] = "profile" if values["features"] else ""
        return CPU(**values)

    def build_gpus(self, raw: Any, path: str) -> tuple[GPU, ...]:
        if not isinstance(raw, list):
            raise self.error(path, f"expected a list of [[gpus]] tables, got {_show(raw)}")
        gpus: list[GPU] = []
        for position, item in enumerate(raw):
            item_path = f"{path}[{position}]"
            if not isinstance(item, dict):
                raise self.error(item_path, f"expected a table, got {_show(item)}")
            count = item.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise self.error(item_path + ".count", f"expected a whole number of GPUs, got {_show(count)}")
            if len(gpus) + count > MAX_GPUS:
                raise self.error(item_path + ".count", f"too many GPUs, got {_show(count)}" + (f" after {len(gpus)} listed before" if gpus else ""),
                                 f"a profile holds at most {MAX_GPUS} GPUs")
            if count > 1 and "index" in item:
                raise self.error(item_path + ".index", "cannot be given with count (indexes are numbered in order)")
            values = self.table(item, GPU_FIELDS, item_path + ".", extra_keys={"count"})
            total, free = values["memory_total_bytes"], values["memory_free_bytes"]
            if isinstance(total, int) and isinstance(free, int) and free > total:
                raise self.error(item_path + ".memory_free", f"more than memory_total ({format_bytes(free)} > {format_bytes(total)})",
                                 "free GPU memory cannot exceed total GPU memory")
            for _ in range(count):
                gpus.append(_finish_gpu(dict(values), len(gpus)))
        return tuple(gpus)

    def build_migs(self, raw: Any, path: str) -> tuple[MigInstance, ...]:
        if not isinstance(raw, list):
            raise self.error(path, f"expected a list of [[gpus.mig_instances]] tables, got {_show(raw)}")
        migs = []
        for position, item in enumerate(raw):
            values = self.table(item, MIG_FIELDS, f"{path}[{position}].")
            if values["index"] is None:
                values["index"] = position
            if values["memory_free_bytes"] is None:
                values["memory_free_bytes"] = values["memory_total_bytes"]
            migs.append(MigInstance(**values))
        return tuple(migs)


def _finish_gpu(values: dict[str, Any], position: int) -> GPU:
    if values["index"] is None:
        values["index"] = position
    total = values["memory_total_bytes"]
    if values["memory_free_bytes"] is None:
        values["memory_free_bytes"] = total  # a profile's listed memory is what is free
    free = values["memory_free_bytes"]
    if values["memory_used_bytes"] is None:
        values["memory_used_bytes"] = (
            total - free if isinstance(total, int) and isinstance(free, int) else Unknown(NOT_IN_PROFILE)
        )
    if values["fp8"] is None:
        values["fp8"] = _fp8_from_cc(values["vendor"], values["compute_capability"])
    return GPU(**values)


def _fp8_from_cc(vendor: str, cc: Any) -> bool | Unknown:
    """fp8 tensor cores arrived with compute capability 8.9 (Ada) and 9.0 (Hopper).

    Source: NVIDIA CUDA C++ Programming Guide, "Compute capabilities" (fp8 from cc 8.9).
    """
    if vendor != "nvidia" or not isinstance(cc, str):
        return Unknown(NOT_IN_PROFILE)
    try:
        major, minor = (int(part) for part in cc.split(".")[:2])
    except ValueError:
        return Unknown(f"compute capability {cc!r} not understood")
    return (major, minor) >= (8, 9)


# ---------------------------------------------------------------------------------------------
# Human units


def _accepted_keys(specs: tuple[FieldSpec, ...]) -> dict[str, tuple[str, Callable[[Any], Any] | None]]:
    """Every key a table accepts -> (canonical field, converter for unit-carrying keys)."""
    keys: dict[str, tuple[str, Callable[[Any], Any] | None]] = {}
    for spec in specs:
        keys[spec.name] = (spec.name, _exact_int if spec.kind in ("bytes", "bandwidth") else None)
        if spec.kind == "bytes":
            base = spec.name[: -len("_bytes")]
            bases = [base] + (["memory"] if spec.name == "memory_total_bytes" and specs is GPU_FIELDS else [])
            for b in bases:
                keys[f"{b}_gib"] = (spec.name, _scaled(GiB))
                keys[f"{b}_mib"] = (spec.name, _scaled(MiB))
                keys[f"{b}_gb"] = (spec.name, _scaled(GB))
                keys[b] = (spec.name, _size)
        elif spec.kind == "bandwidth":
            keys["bandwidth_gbps"] = (spec.name, _scaled(GB))
            keys["bandwidth_tbps"] = (spec.name, _scaled(TB))
            keys["bandwidth"] = (spec.name, _bandwidth)
    return keys


def _display_name(spec: FieldSpec) -> str:
    """How a missing required field is named: the friendly base for sizes ('memory_total')."""
    if spec.kind == "bytes":
        return spec.name[: -len("_bytes")]
    return spec.name


def _exact_int(raw: Any) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def _scaled(unit: int) -> Callable[[Any], int | None]:
    def convert(raw: Any) -> int | None:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            return None
        scaled = raw * unit
        if isinstance(scaled, float) and not math.isfinite(scaled):
            return None  # nan, inf, or a number too large to be a size
        return int(round(scaled))

    return convert


def _size(raw: Any) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw  # a bare number is bytes
    if not isinstance(raw, str):
        return None
    try:
        return parse_size(raw)
    except (ValueError, OverflowError):
        return None


_BANDWIDTH_UNITS = {"b/s": 1, "kb/s": 10**3, "mb/s": 10**6, "gb/s": GB, "tb/s": TB,
                    "mib/s": MiB, "gib/s": GiB}


def _bandwidth(raw: Any) -> int | None:
    """'1008 GB/s', '3.35 TB/s' (decimal, as vendors quote), or a bare number of bytes/s."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if not isinstance(raw, str):
        return None
    text = raw.strip().lower().replace(" ", "")
    for unit in sorted(_BANDWIDTH_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            try:
                number = float(text[: -len(unit)]) * _BANDWIDTH_UNITS[unit]
            except ValueError:
                return None
            return int(round(number)) if math.isfinite(number) else None
    return None


def _show(value: Any) -> str:
    """A value as the user wrote it, for error messages: "lots", 12, true, [1, 2]."""
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _closest(word: str, candidates: list[str]) -> str | None:
    import difflib

    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return match[0] if match else None

