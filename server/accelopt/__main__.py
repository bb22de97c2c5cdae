import sys

from accelopt.cli import main

sys.exit(main())
