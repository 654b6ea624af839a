"""Adapters that make poolkit poolers parts of other libraries (each behind its own extra)."""
