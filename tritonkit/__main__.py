import sys

from tritonkit._entry import main

sys.exit(main())
