"""Runtime helpers shared by every service: settings, NATS connection, typed endpoints and requests."""
