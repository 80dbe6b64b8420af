import sys

from corun_sglang.cli import main

sys.exit(main())
