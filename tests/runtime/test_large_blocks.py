"""``map_large_blocks``: a large buffer a service frees goes back to the system, however many came before it."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A child process, so the allocator starts fresh: two 16 MiB buffers made and freed one after the other, then the
# resident memory compared with what it was before them.
_CHILD = """
import sys
from autarch.runtime.process import map_large_blocks

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

if sys.argv[1] == "set" and not map_large_blocks():
    print("unsupported")
    raise SystemExit
before = rss_kib()
for _ in range(2):
    block = bytearray(16 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    del block
print(rss_kib() - before)
"""


def _kept_kib(mode: str) -> int | None:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True).stdout
    return None if out.strip() == "unsupported" else int(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_large_buffer_freed_after_another_is_given_back():
    kept = _kept_kib("set")
    if kept is None:
        pytest.skip("no glibc mallopt here")
    assert kept < 4 * 1024
