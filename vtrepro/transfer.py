"""``python -m vtrepro.transfer``: the old spelling of ``python -m vtrepro transfer``, kept working."""
import sys

from vtrepro.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["transfer", *sys.argv[1:]]))
