"""The job service: turns a spec into a recorded, launched job and keeps records in step
with the backends (`orch.Orch`), plans (`planning`), checks (`doctor`), receives uploads
(`upload`) and prices what ran (`cost_report`). Importing the package imports none of them.

`Orch` is one class built from one module per job, each a layer over the one before:
core (settings, store, providers, bounded backend calls), budgets, launch_spec (what a
provider runs), submitting (check, place, record, launch), following (refresh, logs,
cancel) and pipelines (stages launched in order)."""
