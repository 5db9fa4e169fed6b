"""The placement simulator: replay a workload trace through orch's planner and simple baselines.

`trace` reads and writes traces, `generate` makes a synthetic one, `scenario` says what
is owned and rented, `engine` runs one policy over a trace, `policies` holds the
policies, `oracle` the hindsight lower bound and `run` puts them together.
"""
