"""Loop sessions (seed 001): a goal iterated on unattended, one signalled iteration at a time."""
