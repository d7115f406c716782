"""The download line (and, for fine-tuning, the saves line) of a check, and its JSON section.

    Download: 14.19 GiB (safetensors, bf16, Qwen/Qwen2.5-7B-Instruct; estimated: ...) to ~/.cache/huggingface/hub
              — 212.0 GiB free
    Saves:    0.45 GiB per checkpoint (LoRA adapter ... + optimizer.pt ...) to the output folder ~/work — 212.0 GiB free

JSON ``download`` (fitcheck.check/1): {download_bytes, checkpoint_bytes, format, repo, exact, basis,
already_at, place, download_dir, disk_free_bytes, status, reason, saves: {bytes_per_checkpoint,
weights_bytes, optimizer_bytes, detail, output_dir, disk_free_bytes} | null}.
"""

from __future__ import annotations

import os

from fitcheck.engines.download import DISK_DOES_NOT_FIT, Download
from fitcheck.storage import DOWNLOAD_DIR, PLACE_VARIABLE, Place
from fitcheck.units import format_gib


def _home(path: str) -> str:
    """A path as people write it: the home folder as ~ (display only; JSON keeps the full path)."""
    home = os.path.expanduser("~")
    if home and home != "/" and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home):]
    return path


def _free(place: Place | None, unknown: str) -> str:
    if place is None or place.free_bytes is None:
        return unknown
    return f"{format_gib(place.free_bytes, 1)} free"


def _download_alone_fails(d: Download) -> bool:
    free = d.place.free_bytes if d.place is not None else None
    return bool(d.download_bytes) and free is not None and d.download_bytes > free


def download_lines(d: Download | None, brief: bool = False) -> list[str]:
    """The Download: line (and Saves: for training); ``brief`` leaves out how the size was found, what a
    checkpoint holds and a free space that was not checked, keeping a disk that is too small."""
    if d is None:
        return []
    a = d.artifact
    source = a.repo or "no repository known to fitcheck"
    alone = _download_alone_fails(d)
    if brief and not d.present_at and not alone and (d.place is None or d.place.free_bytes is None):
        lines = [f"Download: {format_gib(a.bytes)} ({a.format}, {source})"]
    elif d.present_at:
        lines = [f"Download: none — already here: {_home(d.present_at)} ({format_gib(a.bytes)}, {a.format})"]
    else:
        line = f"Download: {format_gib(a.bytes)} ({a.format}, {source}; {a.basis})"
        if d.place is not None:
            line += f" to {_home(d.place.path)}"
            if d.download_dir and d.place.kind == DOWNLOAD_DIR and a.place in PLACE_VARIABLE:
                line += f" (set {PLACE_VARIABLE[a.place]}={_home(d.place.path)} for the download to land there)"
        if alone:
            line += (f" — only {_free(d.place, 'unknown')}: does not fit on disk; use --download-dir PATH on a disk "
                     "with room, or a smaller format")
        elif d.place is None or d.place.free_bytes is None:
            line += " — " + (d.place.why_unknown if d.place is not None and d.place.why_unknown else d.reason)
        else:
            line += " — " + _free(d.place, "")
        lines = [line]
    if d.saves is not None:
        s = d.saves
        line = f"Saves:    {format_gib(s.total_bytes)} per checkpoint" + ("" if brief else f" ({s.detail})") \
            + " to the output folder"
        if d.output is not None:
            line += f" {_home(d.output.path)}"
        if d.status == DISK_DOES_NOT_FIT and not alone:
            line += f" — {d.reason}: does not fit on disk"
        elif d.output is not None and d.output.free_bytes is not None:
            line += " — " + _free(d.output, "")
        lines.append(line)
    return lines


def download_document(d: Download | None) -> dict | None:
    if d is None:
        return None
    a = d.artifact
    saves = None
    if d.saves is not None:
        saves = {"bytes_per_checkpoint": d.saves.total_bytes, "weights_bytes": d.saves.weights_bytes,
                 "optimizer_bytes": d.saves.optimizer_bytes, "detail": d.saves.detail,
                 "output_dir": d.output.path if d.output is not None else None,
                 "disk_free_bytes": d.output.free_bytes if d.output is not None else None}
    return {
        "download_bytes": d.download_bytes,
        "checkpoint_bytes": a.bytes,
        "format": a.format,
        "repo": a.repo,
        "exact": a.exact,
        "basis": a.basis,
        "already_at": d.present_at,
        "place": a.place if not d.download_dir else DOWNLOAD_DIR,
        "download_dir": d.place.path if d.place is not None else None,
        "disk_free_bytes": d.place.free_bytes if d.place is not None else None,
        "status": d.status,
        "reason": d.reason,
        "saves": saves,
    }
