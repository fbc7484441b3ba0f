"""Bulk sends that cannot be unsent: audiences, rendering, providers, dispatch."""
