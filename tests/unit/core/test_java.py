"""The JVM Pyserini starts leaves Python's native stack usable."""


def test_native_code_keeps_the_main_thread_stack_after_the_jvm_starts():
    """Without -Xss the JVM guards Python's main thread at 1 MB and deep native recursion segfaults: a repr 9,000
    lists deep does (3.11 and 3.13), and stays under the C recursion limit of Python 3.12+ (10,000 on 3.13)."""
    import subprocess
    import sys

    code = ("import sys; from vtrepro.core.java import start_jvm; start_jvm(); sys.setrecursionlimit(10**6); x = []\n"
            "for _ in range(9000): x = [x]\n"
            "print(len(repr(x)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "18002", result.stderr[-500:]
