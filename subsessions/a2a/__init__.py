"""`subsessions a2a`: the engine served over A2A (Agent2Agent) with the official `a2a-sdk`.
A context is a top-level session, a task one task of it; `input-required` is
the session's `ask_user`; a task's cancel cascades to its children.

`command` checks the flags, `server` builds the SDK's app and serves it, `executor` and
`contexts` map the SDK's tasks to sessions, `runs` is one task's run, `callers` who is
calling, `card` the agent card. The consume side (a profile's `a2a_url`) is a model client:
`subsessions.models.a2a_remote`.
"""
