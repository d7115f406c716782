"""``CUDA_VISIBLE_DEVICES`` as CUDA itself reads it.

Rules (CUDA C Programming Guide, 'CUDA Environment Variables'; MIG User Guide, 'CUDA Device
Enumeration'), with the edge cases of nvitop's ``Device.parse_cuda_visible_devices``
(XuehaiPan/nvitop, nvitop/api/device.py):

- unset: every device, in NVML order;  '' (or only spaces): none;
- a comma list, each entry trimmed, of indices or of UUIDs ('GPU-...' / 'MIG-...', any unique
  prefix); the first entry sets the kind, and a later entry of the other kind is invalid;
- the list ENDS at the first invalid entry (not a number or UUID, an index out of range, an
  unknown or ambiguous UUID): '0,5,1' on 2 GPUs is [0]; '-1' is none;
- any duplicate makes the whole value invalid: no device at all ('0,0' -> []).
"""

from __future__ import annotations

import functools

from fitcheck.probe.files import small_index


def parse_cuda_visible_devices(value: str | None, device_count: int, uuids: list[str]) -> list[int | str]:
    """The devices CUDA will see, in CUDA order: ints are NVML indices of whole GPUs, strings
    are full MIG instance UUIDs.

    ``uuids``: the UUIDs of GPUs 0 .. device_count-1 in NVML order, optionally followed by the
    UUIDs of MIG instances ('MIG-...').
    """
    return list(_parse(value, device_count, tuple(uuids)))


@functools.lru_cache(maxsize=64)
def _parse(value: str | None, device_count: int, uuids: tuple[str, ...]) -> tuple[int | str, ...]:
    if value is None:
        return tuple(range(device_count))
    gpu_uuids = uuids[:device_count]
    chosen: list[int | str] = []
    seen_tokens: set[str] = set()
    use_indices: bool | None = None
    device: int | str
    for token in (part.strip() for part in value.split(",")):
        if token in seen_tokens:
            return ()  # a duplicate invalidates the whole list
        seen_tokens.add(token)
        if token.isdigit():  # any Unicode digit ('²') or a 5,000-digit index ends the list, as CUDA's strtol does
            index = small_index(token)
            if use_indices is False or index is None or index >= device_count:
                break
            use_indices, device = True, index
        elif token.startswith(("GPU-", "MIG-")) and use_indices is not True:
            matches = [uuid for uuid in uuids if uuid.startswith(token)]
            if len(matches) != 1:
                break
            use_indices = False
            uuid = matches[0]
            device = gpu_uuids.index(uuid) if uuid in gpu_uuids else uuid
        else:
            break
        if device in chosen:
            return ()  # two spellings of the same device: a duplicate too
        chosen.append(device)
    return tuple(chosen)
