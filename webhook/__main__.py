"""`python -m webhook` is `gpu-admission`."""

import sys

from webhook.cli import main

sys.exit(main())
