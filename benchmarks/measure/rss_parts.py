"""What a CPU case's resident peak is made of: anonymous vs file-backed pages, glibc's heap, new imports.

    python -m benchmarks.measure.rss_parts --cases 'gen-smol135-*' [--env MALLOC_ARENA_MAX=1] [--out FILE]

`python -m benchmarks.measure` records one number per phase: peak RSS above the post-import
baseline.  This splits it, for the candidates of a resident amount the tensor model does not
count, each case in a fresh process (as the runner does) and with no ``malloc_trim`` between
phases (a real process does not trim either; the baseline is the runner's: after imports,
``gc.collect()`` + ``malloc_trim(0)``):

* **file-backed** resident pages (``/proc/self/statm``'s third field: code and data of shared
  libraries a first call maps, e.g. backward or bf16 kernels of libtorch_cpu.so) vs **anonymous**
  pages (tensors, glibc's heap, thread stacks, oneDNN scratch), both at the sampled peak;
* glibc's own view after the run (``mallinfo2``: heap bytes in use and free in its arenas, bytes
  in mmapped chunks, the number of arenas);
* modules imported after the baseline (``sys.modules``) and threads started.

The peak is over the whole case (build, then prefill/generate or the training steps), sampled
every millisecond from ``/proc/self/statm`` and checked against the kernel's ``VmHWM``.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import ctypes.util
import datetime
import gc
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from .cases import CPU_CASES, Case, select

RESULTS = Path(__file__).resolve().parents[1] / "results"
MARK = "RESULT "
FIELDS = ("case_id", "train_steps", "new_tokens", "phase_peaks_mib", "env", "baseline_bytes", "baseline_file_bytes", "peak_bytes", "peak_hwm_bytes",
          "peak_anon_bytes", "peak_file_bytes", "end_bytes", "end_anon_bytes", "end_file_bytes",
          "heap_in_use_bytes", "heap_free_bytes", "heap_top_free_bytes", "mmapped_bytes", "arenas",
          "live_tensor_bytes", "new_modules", "threads", "torch_threads", "torch_version",
          "transformers_version", "peft_version", "date")


_MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def mallinfo2() -> dict[str, int]:
    """glibc's heap totals over all arenas (glibc >= 2.33), empty elsewhere."""
    libc = _libc()
    fn = getattr(libc, "mallinfo2", None) if libc else None
    if fn is None:
        return {}
    fn.restype = _MallInfo2
    info = fn()
    return {f: int(getattr(info, f)) for f in _MALLINFO2_FIELDS}


def arena_count() -> int:
    """Arenas glibc has made: the ``<heap nr=...>`` entries of ``malloc_info``."""
    libc = _libc()
    if libc is None:
        return 0
    import tempfile

    with tempfile.TemporaryFile() as f:
        fdopen = libc.fdopen
        fdopen.restype = ctypes.c_void_p
        stream = fdopen(os.dup(f.fileno()), b"w")
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        f.seek(0)
        return f.read().decode().count("<heap nr=")


class Sampler:
    """Peak resident bytes and its anonymous/file-backed split, sampled from /proc/self/statm."""

    def __init__(self, interval_s: float = 0.001) -> None:
        self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.peak = (0, 0)
        self._running = False
        self._interval = interval_s
        self._thread: threading.Thread | None = None

    def read(self) -> tuple[int, int]:
        fields = os.pread(self._fd, 128, 0).split()
        return int(fields[1]) * self._page, int(fields[2]) * self._page  # resident, file-backed (shared)

    def _run(self) -> None:
        while self._running:
            now = self.read()
            if now[0] > self.peak[0]:
                self.peak = now
            time.sleep(self._interval)

    def start(self) -> None:
        self.peak = self.read()
        self._running = True
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        if self._thread:
            self._thread.join()


def _hwm() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(case_json: str) -> dict:
    """One case in this process: the runner's phases, no trim between them."""
    import torch

    from fitcheck.measure.meter import _malloc_trim

    from . import workloads as W

    case = Case.from_json(case_json)
    case_id = case.id
    prepared = W.prepare(case)
    versions = W.versions()
    gc.collect()
    _malloc_trim()
    modules_before = set(sys.modules)
    threads_before = len(os.listdir("/proc/self/task"))
    sampler = Sampler()
    base, base_file = sampler.read()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    sampler.start()
    model, _, _ = W.build(case, "cpu", prepared)
    step_peaks = [sampler.peak[0] - base]
    live = 0
    if case.mode in ("prefill", "generate"):
        ids = W.random_ids(case, model, "cpu")
        out, _ = W.prefill(case, model, ids)
        del out
        step_peaks.append(sampler.peak[0] - base)
        if case.mode == "generate":
            seqs, _ = W.generate(case, model, ids)
            del seqs
            step_peaks.append(sampler.peak[0] - base)
    elif case.mode.startswith("train"):
        ids = W.random_ids(case, model, "cpu")
        optimizer = W.make_optimizer(case, model)
        for _ in range(case.train_steps):
            loss, _ = W.forward_loss(case, model, ids, "cpu")
            W.backward(loss, model)
            del loss
            W.optimizer_step(optimizer)
            step_peaks.append(sampler.peak[0] - base)
        live = W.tensor_bytes(dict(optimizer.state))
    sampler.stop()
    peak, peak_file = sampler.peak
    hwm = _hwm()
    gc.collect()
    end, end_file = sampler.read()
    live += sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    info = mallinfo2()
    new_modules = sorted(set(sys.modules) - modules_before)
    return {
        "case_id": case_id, "train_steps": case.train_steps, "new_tokens": case.new_tokens,
        "phase_peaks_mib": " ".join(str(p >> 20) for p in step_peaks), "env": ";".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                                            if k.startswith(("MALLOC_", "OMP_", "ONEDNN_", "DNNL_"))),
        "baseline_bytes": base, "baseline_file_bytes": base_file,
        "peak_bytes": max(peak, hwm) - base, "peak_hwm_bytes": hwm - base,
        "peak_anon_bytes": (peak - peak_file) - (base - base_file), "peak_file_bytes": peak_file - base_file,
        "end_bytes": end - base, "end_anon_bytes": (end - end_file) - (base - base_file),
        "end_file_bytes": end_file - base_file,
        "heap_in_use_bytes": info.get("uordblks", 0), "heap_free_bytes": info.get("fordblks", 0),
        "heap_top_free_bytes": info.get("keepcost", 0), "mmapped_bytes": info.get("hblkhd", 0),
        "arenas": arena_count(), "live_tensor_bytes": live,
        "new_modules": " ".join(m for m in new_modules if "." not in m) + f" ({len(new_modules)})",
        "threads": len(os.listdir("/proc/self/task")) - threads_before,
        "torch_threads": torch.get_num_threads(), **versions, "date": datetime.date.today().isoformat(),
    }


def run_fresh(case: Case, env: dict[str, str]) -> dict | None:
    case_id = case.id
    proc = subprocess.run([sys.executable, "-m", "benchmarks.measure.rss_parts", "--one", case.to_json()],
                          capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1", **env))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        print(f"{case_id}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(line[len(MARK):])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=False, help="glob(s) over CPU case ids")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", type=Path, default=None, help="append rows to this CSV")
    ap.add_argument("--train-steps", type=int, help="override the cases' training steps")
    ap.add_argument("--new-tokens", type=int, help="override the generate cases' new tokens")
    ap.add_argument("--layers", type=int, help="build only this many layers (per-layer amounts scale with it)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(MARK + json.dumps(measure(args.one)), flush=True)
        return 0
    env = dict(kv.split("=", 1) for kv in args.env)
    writer = None
    f = None
    if args.out:
        new = not args.out.exists()
        f = args.out.open("a", newline="")
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            writer.writeheader()
    mib = 2**20
    for case in select(CPU_CASES, args.cases):
        if args.train_steps and case.mode.startswith("train"):
            case = replace(case, train_steps=args.train_steps)
        if args.new_tokens and case.mode == "generate":
            case = replace(case, new_tokens=args.new_tokens)
        if args.layers:
            case = replace(case, layers=args.layers, id=f"{case.id}-L{args.layers}")
        row = run_fresh(case, env)
        if row is None:
            continue
        if writer and f:
            writer.writerow(row)
            f.flush()
        print(f"{row['case_id']:38s} {row['env']:20s} steps {row['train_steps']} new {row['new_tokens']} "
              f"[{row['phase_peaks_mib']}] peak {row['peak_bytes'] / mib:6.0f} "
              f"(anon {row['peak_anon_bytes'] / mib:6.0f} file {row['peak_file_bytes'] / mib:4.0f}) "
              f"end {row['end_bytes'] / mib:6.0f} heap used {row['heap_in_use_bytes'] / mib:6.0f} "
              f"free {row['heap_free_bytes'] / mib:6.0f} mmapped {row['mmapped_bytes'] / mib:6.0f} "
              f"arenas {row['arenas']} live {row['live_tensor_bytes'] / mib:6.0f} threads {row['threads']} "
              f"mods {row['new_modules'][-60:]}", flush=True)
    if f:
        f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
