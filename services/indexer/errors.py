"""The indexer's typed failure, shared by the engine, the service and the CLI."""

from __future__ import annotations

from typing import Any

from autarch.contracts.errors import ErrorCode
from autarch.contracts.indexer import NOT_INDEXED_MESSAGE, IndexerErrorCode
from autarch.runtime.errors import ServiceFailure

__all__ = ["IndexerError"]


class IndexerError(ServiceFailure):
    """A request the indexer refuses, with a domain code; the service answers it as a typed error."""

    @classmethod
    def not_indexed(cls, **details: Any) -> IndexerError:
        return cls(IndexerErrorCode.NOT_INDEXED, NOT_INDEXED_MESSAGE, details)

    @classmethod
    def not_a_repository(cls, message: str, **details: Any) -> IndexerError:
        return cls(IndexerErrorCode.NOT_A_REPOSITORY, message, details)

    @classmethod
    def unknown_project(cls, project: str) -> IndexerError:
        return cls(IndexerErrorCode.UNKNOWN_PROJECT, f"no project {project!r} was ever indexed", {"project": project})

    @classmethod
    def unknown_commit(cls, message: str, **details: Any) -> IndexerError:
        return cls(IndexerErrorCode.UNKNOWN_COMMIT, message, details)

    @classmethod
    def invalid_query(cls, message: str) -> IndexerError:
        return cls(IndexerErrorCode.INVALID_QUERY, message, {})

    @classmethod
    def invalid_pattern_weights(cls, message: str, **details: Any) -> IndexerError:
        return cls(IndexerErrorCode.INVALID_PATTERN_WEIGHTS, message, details)

    @classmethod
    def bad_request(cls, message: str, **details: Any) -> IndexerError:
        return cls(ErrorCode.BAD_REQUEST, message, details)
