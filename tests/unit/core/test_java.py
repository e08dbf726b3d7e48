"""The JVM Pyserini starts leaves Python's native stack usable."""
import subprocess
import sys

import pytest

DEPTH = 8000
"""Nested lists whose ``repr`` recurses in C through more than the 1 MB the JVM would guard without -Xss (it
crashes from about 7,000 levels on Python 3.11 and 3.13), yet within the C recursion limit of Python 3.12+."""
NESTED_REPR = (f"import sys; sys.setrecursionlimit(10**6); x = []\nfor _ in range({DEPTH}): x = [x]\n"
               "print(len(repr(x)))")


def test_native_code_keeps_the_main_thread_stack_after_the_jvm_starts():
    """Without -Xss the JVM guards Python's main thread at 1 MB and deep native recursion segfaults."""
    alone = subprocess.run([sys.executable, "-c", NESTED_REPR], capture_output=True, text=True, timeout=60)
    if "RecursionError" in alone.stderr:
        pytest.skip(f"Python {sys.version.split()[0]} stops native recursion before {DEPTH} levels (its C recursion limit)")
    code = "from vtrepro.core.java import start_jvm; start_jvm()\n" + NESTED_REPR
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == str(2 * DEPTH + 2), result.stderr[-500:]
