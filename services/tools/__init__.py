"""The tools service: executes every agent tool of seed 004 inside a confined worktree."""
