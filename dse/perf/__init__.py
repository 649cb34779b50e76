"""Performance models: pure functions from columns to columns."""
