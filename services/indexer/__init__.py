"""The indexer service: hybrid (BM25 + dense) semantic search over a project and each pulse's worktree.

``engine.Indexer`` is the whole capability in-process (the CLI uses it directly); ``service`` puts
it behind NATS endpoints with background jobs and progress events.
"""
