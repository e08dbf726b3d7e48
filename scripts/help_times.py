"""Wall time of ``python -m vtrepro <command> --help`` for every command, each run in a fresh process: what a
user waits for help (the target: under a second on an idle machine).

    python scripts/help_times.py [--python PYTHON] [--repeat 5] [--limit 1.0]

Prints a markdown table (the entry's own ``--help``, then each command: best and median of ``--repeat`` runs,
beside a bare interpreter start) and exits 1 when a median is over ``--limit`` seconds.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vtrepro.__main__ import COMMANDS  # noqa: E402  (this checkout's command table)


def wall_times(argv: list[str], repeat: int) -> list[float]:
    """Seconds each of ``repeat`` runs of ``argv`` took; a run that fails stops the script."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run vtrepro with")
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (best and median reported)")
    parser.add_argument("--limit", type=float, default=1.0, help="seconds a median may take")
    args = parser.parse_args()
    runs = {"(python -c pass)": [args.python, "-c", "pass"], "(entry) --help": [args.python, "-m", "vtrepro", "--help"]}
    runs |= {f"{name} --help": [args.python, "-m", "vtrepro", name, "--help"] for name in COMMANDS}
    rows, over = ["| command | best s | median s |", "|---|---:|---:|"], []
    for label, argv in runs.items():
        times = wall_times(argv, args.repeat)
        median = statistics.median(times)
        rows.append(f"| `{label}` | {min(times):.2f} | {median:.2f} |")
        if median > args.limit and label.endswith("--help"):
            over.append(label)
    print("\n".join(rows))
    if over:
        print(f"over {args.limit} s: {', '.join(over)}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
