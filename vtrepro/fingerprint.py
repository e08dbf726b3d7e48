"""``python -m vtrepro.fingerprint``: the old spelling of ``python -m vtrepro fingerprint``, kept working."""
import sys

from vtrepro.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["fingerprint", *sys.argv[1:]]))
