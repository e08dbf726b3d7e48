"""``python -m vtrepro.mlm``: the old spelling of ``python -m vtrepro mlm``, kept working."""
import sys

from vtrepro.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["mlm", *sys.argv[1:]]))
