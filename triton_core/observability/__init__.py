"""What an operator sees: statistics, metrics, logs, traces."""
