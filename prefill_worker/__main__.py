import sys

from prefill_worker.server import main

sys.exit(main())
