"""The experiments behind `tvk-bench`; results go to benchmarks/results/<device>/."""
