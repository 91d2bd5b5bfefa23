"""Where a process's resident memory lies, by kind of mapping (Linux ``/proc/PID/smaps``).

An RSS that creeps says nothing of what holds it; the mappings do. In a CPython service:

- ``brk_heap``: glibc's main malloc arena, the ``[heap]`` mapping (objects over 512 bytes, C buffers
  of the main thread);
- ``anonymous``: every other private anonymous mapping: CPython's small-object arenas (1 MiB
  each, adjacent ones merged into one mapping by the kernel), other threads' malloc arenas (64 MiB
  reserved each, touched as used), thread stacks, large mallocs;
- ``files``: code and data of the interpreter and extension modules, shared libraries.

Growth in ``anonymous`` while ``brk_heap`` stays flat points at small Python objects (seen by
tracemalloc: ``leak_check``) or at a thread's arena; growth in ``brk_heap`` at larger allocations.
"""

from __future__ import annotations

from pathlib import Path


def resident_by_region(pid: int) -> dict[str, int] | None:
    """Resident KiB per kind of mapping of ``pid``; None where there is no ``/proc`` (not Linux) or
    the process is gone."""
    totals = {"brk_heap_kib": 0, "anonymous_kib": 0, "files_kib": 0, "other_kib": 0}
    kind = "other_kib"
    try:
        with Path(f"/proc/{pid}/smaps").open() as smaps:
            for line in smaps:
                head = line.split(None, 1)[0]
                if head.endswith(":"):
                    if head == "Rss:":
                        totals[kind] += int(line.split()[1])
                    continue
                fields = line.split()  # a mapping: address perms offset dev inode [path]
                path = fields[5] if len(fields) > 5 else ""
                if path == "[heap]":
                    kind = "brk_heap_kib"
                elif not path:
                    kind = "anonymous_kib"
                elif path.startswith("/"):
                    kind = "files_kib"
                else:
                    kind = "other_kib"  # [stack], [vdso]...
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return totals
