import sys

from kir.cli import main

sys.exit(main())
