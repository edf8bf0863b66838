"""The autotuner: Optuna over the search spaces in tuning/, results into tuned_configs/."""
