"""Approval requests (human sign-off for consequential agent actions) arrive with the dashboard issue."""
