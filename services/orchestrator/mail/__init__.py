"""Coordination mail (seed 002): the messages between an epic's workers and its coordinator."""
