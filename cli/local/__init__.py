"""Running Autarch on one machine (``autarch up``): the supervisor, the embedded nats-server, the local cluster.

Nothing here runs inside a service: what services share at run time is ``autarch.runtime``.
"""
