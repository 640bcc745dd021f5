"""The orchestrator: workflows, loop sessions and swarms (with their mail) as bounded contexts on one Book,
their drivers, and the event relay (``docs/ARCHITECTURE.md``, "The orchestrator's contexts")."""
