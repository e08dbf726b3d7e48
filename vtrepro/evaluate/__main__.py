"""``python -m vtrepro.evaluate``: the evaluate command."""
import sys

from vtrepro.evaluate.trec import main

sys.exit(main())
