import sys

from client.bench.cli import main

sys.exit(main())
