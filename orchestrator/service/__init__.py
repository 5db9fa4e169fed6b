"""The job service: turns a spec into a recorded, launched job and keeps records in step
with the backends (`orch.Orch`), plans (`placing`, `planning`), checks (`doctor`), receives
uploads (`upload`) and prices what ran (`cost_report`). Importing the package imports none
of them.

The service is a small `core.Core` (settings, store, clock, providers) handed to plain
modules: placing (the one plan entry), submitting (check, record, launch), launch_spec
(what a provider runs), budgets, following (refresh, logs, cancel), pipelines (stages
launched in order) and schedule_rules (cron schedules); `orch.Orch` is their facade."""
