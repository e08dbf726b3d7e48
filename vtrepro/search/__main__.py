"""``python -m vtrepro.search``: the search command."""
import sys

from vtrepro.search.lucene import main

sys.exit(main())
