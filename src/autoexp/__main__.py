"""``python -m autoexp``: the same as the ``autoexp`` command."""

import sys

from autoexp.cli.main import main

sys.exit(main())
