"""The wire: every command, query, reply, error and event Autarch sends, and the NATS subjects.

Everything here is a plain :class:`msgspec.Struct`; behaviour lives in the services. The
evolution rule for anything that has ever been sent or stored: new fields get defaults,
nothing is renamed or retyped (``tests/contracts`` guards it with stored fixtures).
"""
