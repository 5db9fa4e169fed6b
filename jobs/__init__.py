"""What runs on the target: the Ray Train runner, its per-worker helpers and built-in jobs."""
