"""macOS ``sysctlbyname`` through ctypes (libc): no ``sysctl`` process is started."""

from __future__ import annotations

import sys


def read_sysctl(names: list[str]) -> dict[str, int | str]:
    """{name: value} for each readable name (integers as int, strings as str); {} off macOS."""
    if sys.platform != "darwin":
        return {}
    try:
        import ctypes

        libc = ctypes.CDLL("/usr/lib/libc.dylib", use_errno=True)
    except OSError:
        return {}
    sysctlbyname = libc.sysctlbyname
    sysctlbyname.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                             ctypes.c_void_p, ctypes.c_size_t]
    sysctlbyname.restype = ctypes.c_int
    values: dict[str, int | str] = {}
    for name in names:
        size = ctypes.c_size_t(0)
        if sysctlbyname(name.encode(), None, ctypes.byref(size), None, 0) != 0 or size.value == 0:
            continue
        buffer = ctypes.create_string_buffer(size.value)
        if sysctlbyname(name.encode(), buffer, ctypes.byref(size), None, 0) != 0:
            continue
        raw = buffer.raw[: size.value]
        if size.value in (4, 8) and not name.endswith(("brand_string", "model")):
            values[name] = int.from_bytes(raw, sys.byteorder, signed=False)
        else:
            values[name] = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
    return values
