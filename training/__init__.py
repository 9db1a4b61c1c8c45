"""Training from labels: datasets, jobs and the trainer worker (arrives with the training issue)."""
