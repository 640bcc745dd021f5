"""Autarch services, one package each; a service imports only contracts and runtime."""
