"""The browser UI served by the gateway: sign-in by one-time link, pages, and their static assets.

Nothing here imports Litestar at package level: the CLI (``autarch ui``) mints login links with
:mod:`.signin` and may run where the gateway's extra is not installed.
"""
