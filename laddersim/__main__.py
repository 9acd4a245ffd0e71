import sys

from laddersim.cli import main

sys.exit(main())
