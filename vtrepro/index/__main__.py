"""``python -m vtrepro.index``: the index command."""
import sys

from vtrepro.index.lucene import main

sys.exit(main())
