"""Helpers for the test suite (not collected as tests)."""
