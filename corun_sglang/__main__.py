import sys

from corun_sglang.commands.cli import main

sys.exit(main())
