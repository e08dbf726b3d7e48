"""``python -m vtrepro.report``: the report command."""
import sys

from vtrepro.report.command import main

sys.exit(main())
