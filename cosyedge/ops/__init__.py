"""Keeping an installed box healthy: the output janitor and the self-test."""
