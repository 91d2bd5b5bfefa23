"""Where a process's resident memory lies, by kind of mapping (Linux ``/proc/PID/smaps``).

An RSS that creeps says nothing of what holds it; the mappings do. In a CPython service:

- ``brk_heap``: glibc's main malloc arena, the ``[heap]`` mapping (objects over 512 bytes, C buffers
  of the main thread);
- ``thread_arenas``: the malloc arenas glibc gives other threads (a worker thread's buffers: the
  SQLite driver's, ``asyncio.to_thread`` work). Each is 64 MiB of address space reserved at a 64 MiB
  boundary and touched as used, which is how they are told apart from other anonymous mappings (a
  heuristic: an unrelated mapping on that boundary is one chance in 16 384). There are at most
  ``8 x cores`` of them (glibc's ``M_ARENA_MAX`` default), each as large as its peak use;
- ``anonymous``: every other private anonymous mapping: CPython's small-object arenas (1 MiB
  each, adjacent ones merged into one mapping by the kernel), thread stacks, large mallocs;
- ``files``: code and data of the interpreter and extension modules, shared libraries.

``threads`` (a count, not KiB) and ``thread_arenas`` (how many) say whether new threads brought new
arenas. Growth in ``anonymous`` while ``brk_heap`` stays flat points at small Python objects (seen by
tracemalloc: ``leak_check``); in ``thread_arenas`` at work done in threads; in ``brk_heap`` at
larger allocations of the event loop's thread.
"""

from __future__ import annotations

from pathlib import Path

# glibc's HEAP_MAX_SIZE on 64-bit: a non-main arena's heap is reserved at this size and alignment.
_ARENA_HEAP = 64 * 2**20


def resident_by_region(pid: int) -> dict[str, int] | None:
    """Resident KiB per kind of mapping of ``pid``, with its thread and thread-arena counts; None
    where there is no ``/proc`` (not Linux) or the process is gone."""
    totals = {"brk_heap_kib": 0, "thread_arenas_kib": 0, "anonymous_kib": 0, "files_kib": 0, "other_kib": 0}
    arenas = 0
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
                elif not path and int(fields[0].split("-", 1)[0], 16) % _ARENA_HEAP == 0 and fields[1] == "rw-p":
                    kind = "thread_arenas_kib"
                    arenas += 1
                elif not path:
                    kind = "anonymous_kib"
                elif path.startswith("/"):
                    kind = "files_kib"
                else:
                    kind = "other_kib"  # [stack], [vdso]...
        threads = _threads(pid)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return {**totals, "thread_arenas": arenas, "threads": threads}


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0
