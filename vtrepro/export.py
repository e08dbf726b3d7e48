"""``python -m vtrepro.export``: the old spelling of ``python -m vtrepro export``, kept working."""
import sys

from vtrepro.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["export", *sys.argv[1:]]))
