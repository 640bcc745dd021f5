"""Workflows (seed 003/000): a request taken through the stages to a reviewed branch, pulse by pulse."""
