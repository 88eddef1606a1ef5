"""The control socket: an engine opened with `SessionConfig(control=True)`
listens on a 0600 unix socket under `home/control/`, answering JSON-RPC 2.0 lines from its
own user only (`sessions.list`, `sessions.cancel`, `sessions.send`); `subsessions watch`
finds it there.

`paths` names, binds and finds the sockets (and clears stale ones); `rpc` is the line
protocol; `methods` answers it against an engine; `server` serves it; `client` asks it.
"""

CONTROL_HELP = ("open a control socket under HOME/control/ (your user only), through which "
                "`subsessions watch` cancels (c) and messages (m) this run's sessions")
