"""The HTTP/SSE gateway (Litestar)."""
