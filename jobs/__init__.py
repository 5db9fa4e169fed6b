"""What runs on the target: the Ray Train runner, its per-worker helpers and built-in jobs.

Here, and in orch's own process, the package is `jobs`. On a target orch ships and starts
it as SHIPPED_AS, a name no job's own modules take, so that a job whose workdir holds a
`jobs` package of its own imports that one, and the runner is not shadowed by it. Every
import inside the package is relative, so it runs under either name; a job's loop without
a `jobs` of its own still imports orch's helpers as `jobs` (train_loops.offer_public_name).
"""

SHIPPED_AS = "_orch_runner"
