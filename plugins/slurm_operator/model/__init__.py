"""The model: Slurm states, the events triggers send, what hooks return, the task ledger, errors, names."""
