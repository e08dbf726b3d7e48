"""``python -m vtrepro.encode``: the encode command."""
import sys

from vtrepro.encode.writer import main

sys.exit(main())
