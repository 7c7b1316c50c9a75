"""capmark.plan: calibrate queueing models from stored runs, validate them against every step, predict."""
