"""Bridges from other libraries into Tune results (`tune.integration`)."""
