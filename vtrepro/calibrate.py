"""``python -m vtrepro.calibrate``: the old spelling of ``python -m vtrepro calibrate``, kept working."""
import sys

from vtrepro.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["calibrate", *sys.argv[1:]]))
