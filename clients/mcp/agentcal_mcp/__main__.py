from __future__ import annotations

import sys

from agentcal_mcp.cli import main

sys.exit(main())
