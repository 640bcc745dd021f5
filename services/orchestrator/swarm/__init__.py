"""Swarms (seed 002): a bead plan's epic worked by parallel workers, with claims, leases and handoffs."""
