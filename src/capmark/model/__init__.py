"""capmark.model: the analytic engine (operational laws, open and closed queueing networks, USL)."""
