"""The agent runner: agent sessions as event-sourced aggregates, the turn loop, the model client and deltas."""
