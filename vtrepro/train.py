"""``python -m vtrepro.train``: the old spelling of ``python -m vtrepro train``, kept working."""
import sys

from vtrepro.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
