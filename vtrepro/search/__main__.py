"""``python -m vtrepro.search``: the search command."""
import sys

from vtrepro.search.command import main

sys.exit(main())
