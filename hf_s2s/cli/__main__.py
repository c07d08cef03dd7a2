"""``python -m hf_s2s.cli`` is the ``hf-s2s`` command."""

import sys

from hf_s2s.cli import main

sys.exit(main())
