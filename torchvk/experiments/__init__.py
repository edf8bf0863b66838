"""The six experiments behind `tvk-bench` that need torch."""
