"""The ipyparallel controller of a pool on one host, listening on ipc sockets in the pool's private directory.

Started by the kernel's launcher (kernel/launch/launcher.py) as `python -m jupyter_hvd.processes.controller` with
ipyparallel's own arguments. On loopback TCP any local user could send the controller junk: raw bytes count as
ZeroMQ's old ZMTP 1.0, which has no socket types, so they were passed on to the kernel's client, which then stopped
taking replies, and the pool was lost (tests/test_attacks.py). ipc sockets in a 0700 directory take no one else.

ipyparallel 9.2 names an ipc socket `<interface>-<port>` where it binds it, but its clients and engines connect to
`<interface>:<port>`: this module has the controller bind the names they look for.
"""

from __future__ import annotations

from typing import Any


def _bind_where_clients_look() -> None:
    from ipyparallel.controller.app import IPController

    construct_url = IPController.construct_url

    def url(self: Any, kind: str, channel: str, index: Any = None) -> str:
        made = construct_url(self, kind, channel, index)
        prefix, _, port = made.rpartition("-")
        return f"{prefix}:{port}" if made.startswith("ipc://") and port.isdigit() else made

    IPController.construct_url = url


def main() -> None:
    """Run ipyparallel's controller with the command line given."""
    _bind_where_clients_look()
    from ipyparallel.controller.app import main as controller_main

    controller_main()


if __name__ == "__main__":
    main()
