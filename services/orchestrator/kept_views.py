"""The orchestrator's kept views: the shared implementation lives in ``runtime/kept_views.py`` (the agent runner
keeps its settled sessions' summaries the same way); this name stays for the orchestrator's books."""

from autarch.runtime.kept_views import KeptViews, kept_views_for, view_shape

__all__ = ["KeptViews", "kept_views_for", "view_shape"]
