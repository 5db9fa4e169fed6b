"""Built-in jobs by name; plain strings so the job-file loader can check names without torch."""

BUILTIN_JOBS = {
    "image-classification": "jobs.builtin.image_classification:train_loop",
}
