"""The orchestrator: workflow aggregates, their state machines, and the event relay."""
