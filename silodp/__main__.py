import sys

from silodp.cli import main

sys.exit(main())
