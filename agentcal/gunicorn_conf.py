"""gunicorn hooks for `agentcal run` (and the production command line, which loads this file too)."""

from __future__ import annotations

import re
from typing import Any

from gunicorn.glogging import Logger

# A sign-in link's token is its path's last part (accounts/urls.py), and the link stays usable until its
# button is pressed: a mail scanner's GET must not leave a live token in the access log for whoever reads it.
_MAGIC_LINK_TOKEN = re.compile(r"(/auth/magic/)[^/?#\s\"]+")


class AccessLogger(Logger):
    """gunicorn's logger with sign-in link tokens left out of every access-log field (the request line,
    the path, the referrer, any header a custom format names)."""

    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        return {
            name: _MAGIC_LINK_TOKEN.sub(r"\1[redacted]", value) if isinstance(value, str) else value
            for name, value in atoms.items()
        }


logger_class = AccessLogger

# Workers are managed by signals (`agentcal run`, a process supervisor), never through gunicorn's control
# socket, whose default path ($XDG_RUNTIME_DIR or $HOME/.gunicorn/gunicorn.ctl) every server of the host
# shares: a second server's exit removed the first's, and its commands reached the wrong server.
control_socket_disable = True


def child_exit(server: Any, worker: Any) -> None:
    # A worker that exits leaves its metric files; mark them dead so gauges stop counting it.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
