"""Kernel families: one module each, templates in templates/, search spaces in tuning/."""
