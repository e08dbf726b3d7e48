"""``python -m vtrepro.regress``: the regress command."""
import sys

from vtrepro.regress.runner import main

sys.exit(main())
