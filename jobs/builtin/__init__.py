"""Built-in jobs by name; plain strings so the job-file loader can check names without torch.
Each loop's module is relative to the runner package (`jobs` here, `_orch_runner` on a target)."""

BUILTIN_JOBS = {
    "image-classification": ".builtin.image_classification:train_loop",
}
