import sys

from decode_worker.server import main

sys.exit(main())
